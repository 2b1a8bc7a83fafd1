"""The EvidentialRAG generator pass in the workflow: each question's stored evaluations
fused (EVID; EVID_CB adds the closed-book answer as a source) and routed, one generator
call per question and variant with the route's prompt, resumable from a checkpoint, the
rows it stores and its report.

LLM-call accounting (EvidentialRAG section 3.6, Table 11): a question with k passages
makes k logical evaluator decisions and one generator decision (k + 1). The paper runs
the k evaluator decisions as one batched pass; llama-cpp-python cannot batch several
sequences in one call, so here they run back to back (sharing the KV cache of their
common prefix: system message, question, rules) and are counted as k executed passes:
``executed_passes`` = k + 1. EVID_CB adds the closed-book (CB) answer as one more
evidence source: its CB pass is one more logical decision and executed pass (k + 2), and
its latency is part of EVID_CB's seconds per query, although the pass itself is the
generation stage's ``Qclosed/CB`` cell (shared with P3 and P4, and run once per question
for every condition).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from grabrag.core.errors import DataError
from grabrag.core.io import append_checkpoint_row, read_checkpoint_rows
from grabrag.core.progress import Progress
from grabrag.evidential.claims import passage_claim_count, question_masses
from grabrag.evidential.evaluator import Evaluation
from grabrag.evidential.evaluator_pass import Complete
from grabrag.evidential.fusion import fuse, mean_pairwise_conflict
from grabrag.evidential.routing import ROUTES, guarded_route, route_messages
from grabrag.evidential.stored import (
    EVID_CB,
    VARIANTS,
    cb_source,
    fold_group_sizes,
    folded_evaluations,
)
from grabrag.generation.batching import Batcher, run_in_groups
from grabrag.generation.generator import parse_output, provenance


def question_state(
    evaluation_row: Mapping[str, Any],
    extra: Evaluation | None,
    lam: float | None,
    tau1: float,
    tau2: float,
    merge_f1: float,
) -> dict[str, Any]:
    """Frame, fused masses (Eqs. 7-13), mean pairwise conflict (Eq. 14) and route (Eq. 15)
    of one question from its stored evaluations in fold order (+ ``extra``, the CB source
    of EVID_CB, folded last and kept from being a direct answer's sole support:
    :func:`grabrag.evidential.routing.guarded_route`)."""
    evaluations = folded_evaluations(evaluation_row)
    frame, masses = question_masses(evaluations, [extra], merge_f1)
    b, u = fuse(masses, lam, fold_group_sizes(evaluation_row))
    supported = passage_claim_count(evaluations, merge_f1) if extra is not None else None
    return {
        "route": guarded_route(frame, b, u, tau1, tau2, supported),
        "u_global": float(u),
        "frame": list(frame),
        "fused_b": [float(x) for x in b],
        "mean_conflict": float(mean_pairwise_conflict(masses)),
        "n_sources": len(masses),
    }


def _by_qid(rows: Sequence[Mapping[str, Any]], kind: str) -> dict[str, Mapping[str, Any]]:
    out: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        if row["qid"] in out:
            raise DataError(f"{kind} rows: qid {row['qid']} appears more than once")
        out[row["qid"]] = row
    return out


def _matched(
    context_rows: Sequence[Mapping[str, Any]],
    evaluation_rows: Sequence[Mapping[str, Any]],
    cb_rows: Sequence[Mapping[str, Any]] | None,
) -> tuple[dict[str, Mapping[str, Any]], dict[str, Mapping[str, Any]]]:
    evaluations = _by_qid(evaluation_rows, "evaluation")
    cb = _by_qid(cb_rows or [], "closed-book (CB)")
    missing = [r["qid"] for r in context_rows if r["qid"] not in evaluations]
    if missing:
        raise DataError(
            f"no evaluation row for qid {', '.join(missing[:5])} ({len(missing)} questions); "
            "the evaluations file does not match the contexts, rerun evidential_evaluate"
        )
    if cb_rows is not None:
        missing = [r["qid"] for r in context_rows if r["qid"] not in cb]
        if missing:
            raise DataError(
                f"no closed-book (CB) row for qid {', '.join(missing[:5])}; rerun the CB cell"
            )
    for row in context_rows:
        passages = len(row["passages"])
        stored = len(evaluations[row["qid"]]["evaluations"])
        if stored != passages:
            raise DataError(
                f"qid {row['qid']}: {stored} evaluations for {passages} passages; rerun "
                "evidential_evaluate"
            )
    return evaluations, cb


def plan_question(
    context_row: Mapping[str, Any],
    evaluation_row: Mapping[str, Any],
    cb_row: Mapping[str, Any] | None,
    variant: str,
    settings: Mapping[str, float],
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The fused state of one question under ``variant`` and its route prompt."""
    extra = cb_source(cb_row) if variant == EVID_CB else None
    state = question_state(
        evaluation_row,
        extra,
        settings["lam"],
        settings["tau1"],
        settings["tau2"],
        settings["merge_f1"],
    )
    if variant == EVID_CB:
        state["cb_source"] = (
            None if extra is None else {"value": extra.value, "evidence": extra.evidence}
        )
    messages = route_messages(
        state["route"],
        context_row["question"],
        context_row["context"],
        state["frame"],
        state["fused_b"],
        state["u_global"],
    )
    return state, messages


def evidential_row(
    context_row: Mapping[str, Any],
    evaluation_row: Mapping[str, Any],
    variant: str,
    state: Mapping[str, Any],
    result: Mapping[str, Any],
    cb_row: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One EVID / EVID_CB row: the fused state, the generator's parsed output and the
    call accounting (module docstring; ``cb_row``: EVID_CB's closed-book row)."""
    parsed = parse_output(result["raw"], result["finish_reason"])
    k = int(evaluation_row["evaluator_passes"])
    evaluator_seconds = float(evaluation_row["evaluator_seconds"])
    cb_passes = 1 if variant == EVID_CB else 0
    cb_seconds = float((cb_row or {}).get("seconds") or 0.0) if cb_passes else 0.0
    seconds = evaluator_seconds + float(result["seconds"]) + cb_seconds
    return {
        "qid": context_row["qid"],
        "index": context_row["index"],
        "condition": context_row["condition"],
        "policy": variant,
        **state,
        "generator_decision": parsed.decision,
        "generator_answer": parsed.answer,
        "generator_confidence": parsed.confidence,
        "reasoning": parsed.reasoning,
        "parse_status": parsed.status,
        "raw": result["raw"],
        "finish_reason": result["finish_reason"],
        "prompt_tokens": result["prompt_tokens"],
        "completion_tokens": result["completion_tokens"],
        "generator_seconds": result["seconds"],
        "evaluator_seconds": evaluator_seconds,
        "cb_seconds": cb_seconds,
        "seconds": round(seconds, 3),
        "evaluator_passes": k,
        "cb_passes": cb_passes,
        "logical_decisions": k + 1 + cb_passes,
        "executed_passes": k + 1 + cb_passes,
        **provenance(result),
    }


def run_generation(
    complete: Complete,
    reset: Callable[[], None],
    context_rows: Sequence[Mapping[str, Any]],
    evaluation_rows: Sequence[Mapping[str, Any]],
    cb_rows: Sequence[Mapping[str, Any]] | None,
    variants: Sequence[str],
    settings: Mapping[str, float],
    checkpoint: Path,
    progress: Progress | None = None,
    batcher: Batcher[Any, Any] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """One generator call per question per variant (the route's prompt, the paper's JSON
    answer grammar), resuming from ``checkpoint``; rows per variant in question order.

    The variants of one question run back to back after a KV-cache reset (they share the
    context prefix); a question in flight when the job was killed is redone whole. With a
    ``batcher`` (the model's batch > 1) the calls of ``batcher.size // len(variants)``
    questions (at least one) are decoded together; a group not finished when the job was
    killed is redone whole."""
    for variant in variants:
        if variant not in VARIANTS:
            raise ValueError(f"unknown evidential variant {variant!r}")
    if EVID_CB in variants and cb_rows is None:
        raise ValueError("EVID_CB needs the closed-book (CB) rows")
    evaluations, cb = _matched(context_rows, evaluation_rows, cb_rows)
    batch = batcher.size if batcher else 1
    done = read_checkpoint_rows(
        checkpoint, ("qid", "policy"), keep=lambda row: row.get("batch", 1) == batch
    )
    checkpoint.parent.mkdir(parents=True, exist_ok=True)

    def generate(unit: tuple[Mapping[str, Any], str]) -> dict[str, Any]:
        row, variant = unit
        qid = row["qid"]
        state, messages = plan_question(row, evaluations[qid], cb.get(qid), variant, settings)
        result = complete(messages, None, None)
        out = evidential_row(row, evaluations[qid], variant, state, result, cb.get(qid))
        return {**out, "batch": batch}

    with checkpoint.open("a", encoding="utf-8") as handle:

        def finished(units: Sequence[tuple[Mapping[str, Any], str]], outs: list[Any]) -> None:
            for (row, variant), out in zip(units, outs, strict=True):
                done[(row["qid"], variant)] = out
                append_checkpoint_row(handle, out)
                if progress:
                    progress.step(f"{row['qid']} {variant} ({out['route']})")

        def skipped(units: Sequence[tuple[Mapping[str, Any], str]]) -> None:
            if progress:
                progress.skip(f"{units[0][0]['qid']} .. {units[-1][0]['qid']}", n=len(units))

        if batcher is not None:
            run_in_groups(
                batcher,
                [(row, variant) for row in context_rows for variant in variants],
                generate,
                lambda unit: (unit[0]["qid"], unit[1]) in done,
                finished,
                skipped,
                per_question=len(variants),
            )
        for row in context_rows if batcher is None else ():
            qid = row["qid"]
            pending = [v for v in variants if (qid, v) not in done]
            if pending and len(pending) < len(variants):
                pending = list(variants)
            if pending:
                reset()
            units = [(row, variant) for variant in pending]
            for unit in units:
                finished([unit], [generate(unit)])
            if not pending and progress:
                progress.skip(f"{qid} {', '.join(variants)}", n=len(variants))
    return {v: [done[(row["qid"], v)] for row in context_rows] for v in variants}


def generation_preflight(
    context_rows: Sequence[Mapping[str, Any]],
    evaluation_rows: Sequence[Mapping[str, Any]],
    cb_rows: Sequence[Mapping[str, Any]] | None,
    variants: Sequence[str],
    settings: Mapping[str, float],
) -> Iterable[tuple[str, list[dict[str, str]]]]:
    """(label, messages) of every generator call, for the prompt-length preflight."""
    evaluations, cb = _matched(context_rows, evaluation_rows, cb_rows)
    for row in context_rows:
        for variant in variants:
            _, messages = plan_question(
                row, evaluations[row["qid"]], cb.get(row["qid"]), variant, settings
            )
            yield f"question {row['qid']} ({variant})", messages


def generation_report(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {
        "questions": len(rows),
        "routes": {r: sum(row["route"] == r for row in rows) for r in ROUTES},
        "parse_status": dict(Counter(row["parse_status"] for row in rows)),
        "generator_decisions": dict(Counter(str(row["generator_decision"]) for row in rows)),
        "generator_seconds": round(sum(row["generator_seconds"] for row in rows), 3),
        "completion_tokens": sum(row["completion_tokens"] for row in rows),
    }
