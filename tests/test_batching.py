"""Batched decoding: the rounds of the Batcher, resume by whole groups, and the real
SmolLM2 GGUF decoded several sequences at a time against the sequential path."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from grabrag.core.io import read_jsonl
from grabrag.generation.batching import BatchedDecoder, Batcher, Request, chat_prompt, run_in_groups
from grabrag.generation.generator import (
    GenerationError,
    GenerationSettings,
    LlamaGenerator,
    run_cells,
)
from grabrag.generation.prompts import GBNF_GRAMMAR, messages_for

from .chat_templates import BY_REPO, OPENINGS
from .conftest import CORES
from .micro_model import build_micro_gguf

VALID = '{"decision": "answer", "answer": "%s", "confidence": 80, "reasoning": "r"}'


class RecordingModel:
    """A stand-in for the decoder in the Batcher's own tests: answers each request with its
    last message's text, and records every round it was given."""

    def __init__(self) -> None:
        self.rounds: list[list[str]] = []

    def complete_many(self, requests: list[Request]) -> list[dict[str, Any]]:
        texts = [r.messages[-1]["content"] for r in requests]
        self.rounds.append(texts)
        return [
            {
                "raw": VALID % text,
                "finish_reason": "stop",
                "prompt_tokens": 1,
                "completion_tokens": 1,
                "seconds": 0.0,
            }
            for text in texts
        ]


def _batcher(model: RecordingModel, size: int) -> Batcher[Any, Any]:
    return Batcher(size, model.complete_many, GBNF_GRAMMAR, 64)


def test_a_round_holds_the_next_call_of_every_running_unit_in_unit_order() -> None:
    model = RecordingModel()
    batcher = _batcher(model, 3)

    def unit(n: int) -> list[str]:
        # unit n makes n calls, each depending on the answer to the one before
        answers = []
        for step in range(n):
            previous = answers[-1] if answers else "-"
            result = batcher.complete([{"role": "user", "content": f"u{n}s{step}<{previous}"}])
            answers.append(json.loads(result["raw"])["answer"])
        return answers

    outputs = batcher.run([3, 1, 2], unit)
    assert model.rounds == [
        ["u3s0<-", "u1s0<-", "u2s0<-"],
        ["u3s1<u3s0<-", "u2s1<u2s0<-"],
        ["u3s2<u3s1<u3s0<-"],
    ]
    assert outputs[1] == ["u1s0<-"] and len(outputs[0]) == 3
    assert (batcher.rounds, batcher.calls) == (3, 6)
    assert not batcher.active()


def test_an_error_in_a_unit_is_raised_after_the_others_finish() -> None:
    model = RecordingModel()
    batcher = _batcher(model, 2)
    finished = []

    def unit(n: int) -> int:
        batcher.complete([{"role": "user", "content": str(n)}])
        if n == 0:
            raise ValueError("bad row 0")
        batcher.complete([{"role": "user", "content": f"{n} again"}])
        finished.append(n)
        return n

    with pytest.raises(ValueError, match="bad row 0"):
        batcher.run([0, 1], unit)
    assert finished == [1]


def test_a_failing_round_is_raised_and_ends_every_waiting_unit() -> None:
    def broken(requests: list[Request]) -> list[dict[str, Any]]:
        raise RuntimeError("llama_decode failed with status 1")

    batcher: Batcher[Any, Any] = Batcher(4, broken, GBNF_GRAMMAR, 64)
    with pytest.raises(RuntimeError, match="llama_decode failed"):
        batcher.run([0, 1, 2], lambda n: batcher.complete([{"role": "user", "content": "x"}]))
    assert threading.active_count() < 5  # the unit threads ended


def test_complete_outside_a_unit_is_refused() -> None:
    with pytest.raises(RuntimeError, match="from a unit"):
        _batcher(RecordingModel(), 2).complete([{"role": "user", "content": "x"}])


def test_groups_are_fixed_and_a_partly_done_group_runs_whole() -> None:
    model = RecordingModel()
    batcher = _batcher(model, 2)
    done = {"a", "b", "c"}  # group (a, b) done; group (c, d) was in flight when killed
    ran, skipped = [], []
    run_in_groups(
        batcher,
        ["a", "b", "c", "d", "e"],
        lambda u: batcher.complete([{"role": "user", "content": u}])["raw"],
        lambda u: u in done,
        lambda group, outs: ran.append(list(group)),
        lambda group: skipped.append(list(group)),
    )
    assert skipped == [["a", "b"]] and ran == [["c", "d"], ["e"]]
    assert model.rounds == [["c", "d"], ["e"]]


def _context_rows(n: int) -> list[dict[str, Any]]:
    return [
        {"qid": f"q{i}", "index": i, "condition": "Q100", "question": f"Q{i}?", "context": "C"}
        for i in range(n)
    ]


def test_run_cells_in_groups_resumes_a_killed_group_whole(tmp_path: Path) -> None:
    model = RecordingModel()
    batcher = _batcher(model, 4)
    rows = _context_rows(3)
    checkpoint = tmp_path / ".checkpoint.jsonl"
    reference = run_cells(
        batcher.complete, lambda: None, rows, ["P0", "P1"], checkpoint, batcher=batcher
    )
    assert [len(r) for r in model.rounds] == [4, 2]  # (q0 q1) x (P0 P1), then q2
    assert all(row["batch"] == 4 for cell in reference.values() for row in cell)
    # a job killed in the second group: its first row reached the checkpoint
    lines = checkpoint.read_text().splitlines()
    checkpoint.write_text("\n".join(lines[:5]) + "\n")
    model.rounds.clear()
    resumed = run_cells(
        batcher.complete, lambda: None, rows, ["P0", "P1"], checkpoint, batcher=batcher
    )
    assert model.rounds == [[messages_for(p, "Q2?", "C")[-1]["content"] for p in ("P0", "P1")]]
    assert resumed == reference
    # rows decoded under another batch size are not reused
    model.rounds.clear()
    other = _batcher(model, 2)
    run_cells(other.complete, lambda: None, rows, ["P0", "P1"], checkpoint, batcher=other)
    assert [len(r) for r in model.rounds] == [2, 2, 2]


# --- the real model ----------------------------------------------------------------------------


CONTEXT = (
    "[1] Super Bowl 50\nSuper Bowl 50 was an American football game. The American Football "
    "Conference (AFC) champion Denver Broncos defeated the Carolina Panthers 24-10.\n\n"
    "[2] Denver Broncos\nThe Denver Broncos are a professional football team based in Denver."
)
QUESTIONS = (
    "Which NFL team represented the AFC at Super Bowl 50?",
    "Who did the Denver Broncos defeat?",
    "What was the final score of Super Bowl 50?",
)
DIGITS = 'root ::= "{" [0-9] [0-9]? " apples}"'


def _requests() -> list[Request]:
    calls = [
        Request(messages_for(prompt, question, CONTEXT), GBNF_GRAMMAR, 64)
        for question in QUESTIONS
        for prompt in ("P0", "P1", "P2")
    ]
    # a grammar the model's argmax often breaks, and a max_tokens that cuts an output off
    calls.append(Request(messages_for("CB", QUESTIONS[0], ""), DIGITS, 64))
    calls.append(Request(messages_for("P1", QUESTIONS[1], CONTEXT), GBNF_GRAMMAR, 6))
    return calls


@pytest.fixture(scope="module")
def sequential(model_path: Path) -> tuple[LlamaGenerator, list[dict[str, Any]]]:
    generator = LlamaGenerator(model_path, GenerationSettings(max_tokens=64), n_threads=CORES)
    outputs = []
    for request in _requests():
        generator.reset()
        outputs.append(generator.complete(request.messages, request.grammar, request.max_tokens))
    return generator, outputs


def _tokens_and_text(outputs: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    keys = ("raw", "finish_reason", "prompt_tokens", "completion_tokens")
    return [tuple(o[k] for k in keys) for o in outputs]


def test_one_sequence_at_a_time_the_decoder_reproduces_the_sequential_path(sequential) -> None:
    generator, reference = sequential
    decoder = BatchedDecoder(generator.llm, 1, 4096, CORES)
    outputs = decoder.complete_many(_requests())
    assert _tokens_and_text(outputs) == _tokens_and_text(reference)
    assert outputs[-1]["finish_reason"] == "length" and outputs[-1]["completion_tokens"] == 6
    assert decoder.argmax_first_counts["argmax"] > 0 and decoder.argmax_first_counts["full"] > 0


def test_batched_with_shared_prefixes_is_reproducible_and_agrees_here(sequential) -> None:
    generator, reference = sequential
    decoder = BatchedDecoder(generator.llm, 4, 4096, CORES)
    first = decoder.complete_many(_requests())
    again = decoder.complete_many(_requests())
    assert _tokens_and_text(first) == _tokens_and_text(again)
    # On these prompts batches of 4 (P1 and P2 copy P0's prefix) choose the same tokens
    # as one-at-a-time decoding; a near tie could flip elsewhere (the README's agreement).
    assert _tokens_and_text(first) == _tokens_and_text(reference)


def test_a_batched_generator_refuses_sampling(model_path: Path) -> None:
    with pytest.raises(GenerationError, match="decodes greedily"):
        LlamaGenerator(model_path, GenerationSettings(temperature=0.7), n_threads=CORES, batch=4)


def test_a_batched_generator_routes_a_units_calls_into_rounds(sequential, model_path) -> None:
    _, reference = sequential
    generator = LlamaGenerator(
        model_path, GenerationSettings(max_tokens=64), n_threads=CORES, batch=3
    )
    requests = _requests()[:3]
    assert generator.batcher is not None
    outputs = generator.batcher.run(
        requests, lambda r: generator.complete(r.messages, r.grammar, r.max_tokens)
    )
    assert _tokens_and_text(outputs) == _tokens_and_text(reference[:3])
    assert (generator.batcher.rounds, generator.batcher.calls) == (1, 3)


def test_tiny_run_decodes_every_model_job_in_batches(tiny_run: Path) -> None:
    """The tiny config's micro model has batch: 2: every model-calling job's rows say so."""
    base = tiny_run / "results"
    files = [
        base / "generation/micro/nq_bigbench/Q50/P1.jsonl",
        base / "generation/micro/nq_bigbench/Qclosed/CB.jsonl",
        base / "nli/micro/nq_bigbench/Q100.jsonl",
        base / "evidential/micro/nq_bigbench/Q100/evaluations.jsonl",
        base / "evidential/micro/nq_bigbench/Q100/EVID.jsonl",
        base / "cdd/micro/nq_bigbench/Q100/traces.jsonl",
        base / "cdd/micro/nq_bigbench/Q100/CAI.jsonl",
    ]
    for path in files:
        rows = read_jsonl(path)
        assert rows and all(row["batch"] == 2 for row in rows), path


@pytest.mark.parametrize("repo", sorted(BY_REPO))
def test_the_paper_models_chat_templates_format_as_llama_cpp_python_does(
    model_path: Path, tmp_path: Path, repo: str
) -> None:
    """The batched path takes its prompt tokens and stop strings from the model's own chat
    handler: on a micro model carrying Phi-4-mini's, Llama-3.1's or Qwen2.5's template, the
    decoder (one sequence, and four with shared prefixes) writes what the sequential path
    writes."""
    model = build_micro_gguf(model_path, tmp_path / "micro.gguf", chat_template=BY_REPO[repo])
    generator = LlamaGenerator(model, GenerationSettings(max_tokens=32), n_threads=CORES)
    requests = [
        Request(messages_for(prompt, question, CONTEXT), GBNF_GRAMMAR, 32)
        for question in QUESTIONS[:1]
        for prompt in ("P0", "P1", "P2", "CB")
    ]
    reference = []
    for request in requests:
        generator.reset()
        reference.append(generator.complete(request.messages, request.grammar, 32))
    prompt, _ = chat_prompt(generator.llm, requests[0].messages)
    # the template's own opening, after the BOS token some templates add
    rendered = generator.llm.detokenize(prompt, special=True).decode()
    assert OPENINGS[BY_REPO[repo]] in rendered[:120], rendered[:120]
    for n_seq in (1, 4):
        outputs = BatchedDecoder(generator.llm, n_seq, 4096, CORES).complete_many(requests)
        assert _tokens_and_text(outputs) == _tokens_and_text(reference), n_seq
