"""The cost ledger: each stage's rows read as calls, tokens, seconds and cache hits, and on
the tiny run its sums equal the rows' own."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from grabrag.evaluation.ledger import Usage, evaluator_calls, trace_calls, verifier_calls


def step(tokens: int, seconds: float, origin: str = "generated", cached: bool = False) -> dict:
    entry = {"origin": origin, "prompt_tokens": tokens, "completion_tokens": 1}
    return {**entry, "seconds": seconds, "served": {"cached": cached}}


def test_a_trace_counts_the_calls_it_ran_and_their_tokens() -> None:
    row = {
        "llm_calls": 3,
        "trace": {
            "1": step(10, 0.5),
            "2": step(0, 0.0, "closed_book"),
            "3": step(20, 0.4, cached=True),
        },
        # an ablation's step 1 reused from the full run's (seconds 0), its step 5 its own
        "ablations": {"no_premise": {"trace": {"1": step(10, 0.0), "5": step(30, 0.2)}}},
        "perturbations": {"truncated": {"resolution": step(0, 0.0)}},
    }
    usage = trace_calls(row)
    assert (usage.calls, usage.prompt_tokens, usage.completion_tokens) == (3, 60, 3)
    assert usage.cache_hits == 1 and abs(usage.seconds - 1.1) < 1e-9


def test_folded_evaluations_and_the_verifier_are_read_as_recorded() -> None:
    row = {"evaluations": [step(5, 0.1), {"prompt_tokens": None}, step(7, 0.2)]}
    assert (evaluator_calls(row).calls, evaluator_calls(row).prompt_tokens) == (2, 12)
    nli = verifier_calls({"verifier": "llm:m", "labels": ["entailment", "neutral"]})
    assert (nli.calls, nli.prompt_tokens) == (2, None)
    assert verifier_calls({"verifier": "transformers:deberta", "labels": ["x"]}).calls == 0
    total = Usage()
    total.add(nli)
    assert total.prompt_tokens is None  # nothing recorded stays unrecorded
    total.add(Usage(1, 4, 2, 0.5, 0))
    assert total.prompt_tokens == 4 and total.calls == 3


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_the_tiny_runs_ledger_equals_the_rows_sums(tiny_run: Path) -> None:
    results = tiny_run / "results"
    table = {
        (line["Model"], line["Stage"]): line
        for line in csv.DictReader((results / "tables/cost_ledger.csv").open())
    }
    generation = [
        r
        for dataset in ("squad", "nq_bigbench")
        for path in (results / "generation/micro" / dataset).glob("Q*/P*.jsonl")
        if path.parent.name != "Qclosed"
        for r in rows(path)
    ]
    line = table[("micro", "generate_context_prompts")]
    assert int(line["Calls"]) == len(generation) > 0
    assert int(line["Prompt tokens"]) == sum(r["prompt_tokens"] for r in generation)
    assert int(line["Completion tokens"]) == sum(r["completion_tokens"] for r in generation)
    traces = [
        r for path in (results / "cdd/micro/nq_bigbench").glob("*/traces.jsonl") for r in rows(path)
    ]
    assert int(table[("micro", "cdd_generate")]["Calls"]) == sum(r["llm_calls"] for r in traces)
    evaluations = [
        r
        for path in (results / "evidential/micro/nq_bigbench").glob("*/evaluations.jsonl")
        for r in rows(path)
    ]
    calls = sum(r["evaluator_passes"] for r in evaluations)
    assert int(table[("micro", "evidential_evaluate")]["Calls"]) == calls
    total = table[("all models", "every stage")]
    per_stage = [v for (m, s), v in table.items() if m == "all models" and s != "every stage"]
    assert int(total["Calls"]) == sum(int(v["Calls"]) for v in per_stage)
    assert all(v["Plan (at most)"] for v in per_stage)
    assert all(int(v["Calls"]) <= int(v["Plan (at most)"]) for v in per_stage)
