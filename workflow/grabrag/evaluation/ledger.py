"""The cost ledger (ours): what a run's model calls cost, per model and stage, summed from
the rows each stage wrote, beside the plan's estimate (``snakemake plan``).

Every stage's rows record their calls differently; :data:`USAGE` reads each:

- generation (P0-P2), closed book, CDD's baselines: one call per row;
- the LLM verifier (P4's NLI, ``nli.backend: llm``): one call per labelled pair (its rows
  keep no tokens or seconds: ``n/a``);
- EvidentialRAG's evaluator: one call per evaluated passage that has its own output
  (``evaluations``), its generator: one call per EVID / EVID_CB row;
- CDD's traces: the row's ``llm_calls`` (steps reused from another call are not calls).

A call answered from the endpoint's response cache counts as a call and as a cache hit;
its seconds are the call's original seconds (the cache keeps them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any


@dataclass
class Usage:
    """What some model calls cost (tokens None: the rows do not record them)."""

    calls: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    seconds: float = 0.0
    cache_hits: int = 0

    def add(self, other: Usage) -> None:
        """Add ``other``; a count none of the two recorded stays None (not recorded)."""
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if mine is None and theirs is None:
                continue
            setattr(self, f.name, (mine or 0) + (theirs or 0))


def _cached(entry: Mapping[str, Any]) -> int:
    return int(bool((entry.get("served") or {}).get("cached")))


def _int(value: Any) -> int:
    return int(value or 0)


def one_call(row: Mapping[str, Any], seconds: str = "seconds") -> Usage:
    """A row that is one model call (a generation row, an EVID generator row)."""
    return Usage(
        1,
        _int(row.get("prompt_tokens")),
        _int(row.get("completion_tokens")),
        float(row.get(seconds) or 0.0),
        _cached(row),
    )


def verifier_calls(row: Mapping[str, Any]) -> Usage:
    """An NLI row: one verifier call per labelled passage; no tokens or time recorded."""
    llm = str(row.get("verifier", "")).startswith("llm")
    return Usage(len(row.get("labels") or []) if llm else 0, None, None, 0.0, 0)


def evaluator_calls(row: Mapping[str, Any]) -> Usage:
    """An EvidentialRAG evaluations row: each passage evaluation with its own output."""
    usage = Usage()
    for entry in row.get("evaluations") or []:
        if entry.get("prompt_tokens") is None:
            continue  # folded into another passage's call
        usage.add(one_call(entry))
    return usage


def _trace_steps(row: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    """Every step entry of a CDD trace row: the trace's, the ablations' traces', the
    perturbations' step-5 reruns and the contradiction gate's judgement."""
    yield from (row.get("trace") or {}).values()
    for ablation in (row.get("ablations") or {}).values():
        yield from (ablation.get("trace") or {}).values()
    for perturbation in (row.get("perturbations") or {}).values():
        if perturbation.get("resolution"):
            yield perturbation["resolution"]
    if row.get("gate_judgement"):
        yield row["gate_judgement"]


def trace_calls(row: Mapping[str, Any]) -> Usage:
    """A CDD trace row: the calls its question ran (the row's ``llm_calls``), and the
    tokens, seconds and cache hits of the steps those calls made. A step answered from an
    identical earlier call of the question has ``seconds`` 0
    (:class:`grabrag.cdd.runs.ReusingCompleter`) and is not a call."""
    usage = Usage()
    for step in _trace_steps(row):
        if step.get("origin") == "generated" and float(step.get("seconds") or 0.0) > 0:
            usage.add(one_call(step))
    usage.calls = _int(row.get("llm_calls"))
    return usage


# The stages whose rows record model calls, in pipeline order, and how to read a row.
USAGE: dict[str, Callable[[Mapping[str, Any]], Usage]] = {
    "generate_context_prompts": one_call,
    "generate_closed_book": one_call,
    "nli": verifier_calls,
    "evidential_evaluate": evaluator_calls,
    "evidential_generate": lambda row: one_call(row, "generator_seconds"),
    "cdd_generate": trace_calls,
    "baselines_generate": one_call,
}


def ledger(files: Iterable[tuple[str, str, Iterable[Mapping[str, Any]]]]) -> dict:
    """(model, stage) -> :class:`Usage` summed over ``files``: (stage, model, rows)."""
    totals: dict[tuple[str, str], Usage] = {}
    for stage, model, rows in files:
        usage = totals.setdefault((model, stage), Usage())
        for row in rows:
            usage.add(USAGE[stage](row))
    return totals
