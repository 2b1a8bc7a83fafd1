"""Efficiency of EVID / EVID_CB against naive RAG (EvidentialRAG section 5.8, Table 11):
the peak memory each EvidentialRAG job reports, and the per-policy summary of latency,
LLM-call accounting (:mod:`grabrag.evidential.generator_pass`) and peak memory.
"""

from __future__ import annotations

import math
import resource
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def peak_memory_mb() -> float:
    """Peak resident memory of this process in MiB (ru_maxrss is KiB on Linux)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else math.nan


NAIVE_RAG = "P0"
"""EvidentialRAG's naive RAG: the top-k passages in the generator prompt and no abstention
controller (section 4.3), which is GRAB-RAG's P0 (no abstention instruction)."""


def _single_pass_entry(rows: Sequence[Mapping[str, Any]], base_seconds: float) -> dict[str, Any]:
    seconds = _mean([float(r["seconds"]) for r in rows])
    return {
        "queries": len(rows),
        "seconds_per_query": seconds,
        "evaluator_seconds_per_query": 0.0,
        "generator_seconds_per_query": seconds,
        "closed_book_seconds_per_query": 0.0,
        "logical_decisions": 1.0,
        "executed_passes": 1.0,
        "peak_memory_mb": None,
        "relative_cost": seconds / base_seconds if base_seconds > 0 else math.nan,
    }


def efficiency_summary(
    single_pass_rows: Mapping[str, Sequence[Mapping[str, Any]]],
    evidential_rows: Mapping[str, Sequence[Mapping[str, Any]]],
    cb_rows: Sequence[Mapping[str, Any]],
    job_reports: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """Per-policy efficiency of one model x dataset, pooled over its conditions.

    ``single_pass_rows``: prompt -> generation rows of every condition; it must hold
    :data:`NAIVE_RAG` (P0), the base of Eq. 28, and may hold more (P1, reported beside
    it); ``evidential_rows``: variant -> EVID / EVID_CB rows of every condition;
    ``cb_rows``: the CB cell; ``job_reports``: the evidential_evaluate /
    evidential_generate reports (``peak_memory_mb``).
    seconds_per_query: a single pass's generation call; EVID's evaluator calls + its
    generator call; EVID_CB's also its closed-book pass (each row's ``cb_seconds``).
    ``cb_rows`` is kept for the callers; the CB latency is read from the EVID_CB rows.
    relative_cost = latency / naive RAG (P0) latency (Eq. 28). Peak memory is the largest
    resident set of the EvidentialRAG jobs (host memory: ru_maxrss; GPU memory is not
    measured); the generation jobs do not record theirs.
    """
    if NAIVE_RAG not in single_pass_rows:
        raise ValueError(
            f"efficiency_summary needs the {NAIVE_RAG} generation rows: naive RAG is the "
            "base of the relative cost (Eq. 28)"
        )
    p0_seconds = _mean([float(r["seconds"]) for r in single_pass_rows[NAIVE_RAG]])
    peak = max((float(r["peak_memory_mb"]) for r in job_reports), default=math.nan)
    policies: dict[str, dict[str, Any]] = {
        prompt: _single_pass_entry(rows, p0_seconds)
        for prompt, rows in sorted(single_pass_rows.items())
    }
    for variant, rows in evidential_rows.items():
        # EVID_CB rows count their closed-book pass (evidential_row): seconds, cb_seconds,
        # logical_decisions and executed_passes include it.
        seconds = _mean([float(r["seconds"]) for r in rows])
        policies[variant] = {
            "queries": len(rows),
            "seconds_per_query": seconds,
            "evaluator_seconds_per_query": _mean([float(r["evaluator_seconds"]) for r in rows]),
            "generator_seconds_per_query": _mean([float(r["generator_seconds"]) for r in rows]),
            "closed_book_seconds_per_query": _mean(
                [float(r.get("cb_seconds") or 0.0) for r in rows]
            ),
            "logical_decisions": _mean([float(r["logical_decisions"]) for r in rows]),
            "executed_passes": _mean([float(r["executed_passes"]) for r in rows]),
            "peak_memory_mb": None if math.isnan(peak) else peak,
            "relative_cost": seconds / p0_seconds if p0_seconds > 0 else math.nan,
        }
    policies = {
        name: {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in entry.items()}
        for name, entry in policies.items()
    }
    served = [r for rows in single_pass_rows.values() for r in rows if r.get("served")]
    cache_note = (
        [
            f"{sum(bool(r['served'].get('cached')) for r in served)} of {len(served)} served "
            "generation calls were answered from the response cache; each counts the seconds "
            "its call took when it was made, not the lookup's."
        ]
        if served
        else []
    )
    return {
        "policies": policies,
        "notes": cache_note
        + [
            "Naive RAG (the base of the relative cost, Eq. 28) is P0: no abstention "
            "instruction. P0 runs first in its generation job and computes the prompt "
            "prefix; P1 runs right after it and reuses the KV cache of their shared "
            "prefix, so P1's latency is that of a warm prefix.",
            "EVID's k evaluator calls run back to back (llama-cpp-python cannot batch "
            "sequences): executed_passes = k + 1, not the paper's 2 batched passes.",
            "EVID_CB counts its closed-book pass as one more logical decision and executed "
            "pass (k + 2) and adds its mean latency (closed_book_seconds_per_query) to "
            "seconds_per_query; the pass is the generation stage's closed-book cell, "
            "shared with P3/P4 and run once per question for every condition.",
            "peak_memory_mb is the host resident set (ru_maxrss) of the EvidentialRAG jobs; "
            "GPU memory is not measured.",
        ],
    }
