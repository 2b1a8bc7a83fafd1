"""Batched greedy decoding: many sequences in one llama.cpp context.

Two parts, kept apart so each can be tested on its own:

- :class:`BatchedDecoder` decodes a list of chat requests together on llama.cpp's
  low-level bindings (``llama_batch`` with one sequence id per request, one KV stream per
  sequence). A request whose prompt starts with the prompt of an earlier request in the
  same call (P0, P1 and P2 of one question share system message, context and question)
  copies that prefix's KV cells instead of computing them again. Each sequence has its own
  grammar sampler with the argmax-first check of :mod:`grabrag.generation.greedy_grammar`, its own
  ``max_tokens`` and the stop strings of the model's chat template, and ends exactly as
  ``Llama.create_completion`` ends a call: on an end-of-generation token, a stop string,
  or ``max_tokens``.
- :class:`Batcher` runs one piece of per-question code (a *unit*: one generation call, one
  question's EvidentialRAG evaluation, one question's CDD steps) per thread, for a fixed
  group of units at a time. Each model call a unit makes waits until every other unit of
  the group has made its next call or finished; that *round* is decoded by one
  :meth:`BatchedDecoder.complete_many`. The code of a unit stays the plain sequential code
  (a question's steps keep their order), and what is decoded together depends only on the
  group, never on timing, so a given batch size gives the same outputs on every run.

llama.cpp's logits are not bit-identical across batch compositions, so a near tie between
the top two tokens can flip against one-at-a-time decoding; ``batch: 1`` never comes here
and keeps the sequential path.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np

from grabrag.core.errors import GrabragError

U = TypeVar("U")
R = TypeVar("R")

# A prompt shares the KV cells of an earlier prompt's prefix only when the shared part is
# at least this long: copying a KV stream costs about as much as computing a few tokens.
MIN_SHARED_PREFIX = 32


class BatchingError(GrabragError):
    """A model's batch cannot run: no context of that size, or a chat handler the batched
    path cannot read."""


@dataclass
class Request:
    """One chat completion: messages, a GBNF grammar, the most tokens to generate."""

    messages: list[dict[str, str]]
    grammar: str
    max_tokens: int


@dataclass
class _Sequence:
    request: Request
    prompt: list[int]
    stop: list[bytes]
    max_tokens: int
    grammar: Any
    generated: list[int] = field(default_factory=list)
    text: bytes = b""
    finish_reason: str | None = None
    logits: np.ndarray | None = None
    multibyte_fix: int = 0
    seconds: float = 0.0


class _PromptCaptured(Exception):
    pass


class _CapturePrompt:
    """Stands in for the ``Llama`` object when its chat handler is called, and records the
    prompt tokens and stop strings the handler passes to ``create_completion``: the batched
    path formats a conversation exactly as ``create_chat_completion`` does."""

    def __init__(self, llm: Any) -> None:
        self._llm = llm
        self.kwargs: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llm, name)

    def create_completion(self, **kwargs: Any) -> Any:
        self.kwargs = kwargs
        raise _PromptCaptured


def chat_prompt(llm: Any, messages: list[dict[str, str]]) -> tuple[list[int], list[str]]:
    """The prompt tokens and stop strings ``llm.create_chat_completion(messages)`` uses."""
    from llama_cpp import llama_chat_format

    handler = (
        llm.chat_handler
        or llm._chat_handlers.get(llm.chat_format)
        or llama_chat_format.get_chat_completion_handler(llm.chat_format)
    )
    capture = _CapturePrompt(llm)
    try:
        handler(llama=capture, messages=messages, temperature=0.0)
    except _PromptCaptured:
        pass
    prompt = capture.kwargs.get("prompt")
    if not isinstance(prompt, list):
        raise BatchingError(
            "the model's chat handler did not pass prompt tokens to create_completion; "
            "set batch: 1 for this model"
        )
    stop = capture.kwargs.get("stop") or []
    return prompt, [stop] if isinstance(stop, str) else list(stop)


def _shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class BatchedDecoder:
    """Greedy, grammar-constrained decoding of up to ``n_seq`` sequences at once in a second
    llama.cpp context on ``llm``'s model (the model's weights are shared, not reloaded)."""

    def __init__(self, llm: Any, n_seq: int, n_ctx: int, n_threads: int) -> None:
        import llama_cpp

        self._lib = llama_cpp
        self.llm = llm
        self.n_seq = n_seq
        self.n_ctx = n_ctx
        params = llama_cpp.llama_context_params.from_buffer_copy(llm.context_params)
        params.n_seq_max = n_seq
        # One KV stream per sequence, each the size of the sequential path's window: a
        # unified buffer was twice as slow on the CPU for sequences that share little.
        params.kv_unified = False
        params.n_ctx = n_ctx * n_seq
        params.n_threads = params.n_threads_batch = n_threads
        self.n_batch = int(params.n_batch)
        self.ctx = llama_cpp.llama_init_from_model(llm._model.model, params)
        if not self.ctx:
            raise BatchingError(
                f"llama.cpp could not create a context for {n_seq} sequences of {n_ctx} "
                "tokens (not enough memory for their KV caches?); lower the model's batch "
                "(each sequence needs a KV cache of generation.n_ctx tokens)"
            )
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        self.vocab = llm._model.vocab
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self.vocab))
        token_data = np.dtype([("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
        self._all = (llama_cpp.llama_token_data * self.n_vocab)()
        view = np.frombuffer(self._all, dtype=token_data)
        # The grammar only sets rejected logits to -inf; ids and order stay as written here.
        view["id"] = np.arange(self.n_vocab, dtype=np.int32)
        view["p"] = 0.0
        self._all_logits = view["logit"]
        self._all_array = llama_cpp.llama_token_data_array(
            data=self._all, size=self.n_vocab, selected=-1, sorted=False
        )
        self._one = (llama_cpp.llama_token_data * 1)()
        self._one_array = llama_cpp.llama_token_data_array(
            data=self._one, size=1, selected=-1, sorted=False
        )
        self._tokens = np.ctypeslib.as_array(self.batch.token, shape=(self.n_batch,))
        self._pos = np.ctypeslib.as_array(self.batch.pos, shape=(self.n_batch,))
        self._n_seq_id = np.ctypeslib.as_array(self.batch.n_seq_id, shape=(self.n_batch,))
        self._want_logits = np.ctypeslib.as_array(self.batch.logits, shape=(self.n_batch,))
        # Tokens decided by the argmax check alone / by filtering the whole vocabulary.
        self.argmax_first_counts = {"argmax": 0, "full": 0}

    def close(self) -> None:
        if getattr(self, "ctx", None):
            self._lib.llama_batch_free(self.batch)
            self._lib.llama_free(self.ctx)
            self.ctx = None

    def __del__(self) -> None:
        self.close()

    # --- one llama_decode call per chunk of at most n_batch tokens --------------------------

    def _decode(
        self, entries: Sequence[tuple[int, int, int, bool]], copy: bool = True
    ) -> dict[int, np.ndarray]:
        """Decode (token, position, sequence, wants_logits) entries; returns the logits of
        the entries that want them, by sequence. ``copy=False`` returns views into
        llama.cpp's buffer, valid until the next decode (a generation step consumes them
        before that)."""
        out: dict[int, np.ndarray] = {}
        for start in range(0, len(entries), self.n_batch):
            chunk = entries[start : start + self.n_batch]
            for i, (token, pos, seq, logits) in enumerate(chunk):
                self._tokens[i] = token
                self._pos[i] = pos
                self._n_seq_id[i] = 1
                self.batch.seq_id[i][0] = seq
                self._want_logits[i] = logits
            self.batch.n_tokens = len(chunk)
            status = self._lib.llama_decode(self.ctx, self.batch)
            if status != 0:
                raise RuntimeError(f"llama_decode failed with status {status}")
            for i, (_token, _pos, seq, logits) in enumerate(chunk):
                if logits:
                    pointer = self._lib.llama_get_logits_ith(self.ctx, i)
                    logits_view = np.ctypeslib.as_array(pointer, shape=(self.n_vocab,))
                    out[seq] = logits_view.copy() if copy else logits_view
        return out

    # --- greedy choice under the grammar, argmax first -------------------------------------

    def _choose(self, seq: _Sequence) -> int:
        logits = seq.logits
        assert logits is not None
        best = int(np.argmax(logits))
        self._one[0].id = best
        self._one[0].logit = float(logits[best])
        self._one[0].p = 0.0
        self._lib.llama_sampler_apply(seq.grammar, ctypes.byref(self._one_array))
        if not np.isinf(self._one[0].logit):
            self.argmax_first_counts["argmax"] += 1
            return best
        self.argmax_first_counts["full"] += 1
        self._all_logits[:] = logits
        self._all_array.size = self.n_vocab
        self._all_array.selected = -1
        self._all_array.sorted = False
        self._lib.llama_sampler_apply(seq.grammar, ctypes.byref(self._all_array))
        return int(np.argmax(self._all_logits))

    def _step(self, seq: _Sequence, token: int) -> bool:
        """Take one chosen token as ``Llama._create_completion`` does; True when the
        sequence goes on."""
        lib, llm = self._lib, self.llm
        lib.llama_sampler_accept(seq.grammar, token)
        if lib.llama_vocab_is_eog(self.vocab, token):
            seq.text = llm.detokenize(seq.generated, prev_tokens=seq.prompt)
            seq.finish_reason = "stop"
            return False
        seq.generated.append(token)
        all_text = llm.detokenize(seq.generated, prev_tokens=seq.prompt)
        for k, char in enumerate(all_text[-3:]):
            k = 3 - k
            for num, pattern in ((2, 192), (3, 224), (4, 240)):
                if num > k and pattern & char == pattern:
                    seq.multibyte_fix = num - k
        if seq.multibyte_fix > 0:
            # An incomplete UTF-8 character: llama-cpp-python checks neither stop strings
            # nor max_tokens until it is complete.
            seq.multibyte_fix -= 1
            return True
        stops = [s for s in seq.stop if s in all_text]
        if stops:
            seq.text = all_text[: all_text.index(stops[0])]
            seq.finish_reason = "stop"
            return False
        if len(seq.generated) >= seq.max_tokens:
            seq.text = all_text
            seq.finish_reason = "length"
            return False
        return True

    # --- requests ------------------------------------------------------------------------------

    def _sequence(self, request: Request) -> _Sequence:
        prompt, stop = chat_prompt(self.llm, request.messages)
        if len(prompt) >= self.n_ctx:
            raise ValueError(
                f"Requested tokens ({len(prompt)}) exceed context window of {self.n_ctx}"
            )
        max_tokens = request.max_tokens
        if max_tokens <= 0 or max_tokens + len(prompt) >= self.n_ctx:
            max_tokens = self.n_ctx - len(prompt)
        grammar = self._lib.llama_sampler_init_grammar(
            self.vocab, request.grammar.encode("utf-8"), b"root"
        )
        if not grammar:
            raise ValueError("llama.cpp could not compile the grammar")
        return _Sequence(request, prompt, [s.encode("utf-8") for s in stop], max_tokens, grammar)

    def complete_many(self, requests: Sequence[Request]) -> list[dict[str, Any]]:
        """Completions of ``requests`` (each as :meth:`LlamaGenerator.complete` returns
        them), decoded ``n_seq`` at a time in the given order."""
        results: list[dict[str, Any]] = []
        for start in range(0, len(requests), self.n_seq):
            results.extend(self._complete_chunk(requests[start : start + self.n_seq]))
        return results

    def _complete_chunk(self, requests: Sequence[Request]) -> list[dict[str, Any]]:
        started = time.perf_counter()
        lib = self._lib
        seqs: list[_Sequence] = []
        try:
            for request in requests:
                seqs.append(self._sequence(request))
            lib.llama_memory_clear(self.memory, True)
            self._prefill(seqs)
            active = list(range(len(seqs)))
            while active:
                entries = []
                still = []
                for s in active:
                    seq = seqs[s]
                    if self._step(seq, self._choose(seq)):
                        position = len(seq.prompt) + len(seq.generated) - 1
                        entries.append((seq.generated[-1], position, s, True))
                        still.append(s)
                    else:
                        seq.seconds = time.perf_counter() - started
                logits = self._decode(entries, copy=False) if entries else {}
                for s in still:
                    seqs[s].logits = logits[s]
                active = still
        finally:
            for seq in seqs:
                lib.llama_sampler_free(seq.grammar)
        return [
            {
                "raw": seq.text.decode("utf-8", errors="ignore"),
                "finish_reason": seq.finish_reason,
                "prompt_tokens": len(seq.prompt),
                "completion_tokens": len(seq.generated),
                "seconds": round(seq.seconds, 3),
            }
            for seq in seqs
        ]

    def _prefill(self, seqs: Sequence[_Sequence]) -> None:
        """Compute every prompt; a prompt that starts with an earlier one's first tokens
        (at least MIN_SHARED_PREFIX of them) copies those KV cells and computes the rest."""
        sources: dict[int, tuple[int, int]] = {}
        leaders: list[int] = []
        for i, seq in enumerate(seqs):
            best, source = 0, -1
            for j in leaders:
                shared = min(_shared_prefix(seqs[j].prompt, seq.prompt), len(seq.prompt) - 1)
                if shared > best:
                    best, source = shared, j
            if best >= MIN_SHARED_PREFIX:
                sources[i] = (source, best)
            else:
                leaders.append(i)
        entries = [
            (token, pos, i, pos == len(seqs[i].prompt) - 1)
            for i in leaders
            for pos, token in enumerate(seqs[i].prompt)
        ]
        logits = self._decode(entries)
        followers = []
        for i, (source, shared) in sources.items():
            # One KV stream per sequence: llama.cpp copies a whole stream, then the copy
            # drops what lies past the shared prefix.
            self._lib.llama_memory_seq_cp(self.memory, source, i, -1, -1)
            self._lib.llama_memory_seq_rm(self.memory, i, shared, -1)
            prompt = seqs[i].prompt
            followers += [
                (prompt[pos], pos, i, pos == len(prompt) - 1) for pos in range(shared, len(prompt))
            ]
        logits.update(self._decode(followers))
        for i, seq in enumerate(seqs):
            seq.logits = logits[i]


# --- rounds of calls from units running side by side ------------------------------------------


class _Abandoned(Exception):
    """Raised inside a unit whose round failed, to end its thread."""


class Batcher(Generic[U, R]):
    """Runs units in fixed groups of ``size``, each unit in its own thread, and decodes the
    model calls they make in rounds through ``complete_many`` (see the module docstring).

    ``complete`` is the call a unit makes; :meth:`active` says whether the calling thread
    is a unit of a running group (so a generator can route its ``complete`` here)."""

    def __init__(
        self,
        size: int,
        complete_many: Callable[[list[Request]], list[dict[str, Any]]],
        default_grammar: str,
        default_max_tokens: int,
    ) -> None:
        if size < 2:
            raise ValueError("a Batcher decodes at least 2 sequences at once")
        self.size = size
        self._complete_many = complete_many
        self._default_grammar = default_grammar
        self._default_max_tokens = default_max_tokens
        self._local = threading.local()
        self._lock = threading.Condition()
        self._pending: dict[int, Request] = {}
        self._results: dict[int, dict[str, Any] | BaseException] = {}
        self._finished: set[int] = set()
        # Rounds decoded and calls in them, over the batcher's life.
        self.rounds = 0
        self.calls = 0

    def active(self) -> bool:
        return getattr(self._local, "unit", None) is not None

    def complete(
        self,
        messages: list[dict[str, str]],
        grammar: str | None = None,
        max_tokens: int | None = None,
    ) -> dict[str, Any]:
        unit = getattr(self._local, "unit", None)
        if unit is None:
            raise RuntimeError("Batcher.complete is called from a unit of Batcher.run only")
        request = Request(
            messages,
            self._default_grammar if grammar is None else grammar,
            self._default_max_tokens if max_tokens is None else max_tokens,
        )
        with self._lock:
            self._pending[unit] = request
            self._lock.notify_all()
            while unit not in self._results:
                self._lock.wait()
            result = self._results.pop(unit)
        if isinstance(result, BaseException):
            raise _Abandoned from result
        return result

    def groups(self, units: Sequence[U], per_question: int = 1) -> list[Sequence[U]]:
        """The fixed groups of ``units``: consecutive units, whole questions each. Units
        come question by question, ``per_question`` of them (the prompts of a question:
        they share its prefix only when decoded in one call), so a group holds
        ``size // per_question`` questions, at least one."""
        step = max(1, self.size // per_question) * per_question
        return [units[i : i + step] for i in range(0, len(units), step)]

    def run(self, units: Sequence[U], body: Callable[[U], R]) -> list[R]:
        """``body(unit)`` for every unit of one group, side by side; results in unit order.
        An error in a unit is raised (the first by unit order) once the others finished."""
        n = len(units)
        outputs: list[Any] = [None] * n
        errors: dict[int, BaseException] = {}
        self._pending.clear()
        self._results.clear()
        self._finished.clear()

        def work(index: int) -> None:
            self._local.unit = index
            try:
                outputs[index] = body(units[index])
            except BaseException as error:  # noqa: BLE001 - re-raised by run()
                errors[index] = error
            finally:
                self._local.unit = None
                with self._lock:
                    self._finished.add(index)
                    self._lock.notify_all()

        threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(n)]
        for thread in threads:
            thread.start()
        while True:
            with self._lock:
                while len(self._pending) + len(self._finished) < n:
                    self._lock.wait()
                if not self._pending:
                    break
                round_ = sorted(self._pending.items())
                self._pending.clear()
            try:
                results: list[Any] = self._complete_many([request for _, request in round_])
            except BaseException as error:  # noqa: BLE001 - handed to the waiting units
                results = [error] * len(round_)
                errors.setdefault(-1, error)
            self.rounds += 1
            self.calls += len(round_)
            with self._lock:
                for (unit, _), result in zip(round_, results, strict=True):
                    self._results[unit] = result
                self._lock.notify_all()
        for thread in threads:
            thread.join()
        if -1 in errors:
            raise errors[-1]
        if errors:
            raise errors[min(errors)]
        return outputs


def run_in_groups(
    batcher: Batcher[U, R],
    units: Sequence[U],
    body: Callable[[U], R],
    is_done: Callable[[U], bool],
    on_group: Callable[[Sequence[U], list[R]], None],
    on_skip: Callable[[Sequence[U]], None] | None = None,
    per_question: int = 1,
) -> None:
    """Every group of ``units`` (:meth:`Batcher.groups`) with a unit not yet done runs
    whole (so a resumed job decodes the same groups as an uninterrupted one);
    ``on_group`` gets each finished group's units and results, in order, to checkpoint
    them."""
    for group in batcher.groups(units, per_question):
        if all(is_done(unit) for unit in group):
            if on_skip:
                on_skip(group)
            continue
        on_group(group, batcher.run(group, body))
