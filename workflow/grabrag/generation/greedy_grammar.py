"""Greedy decoding under a GBNF grammar without filtering the whole vocabulary per token.

llama-cpp-python puts the grammar sampler before the greedy one, so at every new token the
grammar checks all ~49k vocabulary entries: on 2 CPU cores that is ~55 ms a token for
SmolLM2, four times the model's own cost per token. Under greedy decoding the chosen token is
the highest-logit token the grammar allows. So we check the unconstrained argmax first (one
grammar check); only when the grammar rejects it is the whole vocabulary filtered, exactly as
before. The tokens chosen are the same, bit for bit (llama.cpp's greedy sampler and
``numpy.argmax`` both take the first of equal maxima), which the tests check on the real
model. llama.cpp's own common sampler also samples first and checks the grammar after.

Only the chain of ``temperature == 0`` with a grammar and no logits processor is replaced;
every other call goes through llama-cpp-python's own sampler chain.
"""

from __future__ import annotations

import ctypes
import math
import types
from typing import Any

import numpy as np


def install(llm: Any) -> None:
    """Make ``llm`` (a ``llama_cpp.Llama``) use the argmax-first grammar check for greedy,
    grammar-constrained calls."""
    import llama_cpp
    from llama_cpp import _internals

    original = llm._init_sampler
    # Tokens decided by the argmax check alone / by filtering the whole vocabulary.
    llm.argmax_first_counts = {"argmax": 0, "full": 0}

    def init_sampler(self: Any, **kwargs: Any) -> Any:
        grammar = kwargs.get("grammar")
        if grammar is None or kwargs.get("temp") != 0.0 or kwargs.get("logits_processor"):
            return original(**kwargs)
        chain = _internals.LlamaSampler()
        # The same (neutral by default) penalties stage as llama-cpp-python's chain.
        chain.add_penalties(
            n_vocab=self._n_vocab,
            penalty_last_n=self.last_n_tokens_size,
            penalty_repeat=kwargs.get("repeat_penalty", 1.0),
            penalty_freq=kwargs.get("frequency_penalty", 0.0),
            penalty_present=kwargs.get("presence_penalty", 0.0),
        )
        argmax_first = ArgmaxFirstGrammar(
            llama_cpp, self._model.vocab, grammar, self.argmax_first_counts
        )
        llama_cpp.llama_sampler_chain_add(chain.sampler, argmax_first.pointer)
        # The chain must not free our Python-owned sampler: LlamaSampler removes the samplers
        # listed here before freeing the chain; ours frees its grammar when collected.
        chain.custom_samplers.append(
            (llama_cpp.llama_sampler_chain_n(chain.sampler) - 1, argmax_first)
        )
        chain.add_greedy()
        return chain

    llm._init_sampler = types.MethodType(init_sampler, llm)


class ArgmaxFirstGrammar:
    """A llama.cpp sampler (apply / accept / reset) wrapping llama.cpp's grammar sampler."""

    def __init__(self, llama_cpp: Any, vocab: Any, grammar: Any, counts: dict[str, int]) -> None:
        self._lib = llama_cpp
        self.counts = counts
        self.grammar = llama_cpp.llama_sampler_init_grammar(
            vocab, grammar._grammar.encode("utf-8"), grammar._root.encode("utf-8")
        )
        if not self.grammar:
            raise ValueError("llama.cpp could not compile the grammar")
        self._one = (llama_cpp.llama_token_data * 1)()
        self._one_array = llama_cpp.llama_token_data_array(
            data=self._one, size=1, selected=-1, sorted=False
        )
        iface = llama_cpp.llama_sampler_i()
        # llama.cpp calls name() without a NULL check, e.g. when it logs why a chain cannot
        # run on a GPU backend: a NULL name crashed GPU-offloaded runs. The name lives in a
        # buffer this object holds, and the callback returns its address.
        self._name = ctypes.create_string_buffer(b"grabrag-argmax-first-grammar")
        name = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(
            lambda _sampler: ctypes.addressof(self._name)
        )
        # Keep the callbacks referenced: ctypes frees a callback that nothing holds.
        self._callbacks = (
            llama_cpp.llama_sampler_i_apply(self._apply),
            llama_cpp.llama_sampler_i_accept(self._accept),
            llama_cpp.llama_sampler_i_reset(self._reset),
            name,
        )
        iface.apply, iface.accept, iface.reset = self._callbacks[:3]
        iface.name = ctypes.cast(name, llama_cpp.llama_sampler_i_name)
        iface.clone = llama_cpp.llama_sampler_i_clone(0)
        iface.free = llama_cpp.llama_sampler_i_free(0)
        self._iface = iface
        self._sampler = llama_cpp.llama_sampler()
        self._sampler.iface = ctypes.pointer(iface)
        self._sampler.ctx = None
        self.pointer = ctypes.pointer(self._sampler)

    def _apply(self, _sampler: Any, cur_p: Any) -> None:
        candidates = cur_p.contents
        size = int(candidates.size)
        logits = (ctypes.c_float * (3 * size)).from_address(
            ctypes.addressof(candidates.data.contents)
        )
        # llama_token_data is (id: int32, logit: float, p: float): every third float is a logit.
        best = _argmax(logits, size)
        self._one[0] = candidates.data[best]
        self._lib.llama_sampler_apply(self.grammar, ctypes.byref(self._one_array))
        if not math.isinf(self._one[0].logit):
            # Allowed: it is the answer. It becomes the only candidate; the array is rebuilt
            # from the logits for the next token, so overwriting index 0 loses nothing.
            candidates.data[0] = self._one[0]
            candidates.size = 1
            self.counts["argmax"] += 1
            return
        self.counts["full"] += 1
        self._lib.llama_sampler_apply(self.grammar, cur_p)

    def _accept(self, _sampler: Any, token: int) -> None:
        self._lib.llama_sampler_accept(self.grammar, token)

    def _reset(self, _sampler: Any) -> None:
        self._lib.llama_sampler_reset(self.grammar)

    def __del__(self) -> None:
        grammar, self.grammar = getattr(self, "grammar", None), None
        if grammar:
            self._lib.llama_sampler_free(grammar)


def _argmax(interleaved: Any, size: int) -> int:
    """Index of the first maximal logit in llama_token_data's interleaved floats."""
    logits = np.frombuffer(interleaved, dtype=np.float32, count=3 * size)[1::3]
    return int(np.argmax(logits))
