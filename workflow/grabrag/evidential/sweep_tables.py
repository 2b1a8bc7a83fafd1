"""The lambda x tau sweep and ablation tables of EVID and EVID_CB (EvidentialRAG Tables
9-10 and 12): :func:`grabrag.evidential.routing.sweep` over every condition's stored
evaluations, aggregated per setting and condition and pooled, with no LLM call.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from grabrag.core.errors import DataError
from grabrag.evidential.fusion import LAMBDA
from grabrag.evidential.routing import ROUTES, SWEEP_LAMS, SWEEP_TAUS, sweep
from grabrag.evidential.stored import (
    EVID,
    EVID_CB,
    cb_source,
    fold_group_sizes,
    folded_evaluations,
)
from grabrag.scoring import answers as A
from grabrag.scoring.abstention import em_rate, f1_rate, refusal_scores
from grabrag.scoring.calibration import ece_mean, selected_answer_score
from grabrag.scoring.value import Value

POOLED = "pooled"
ECE_BINS = 15

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
    lams: Sequence[float | None] = SWEEP_LAMS,
    taus: Sequence[tuple[float, float]] = SWEEP_TAUS,
    ablation_lam: float = LAMBDA,
    merge_f1: float = 0.8,
) -> list[dict[str, Any]]:
    """The lambda x tau grid and the ablations (:func:`grabrag.evidential.routing.sweep`)
    for EVID and (with ``cb_rows``) EVID_CB, aggregated per setting and condition, from
    stored evaluations (each question's in fold order).

    ``evaluations``: condition -> evaluation rows; ``gold``: condition -> qid -> gold
    aliases. A sweep decision answers with the top fused claim (no generator call).
    One row per (policy, variant, rule, tau1, tau2, condition) with n, answered,
    answer_rate, abstain_rate, EM, F1 (vs gold; at should-abstain conditions EM/F1 are
    still reported), ``ece_answer_15`` (EvidentialRAG's ECE, Eqs. 26-27:
    :func:`grabrag.scoring.calibration.ece_mean` with 15 bins of every row's fused singleton mass of
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
            for decision in sweep(by_qid, lams, taus, extra, ablation_lam, merge_f1, groups):
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


def _ece(pairs: Sequence[tuple[float, int]]) -> Value:
    return ece_mean([c for c, _ in pairs], [y for _, y in pairs], ECE_BINS)


def _scored(decisions: Sequence[Mapping[str, Any]], gold: Mapping[str, Sequence[str]]):
    """(Eq. 27 confidence, selected claim correct) of every decision row."""
    pairs = []
    for row in decisions:
        pair = selected_answer_score(row, gold[row["qid"]])
        if pair is not None:
            pairs.append(pair)
    return pairs


def _route_shares(decisions: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    n = len(decisions)
    return {
        f"route_{route}": (sum(r["route"] == route for r in decisions) / n if n else math.nan)
        for route in ROUTES
    }


def _aggregate(
    condition: str, decisions: Sequence[Mapping[str, Any]], gold: Mapping[str, Sequence[str]]
) -> dict[str, Any]:
    n = len(decisions)
    answered = sum(A.answered(r) for r in decisions)
    ece = _ece(_scored(decisions, gold))
    return {
        "condition": condition,
        "n": n,
        "answered": answered,
        "answer_rate": answered / n if n else math.nan,
        "abstain_rate": sum(A.abstained(r) for r in decisions) / n if n else math.nan,
        "em": float(em_rate(decisions, gold)),
        "f1": float(f1_rate(decisions, gold)),
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
    answered = sum(A.answered(r) for r in rows)
    pairs = [p for c, decisions in by_condition.items() for p in _scored(decisions, gold[c])]
    ece = _ece(pairs)
    refusal = refusal_scores(by_condition)
    reasons = [v.reason for v in (*refusal.values(), ece) if v.reason]
    return {
        "condition": POOLED,
        "n": n,
        "answered": answered,
        "answer_rate": answered / n if n else math.nan,
        "abstain_rate": sum(A.abstained(r) for r in rows) / n if n else math.nan,
        "em": math.nan,
        "f1": math.nan,
        "ece_answer_15": float(ece),
        **_route_shares(rows),
        **{metric: float(value) for metric, value in refusal.items()},
        "reason": "; ".join(dict.fromkeys(reasons)) or None,
    }
