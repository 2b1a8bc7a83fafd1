"""Every grammar the project sends, compiled by xgrammar: the grammar engine of vLLM and
SGLang, whose EBNF reader is not llama.cpp's GBNF reader in every detail.

- Each stage's grammar, as the ``vllm`` and ``sglang`` dialects put it in the request, and
  the JSON schema the ``json_schema`` dialect derives from it, compile with xgrammar's own
  parser and compiler (on the micro model's vocabulary).
- xgrammar reads each grammar as llama.cpp does: outputs each grammar must accept or refuse
  (escapes, control characters, number ranges, field order) get the same verdict.
- Real greedy decodes of the micro model constrained by xgrammar's matcher are token for
  token the decodes under llama.cpp's own grammar sampler.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np
import pytest
import torch
import xgrammar

from grabrag.cdd import schema as cdd_schema
from grabrag.generation import prompts
from grabrag.generation.endpoint import DIALECTS
from grabrag.generation.json_schema import schema_for

from .conftest import REPO, ensure_micro_model

PACKAGE = REPO / "workflow" / "grabrag"


def _defined_grammars() -> dict[str, str]:
    """Every module-level ``*_GRAMMAR`` the package defines (not imports), by
    ``module.NAME``: a grammar added anywhere is compiled here too."""
    found = {}
    for source in sorted(PACKAGE.rglob("*.py")):
        names = re.findall(r"^([A-Z_]+_GRAMMAR)\s*=", source.read_text(), re.M)
        if names:
            module = importlib.import_module(
                ".".join(("grabrag", *source.relative_to(PACKAGE).with_suffix("").parts))
            )
            found.update({f"{source.stem}.{name}": getattr(module, name) for name in names})
    return found


# Every grammar a stage sends, by the name it has in the code.
GRAMMARS = _defined_grammars()


def test_the_grammars_are_those_the_stages_send() -> None:
    assert {
        "prompts.GBNF_GRAMMAR",
        "evaluator.EVALUATOR_GRAMMAR",
        "nli.NLI_GRAMMAR",
        "schema.GATE_GRAMMAR",
        "schema.RESOLUTION_GRAMMAR",
        "schema.REASONING_FIRST_GRAMMAR",
    } <= set(GRAMMARS)
    assert set(cdd_schema.STEP_GRAMMARS.values()) <= set(GRAMMARS.values())
    assert cdd_schema.BASELINE_GRAMMAR == prompts.GBNF_GRAMMAR


def _sent(dialect: str, gbnf: str) -> str:
    """The grammar text as the dialect puts it in the request body."""
    body = DIALECTS[dialect](gbnf)
    return body["structured_outputs"]["grammar"] if dialect == "vllm" else body["ebnf"]


@pytest.fixture(scope="module")
def micro() -> tuple[llama_cpp.Llama, xgrammar.GrammarCompiler]:
    """The micro model in llama.cpp, and an xgrammar compiler on its vocabulary (each
    token's bytes, as llama.cpp detokenizes it)."""
    llm = llama_cpp.Llama(str(ensure_micro_model()), n_ctx=512, n_threads=1, verbose=False)
    vocabulary = [llm.detokenize([token], special=True) for token in range(llm.n_vocab())]
    info = xgrammar.TokenizerInfo(
        vocabulary,
        xgrammar.VocabType.RAW,
        vocab_size=llm.n_vocab(),
        stop_token_ids=[llm.token_eos()],
    )
    return llm, xgrammar.GrammarCompiler(info)


@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_every_grammar_compiles_under_xgrammar(
    name: str, dialect: str, micro: tuple[llama_cpp.Llama, xgrammar.GrammarCompiler]
) -> None:
    text = _sent(dialect, GRAMMARS[name])
    grammar = xgrammar.Grammar.from_ebnf(text)
    assert "root ::=" in str(grammar)
    micro[1].compile_grammar(text)


@pytest.mark.parametrize("name", sorted(GRAMMARS))
def test_every_derived_json_schema_compiles_under_xgrammar(
    name: str, micro: tuple[llama_cpp.Llama, xgrammar.GrammarCompiler]
) -> None:
    schema = DIALECTS["json_schema"](GRAMMARS[name])["response_format"]["json_schema"]["schema"]
    assert schema == schema_for(GRAMMARS[name])[0]
    xgrammar.Grammar.from_json_schema(json.dumps(schema), strict_mode=True)
    micro[1].compile_json_schema(json.dumps(schema), strict_mode=True)


def _accepts(compiler: xgrammar.GrammarCompiler, text: str, output: str) -> bool:
    matcher = xgrammar.GrammarMatcher(compiler.compile_grammar(text))
    return matcher.accept_string(output) and matcher.is_completed()


PAPER_OK = '{"decision": "answer", "answer": "Paris", "confidence": 100, "reasoning": "r"}'
# Outputs each grammar's GBNF accepts (True) or refuses (False) under llama.cpp.
VERDICTS: dict[str, list[tuple[str, bool]]] = {
    "prompts.GBNF_GRAMMAR": [
        (PAPER_OK, True),
        ('{"decision":\t\t"abstain","answer":"","confidence":0,\n"reasoning":"a\nb"}', True),
        (PAPER_OK.replace("100", "101"), False),  # confidence is 0-100
        (PAPER_OK.replace("100", "07"), False),  # no leading zero
        (PAPER_OK.replace('"r"', '"a\\"b"'), False),  # no backslash in a string
        (PAPER_OK.replace('"answer",', '"maybe",', 1), False),
        ('{"answer": "Paris", "decision": "answer", "confidence": 1, "reasoning": ""}', False),
        (PAPER_OK[:-1], False),
    ],
    "evaluator.EVALUATOR_GRAMMAR": [
        (
            '{"claim": "c", "value": "v", "stance": "supports", "rationale": "", "evidence": 10}',
            True,
        ),
        ('{"claim":"c","value":"v","stance":"irrelevant","rationale":"r","evidence":0}', True),
        (
            '{"claim": "c\x01", "value": "v", "stance": "supports", "rationale": "", '
            '"evidence": 1}',
            False,
        ),
        (
            '{"claim": "c", "value": "v", "stance": "supports", "rationale": "\x7f", '
            '"evidence": 1}',
            False,
        ),
        (
            '{"claim":  "c", "value": "v", "stance": "supports", "rationale": "", "evidence": 1}',
            False,
        ),
        (
            '{"claim": "c", "value": "v", "stance": "supports", "rationale": "", "evidence": 11}',
            False,
        ),
    ],
    "nli.NLI_GRAMMAR": [("entailment", True), ("contradiction", True), ("entail", False)],
    "schema.GATE_GRAMMAR": [
        ('{"contradict": true}', True),
        ('{"contradict":\tfalse }', True),
        ('{"contradict": "true"}', False),
    ],
    "schema.PREMISE_GRAMMAR": [
        ('{"passage": 0, "premise": "q"}', True),
        ('{"passage": 99, "premise": ""}', True),
        ('{"passage": 100, "premise": ""}', False),
    ],
    "schema.RESOLUTION_GRAMMAR": [
        (
            '{"decision": "abstain", "answer": "", "confidence": 5, "source": "parametric", '
            '"rationale": ""}',
            True,
        ),
        (
            '{"decision": "abstain", "answer": "", "confidence": 5, "source": "somewhere", '
            '"rationale": ""}',
            False,
        ),
    ],
}


@pytest.mark.parametrize("name", sorted(VERDICTS))
def test_xgrammar_reads_each_grammar_as_llama_cpp_does(
    name: str, micro: tuple[llama_cpp.Llama, xgrammar.GrammarCompiler]
) -> None:
    llm = micro[0]
    for output, accepted in VERDICTS[name]:
        assert _accepts(micro[1], _sent("vllm", GRAMMARS[name]), output) is accepted, output
        # the same verdict from llama.cpp's grammar, token by token over the output's tokens
        assert _llama_cpp_accepts(llm, GRAMMARS[name], output) is accepted, output


def _llama_cpp_accepts(llm: llama_cpp.Llama, gbnf: str, output: str) -> bool:
    """Whether llama.cpp's grammar sampler lets ``output`` through and then lets the model
    stop: each of its tokens kept, and end-of-generation allowed after the last."""
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, gbnf.encode(), b"root")
    assert sampler, f"llama.cpp cannot parse the grammar: {gbnf[:80]!r}"
    n_vocab = llm.n_vocab()
    data = (llama_cpp.llama_token_data * n_vocab)()
    fields = np.frombuffer(data, dtype=[("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])
    try:
        for token in [*llm.tokenize(output.encode(), add_bos=False, special=False), None]:
            fields["id"] = np.arange(n_vocab)
            fields["logit"] = 0.0
            array = llama_cpp.llama_token_data_array(data, n_vocab, -1, False)
            llama_cpp.llama_sampler_apply(sampler, llama_cpp.ctypes.byref(array))
            wanted = llm.token_eos() if token is None else token
            if not np.isfinite(fields["logit"][fields["id"] == wanted]).all():
                return False
            if token is not None:
                llama_cpp.llama_sampler_accept(sampler, token)
        return True
    finally:
        llama_cpp.llama_sampler_free(sampler)


def _xgrammar_processor(
    compiler: xgrammar.GrammarCompiler, gbnf: str, n_vocab: int
) -> Callable[[Any, np.ndarray], np.ndarray]:
    """A llama-cpp-python logits processor that masks every token xgrammar's matcher
    refuses (as vLLM and SGLang apply the grammar), accepting each generated token."""
    matcher = xgrammar.GrammarMatcher(compiler.compile_grammar(gbnf))
    bitmask = xgrammar.allocate_token_bitmask(1, n_vocab)
    state = {"first": True}

    def process(input_ids: Any, scores: np.ndarray) -> np.ndarray:
        if not state["first"]:
            assert matcher.accept_token(int(input_ids[-1]))
        state["first"] = False
        xgrammar.reset_token_bitmask(bitmask)
        matcher.fill_next_token_bitmask(bitmask)
        logits = torch.from_numpy(scores.astype(np.float32)).unsqueeze(0)
        xgrammar.apply_token_bitmask_inplace(logits, bitmask)
        return logits[0].numpy()

    return process


DECODED = [
    "prompts.GBNF_GRAMMAR",
    "evaluator.EVALUATOR_GRAMMAR",
    "nli.NLI_GRAMMAR",
    "schema.GATE_GRAMMAR",
    "schema.RESOLUTION_GRAMMAR",
]


@pytest.mark.parametrize("name", DECODED)
def test_greedy_decodes_under_xgrammar_are_the_decodes_under_llama_cpp(
    name: str, micro: tuple[llama_cpp.Llama, xgrammar.GrammarCompiler], tmp_path: Path
) -> None:
    llm, compiler = micro
    messages = [{"role": "user", "content": "Who wrote Hamlet? Reply in the JSON format."}]
    decoding = {"temperature": 0.0, "max_tokens": 48, "repeat_penalty": 1.0, "seed": 42}
    llm.reset()
    by_xgrammar = llm.create_chat_completion(
        messages,
        logits_processor=llama_cpp.LogitsProcessorList(
            [_xgrammar_processor(compiler, _sent("sglang", GRAMMARS[name]), llm.n_vocab())]
        ),
        **decoding,
    )["choices"][0]["message"]["content"]
    llm.reset()
    by_llama_cpp = llm.create_chat_completion(
        messages,
        grammar=llama_cpp.LlamaGrammar.from_string(GRAMMARS[name], verbose=False),
        **decoding,
    )["choices"][0]["message"]["content"]
    assert by_xgrammar == by_llama_cpp
    assert by_xgrammar  # the model produced something under the grammar
