"""EvidentialRAG in the workflow: the evaluator and generator loops, their stored rows, the
lambda / tau sweep tables and the efficiency summary.

:mod:`grabrag.evidential.method` holds the method (masses, fusion, evaluator contract, routing);
this module runs it over context rows and turns stored outputs into tables. The LLM is
passed in as a ``complete(messages, grammar, max_tokens)`` callable
(:meth:`grabrag.generation.generator.LlamaGenerator.complete`), so everything here is testable with
a stub and loads no model itself.

Stored files (``results/evidential/<model>/<dataset>/<condition>/``):

* ``evaluations.jsonl``: one row per question: ``qid, index, condition, evaluations``
  (one entry per passage, in fold order (:func:`grabrag.evidential.method.fold_order`):
  ``position`` (in the context), ``fold_rank`` (1 = folded first), ``pid, role, claim,
  value, stance, rationale, evidence, status, raw, finish_reason, prompt_tokens,
  completion_tokens, seconds``), ``evaluator_seconds`` and ``evaluator_passes``.
* ``EVID.jsonl`` / ``EVID_CB.jsonl``: one row per question (:func:`evidential_row`).

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

import itertools
import math
import resource
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from grabrag.core.errors import DataError
from grabrag.core.io import append_checkpoint_row, read_checkpoint_rows
from grabrag.core.progress import Progress
from grabrag.evidential import method as E
from grabrag.generation.batching import Batcher, run_in_groups
from grabrag.generation.generator import PARSE_FAILED, parse_output
from grabrag.scoring import metrics as M

EVID, EVID_CB = "EVID", "EVID_CB"
VARIANTS = (EVID, EVID_CB)
DISPLAY_NAMES = {EVID: "EVID", EVID_CB: "EVID+CB"}
POOLED = "pooled"
ECE_BINS = 15

# complete(messages, grammar, max_tokens) -> {raw, finish_reason, prompt_tokens,
# completion_tokens, seconds}; grammar None = the paper's answer grammar.
Complete = Callable[..., dict[str, Any]]


def peak_memory_mb() -> float:
    """Peak resident memory of this process in MiB (ru_maxrss is KiB on Linux)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


# =====================================================================================
# Evaluator pass
# =====================================================================================


def evaluator_passage(passage: Mapping[str, Any]) -> str:
    """The passage as the evaluator sees it: title line (when there is one) and text."""
    title = str(passage.get("title") or "").strip()
    return f"{title}\n{passage['text']}" if title else str(passage["text"])


def gives_evidence(evaluation: E.Evaluation) -> bool:
    """A judgement that puts a claim into the frame (as :func:`evidential.question_masses`)."""
    return evaluation.evidence > 0 and evaluation.stance != "irrelevant"


def add_to_inventory(inventory: list[str], evaluation: E.Evaluation) -> None:
    """The candidate-claim inventory the next passage's evaluator sees: the values already
    extracted, with evidence, from earlier passages of the question (no repeats after
    SQuAD normalisation)."""
    if not gives_evidence(evaluation):
        return
    seen = {M.normalize_answer(v) for v in inventory}
    if M.normalize_answer(evaluation.value) not in seen:
        inventory.append(evaluation.value.strip())


def folded_evaluations(evaluation_row: Mapping[str, Any]) -> list[E.Evaluation]:
    """The stored evaluations of one question in fold order (by ``fold_rank``)."""
    entries = evaluation_row["evaluations"]
    if any("fold_rank" not in e for e in entries):
        raise DataError(
            f"qid {evaluation_row.get('qid')}: evaluations without a fold_rank were written "
            "in context order by an older version; rerun evidential_evaluate"
        )
    return [stored_evaluation(e) for e in sorted(entries, key=lambda e: e["fold_rank"])]


def fold_group_sizes(evaluation_row: Mapping[str, Any]) -> list[int]:
    """The sizes of the stored evaluations' fold groups, in fold order (``fold_group``;
    :func:`grabrag.evidential.method.fold_groups`), for :func:`grabrag.evidential.method.fuse`."""
    entries = sorted(evaluation_row["evaluations"], key=lambda e: e["fold_rank"])
    # An entry without a fold group is a group of its own.
    groups = (e.get("fold_group", f"own {k}") for k, e in enumerate(entries))
    return [len(list(members)) for _, members in itertools.groupby(groups)]


def stored_evaluation(entry: Mapping[str, Any]) -> E.Evaluation:
    """An :class:`evidential.Evaluation` back from a stored entry."""
    return E.Evaluation(
        claim=entry["claim"],
        value=entry["value"],
        stance=entry["stance"],
        rationale=entry["rationale"],
        evidence=float(entry["evidence"]),
        status=entry["status"],
    )


def evaluate_question(
    complete: Complete, row: Mapping[str, Any], max_tokens: int
) -> dict[str, Any]:
    """Evaluate every passage of one context row in fold order
    (:func:`grabrag.evidential.method.fold_order`; k calls back to back; the inventory grows as
    claims are found), so a permuted context gives the same calls. The members of a fold
    group (:func:`grabrag.evidential.method.fold_groups`) all see the inventory from before the
    group, so their evaluations do not depend on their order either."""
    inventory: list[str] = []
    entries = []
    passages = row["passages"]
    rank = 0
    for group, members in enumerate(E.fold_groups(row["question"], passages), start=1):
        shown = list(inventory)
        found = []
        for i in members:
            rank += 1
            entry, evaluation = _evaluate_passage(
                complete, row["question"], passages[i], shown, max_tokens
            )
            entries.append({"position": i + 1, "fold_rank": rank, "fold_group": group, **entry})
            found.append(evaluation)
        for evaluation in found:
            add_to_inventory(inventory, evaluation)
    return {
        "qid": row["qid"],
        "index": row["index"],
        "condition": row["condition"],
        "evaluations": entries,
        "evaluator_seconds": round(sum(e["seconds"] for e in entries), 3),
        "evaluator_passes": len(entries),
    }


def _evaluate_passage(
    complete: Complete,
    question: str,
    passage: Mapping[str, Any],
    inventory: Sequence[str],
    max_tokens: int,
) -> tuple[dict[str, Any], E.Evaluation]:
    """One evaluator call: its stored entry (without the position and fold fields) and
    its parse."""
    messages = E.evaluator_messages(question, evaluator_passage(passage), inventory)
    result = complete(messages, E.EVALUATOR_GRAMMAR, max_tokens)
    evaluation = E.parse_evaluation(result["raw"], result["finish_reason"])
    entry = {
        "pid": passage.get("pid"),
        "role": passage.get("role"),
        "claim": evaluation.claim,
        "value": evaluation.value,
        "stance": evaluation.stance,
        "rationale": evaluation.rationale,
        "evidence": evaluation.evidence,
        "status": evaluation.status,
        "inventory": list(inventory),
        "raw": result["raw"],
        "finish_reason": result["finish_reason"],
        "prompt_tokens": result["prompt_tokens"],
        "completion_tokens": result["completion_tokens"],
        "seconds": result["seconds"],
    }
    return entry, evaluation


def preflight_messages(
    row: Mapping[str, Any], max_tokens: int
) -> Iterable[tuple[str, list[dict[str, str]]]]:
    """(label, messages) for the evaluator preflight: each passage with the largest
    inventory it can meet (every earlier passage naming a value of max_tokens tokens)."""
    # Distinct strings: the prompt lists each candidate once.
    filler = [f"{'x ' * max_tokens}{j}" for j in range(max(len(row["passages"]) - 1, 0))]
    for position, passage in enumerate(row["passages"], start=1):
        yield (
            f"question {row['qid']} passage {position} (with a full claim inventory)",
            E.evaluator_messages(row["question"], evaluator_passage(passage), filler),
        )


def run_evaluations(
    complete: Complete,
    reset: Callable[[], None],
    context_rows: Sequence[Mapping[str, Any]],
    checkpoint: Path,
    max_tokens: int,
    progress: Progress | None = None,
    batcher: Batcher[Any, Any] | None = None,
) -> list[dict[str, Any]]:
    """Evaluation rows for every question, resuming from ``checkpoint`` (one line per
    finished question, so a killed job redoes at most the question in flight). The KV
    cache is reset before each question, so a resumed run computes what an uninterrupted
    one does. The checkpoint is left in place; the caller removes it once the output is
    written. With a ``batcher`` (the model's batch > 1) the questions of a group run side
    by side, each keeping its passage order and inventory; a group not finished when the
    job was killed is redone whole."""
    batch = batcher.size if batcher else 1
    done = read_checkpoint_rows(checkpoint, keep=lambda row: row.get("batch", 1) == batch)
    checkpoint.parent.mkdir(parents=True, exist_ok=True)

    def evaluate(row: Mapping[str, Any]) -> dict[str, Any]:
        stepping = _stepping(complete, progress, row["qid"])
        return {**evaluate_question(stepping, row, max_tokens), "batch": batch}

    def skipped(rows: Sequence[Mapping[str, Any]]) -> None:
        if progress:
            for row in rows:
                k = len(row["passages"])
                progress.skip(f"{row['qid']} passages 1-{k}", n=k)

    with checkpoint.open("a", encoding="utf-8") as handle:

        def finished(rows: Sequence[Mapping[str, Any]], outs: list[dict[str, Any]]) -> None:
            for row, out in zip(rows, outs, strict=True):
                done[(row["qid"],)] = out
                append_checkpoint_row(handle, out)

        if batcher is not None:
            run_in_groups(
                batcher, context_rows, evaluate, lambda r: (r["qid"],) in done, finished, skipped
            )
        for row in context_rows if batcher is None else ():
            if (row["qid"],) in done:
                skipped([row])
                continue
            reset()
            finished([row], [evaluate(row)])
    return [done[(row["qid"],)] for row in context_rows]


def _stepping(complete: Complete, progress: Progress | None, qid: str) -> Complete:
    if progress is None:
        return complete
    calls = 0

    def wrapped(*args: Any, **kwargs: Any) -> dict[str, Any]:
        nonlocal calls
        result = complete(*args, **kwargs)
        calls += 1
        progress.step(f"{qid} passage {calls}")
        return result

    return wrapped


def evaluation_report(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts of one evaluations file: statuses, stances, passes, seconds."""
    entries = [e for r in rows for e in r["evaluations"]]
    return {
        "questions": len(rows),
        "evaluator_passes": len(entries),
        "status": dict(Counter(e["status"] for e in entries)),
        "stance": dict(Counter(e["stance"] or "(failed)" for e in entries)),
        "with_evidence": sum(stored_evaluation(e).evidence > 0 for e in entries),
        "finish_reasons": dict(Counter(str(e["finish_reason"]) for e in entries)),
        "completion_tokens": sum(e["completion_tokens"] for e in entries),
        "seconds": round(sum(e["seconds"] for e in entries), 3),
    }


# =====================================================================================
# Fusion, routing and the generator pass
# =====================================================================================


def cb_source(cb_row: Mapping[str, Any] | None) -> E.Evaluation | None:
    """The closed-book answer as an evidence source (None: no CB answer to use)."""
    if cb_row is None or cb_row.get("parse_status") == PARSE_FAILED:
        return None
    return E.closed_book_evaluation(
        cb_row.get("answer"), cb_row.get("confidence"), cb_row.get("decision")
    )


def question_state(
    evaluation_row: Mapping[str, Any],
    extra: E.Evaluation | None,
    lam: float | None,
    tau1: float,
    tau2: float,
    merge_f1: float,
) -> dict[str, Any]:
    """Frame, fused masses (Eqs. 7-13), mean pairwise conflict (Eq. 14) and route (Eq. 15)
    of one question from its stored evaluations in fold order (+ ``extra``, the CB source
    of EVID_CB, folded last and kept from being a direct answer's sole support:
    :func:`grabrag.evidential.method.guarded_route`)."""
    evaluations = folded_evaluations(evaluation_row)
    frame, masses = E.question_masses(evaluations, [extra], merge_f1)
    b, u = E.fuse(masses, lam, fold_group_sizes(evaluation_row))
    supported = E.passage_claim_count(evaluations, merge_f1) if extra is not None else None
    return {
        "route": E.guarded_route(frame, b, u, tau1, tau2, supported),
        "u_global": float(u),
        "frame": list(frame),
        "fused_b": [float(x) for x in b],
        "mean_conflict": float(E.mean_pairwise_conflict(masses)),
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
    messages = E.route_messages(
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
        "routes": {r: sum(row["route"] == r for row in rows) for r in E.ROUTES},
        "parse_status": dict(Counter(row["parse_status"] for row in rows)),
        "generator_decisions": dict(Counter(str(row["generator_decision"]) for row in rows)),
        "generator_seconds": round(sum(row["generator_seconds"] for row in rows), 3),
        "completion_tokens": sum(row["completion_tokens"] for row in rows),
    }


# =====================================================================================
# Sweeps from stored evaluations (no LLM call)
# =====================================================================================

SWEEP_COLUMNS = (
    "policy",
    "variant",
    "rule",
    "tau1",
    "tau2",
    "condition",
    "n",
    "answered",
    "answer_rate",
    "abstain_rate",
    "em",
    "f1",
    "ece_answer_15",
    "route_direct",
    "route_conflict_aware",
    "route_abstain",
    "refusal_precision",
    "refusal_recall",
    "refusal_f1",
    "reason",
)


def _rule_label(rule: Any) -> str:
    return rule if isinstance(rule, str) else f"{float(rule):g}"


def sweep_table(
    evaluations: Mapping[str, Sequence[Mapping[str, Any]]],
    gold: Mapping[str, Mapping[str, Sequence[str]]],
    cb_rows: Sequence[Mapping[str, Any]] | None,
    lams: Sequence[float | None] = E.SWEEP_LAMS,
    taus: Sequence[tuple[float, float]] = E.SWEEP_TAUS,
    ablation_lam: float = E.LAMBDA,
    merge_f1: float = 0.8,
) -> list[dict[str, Any]]:
    """The lambda x tau grid and the ablations (:func:`evidential.sweep`) for EVID and (with
    ``cb_rows``) EVID_CB, aggregated per setting and condition, from stored evaluations
    (each question's in fold order).

    ``evaluations``: condition -> evaluation rows; ``gold``: condition -> qid -> gold
    aliases. A sweep decision answers with the top fused claim (no generator call).
    One row per (policy, variant, rule, tau1, tau2, condition) with n, answered,
    answer_rate, abstain_rate, EM, F1 (vs gold; at should-abstain conditions EM/F1 are
    still reported), ``ece_answer_15`` (EvidentialRAG's ECE, Eqs. 26-27:
    :func:`grabrag.scoring.metrics.ece_mean` with 15 bins of every row's fused singleton mass of
    its selected claim, correct = that claim matches a gold alias, routed abstentions
    included) and the route shares; then one ``pooled`` row per setting over every
    condition (the same pooled set as the metrics' ``pooled`` rows) with the refusal
    precision / recall / F1 (Eqs. 23-25) and the pooled ECE. NaN values carry a reason.
    """
    cb = {r["qid"]: cb_source(r) for r in cb_rows} if cb_rows is not None else None
    policies = [EVID] + ([EVID_CB] if cb is not None else [])
    out: list[dict[str, Any]] = []
    for policy in policies:
        settings: dict[tuple, dict[str, list[dict[str, Any]]]] = {}
        for condition, rows in evaluations.items():
            by_qid = {r["qid"]: folded_evaluations(r) for r in rows}
            groups = {r["qid"]: fold_group_sizes(r) for r in rows}
            extra = None
            if policy == EVID_CB:
                missing = [q for q in by_qid if q not in cb]
                if missing:
                    raise DataError(f"no closed-book (CB) row for qid {', '.join(missing[:5])}")
                extra = {q: [cb[q]] for q in by_qid}
            for decision in E.sweep(by_qid, lams, taus, extra, ablation_lam, merge_f1, groups):
                key = (
                    decision["variant"],
                    _rule_label(decision["rule"]),
                    decision["tau1"],
                    decision["tau2"],
                )
                settings.setdefault(key, {}).setdefault(condition, []).append(decision)
        for (variant, rule, tau1, tau2), by_condition in settings.items():
            head = {"policy": policy, "variant": variant, "rule": rule, "tau1": tau1, "tau2": tau2}
            for condition, decisions in by_condition.items():
                out.append({**head, **_aggregate(condition, decisions, gold[condition])})
            out.append({**head, **_pooled(by_condition, gold)})
    return out


def _ece(pairs: Sequence[tuple[float, int]]) -> M.Value:
    return M.ece_mean([c for c, _ in pairs], [y for _, y in pairs], ECE_BINS)


def _scored(decisions: Sequence[Mapping[str, Any]], gold: Mapping[str, Sequence[str]]):
    """(Eq. 27 confidence, selected claim correct) of every decision row."""
    pairs = []
    for row in decisions:
        pair = M.selected_answer_score(row, gold[row["qid"]])
        if pair is not None:
            pairs.append(pair)
    return pairs


def _route_shares(decisions: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    n = len(decisions)
    return {
        f"route_{route}": (sum(r["route"] == route for r in decisions) / n if n else math.nan)
        for route in E.ROUTES
    }


def _aggregate(
    condition: str, decisions: Sequence[Mapping[str, Any]], gold: Mapping[str, Sequence[str]]
) -> dict[str, Any]:
    n = len(decisions)
    answered = sum(M.answered(r) for r in decisions)
    ece = _ece(_scored(decisions, gold))
    return {
        "condition": condition,
        "n": n,
        "answered": answered,
        "answer_rate": answered / n if n else math.nan,
        "abstain_rate": sum(M.abstained(r) for r in decisions) / n if n else math.nan,
        "em": float(M.em_rate(decisions, gold)),
        "f1": float(M.f1_rate(decisions, gold)),
        "ece_answer_15": float(ece),
        **_route_shares(decisions),
        "refusal_precision": math.nan,
        "refusal_recall": math.nan,
        "refusal_f1": math.nan,
        "reason": "no questions" if n == 0 else None,
    }


def _pooled(
    by_condition: Mapping[str, Sequence[Mapping[str, Any]]],
    gold: Mapping[str, Mapping[str, Sequence[str]]],
) -> dict[str, Any]:
    rows = [r for decisions in by_condition.values() for r in decisions]
    n = len(rows)
    answered = sum(M.answered(r) for r in rows)
    pairs = [p for c, decisions in by_condition.items() for p in _scored(decisions, gold[c])]
    ece = _ece(pairs)
    refusal = M.refusal_scores(by_condition)
    reasons = [v.reason for v in (*refusal.values(), ece) if v.reason]
    return {
        "condition": POOLED,
        "n": n,
        "answered": answered,
        "answer_rate": answered / n if n else math.nan,
        "abstain_rate": sum(M.abstained(r) for r in rows) / n if n else math.nan,
        "em": math.nan,
        "f1": math.nan,
        "ece_answer_15": float(ece),
        **_route_shares(rows),
        **{metric: float(value) for metric, value in refusal.items()},
        "reason": "; ".join(dict.fromkeys(reasons)) or None,
    }


# =====================================================================================
# Efficiency (EvidentialRAG section 5.8, Table 11)
# =====================================================================================


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
    return {
        "policies": policies,
        "notes": [
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
