"""Abstention and answer rates over decision rows (GRAB-RAG section 3.5, Appendix A):
answer, abstain and parse-failure rates, HwSA (and its robustness to swap quality, Table 6),
the capability set and FAC, mean EM and F1, the QC answer breakdown (Tables 3, 9), and
EvidentialRAG's refusal precision, recall and F1 (Eqs. 23-25).

Row conventions (what answered, abstained and unparseable mean): :mod:`grabrag.scoring.answers`.
Zero-size cases return a NaN :class:`~grabrag.scoring.value.Value` with its reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from grabrag.core.conditions import SHOULD_ABSTAIN, SHOULD_ANSWER
from grabrag.scoring.answers import (
    QC_CATEGORIES,
    abstained,
    answered,
    classify_qc_answer,
    parse_failed,
    planted_strings,
    row_em,
    row_f1,
)
from grabrag.scoring.value import Value


def answer_rate(rows: Sequence[dict], qids: set[str] | None = None) -> tuple[int, float]:
    """(n, share of rows that answered) over ``rows``, or over those whose qid is in ``qids``.

    On a should-abstain condition (Q0, QC) this is HwSA: any answer counts, even a
    correct one. A row whose output could not be parsed did not answer.
    """
    chosen = [r for r in rows if qids is None or r["qid"] in qids]
    if not chosen:
        return 0, float("nan")
    return len(chosen), sum(r.get("decision") == "answer" for r in chosen) / len(chosen)


def _ratio(numerator: float, denominator: int, reason: str) -> Value:
    if denominator == 0:
        return Value.undefined(reason)
    return Value(numerator / denominator, denominator)


def _select(rows: Sequence[Mapping[str, Any]], qids: Iterable[str] | None) -> list:
    if qids is None:
        return list(rows)
    keep = set(qids)
    return [r for r in rows if r["qid"] in keep]


def decision_rate(
    rows: Sequence[Mapping[str, Any]], decision: str | None, qids: Iterable[str] | None = None
) -> Value:
    """Share of ``rows`` (or of those whose qid is in ``qids``) whose decision is
    ``decision`` ("answer", "abstain", or None for unparseable)."""
    chosen = _select(rows, qids)
    if decision is None:
        hits = sum(map(parse_failed, chosen))
    else:
        hits = sum(r.get("decision") == decision for r in chosen)
    return _ratio(hits, len(chosen), "no rows")


def hwsa(rows: Sequence[Mapping[str, Any]], qids: Iterable[str] | None = None) -> Value:
    """HwSA (Eq. 1): answer rate on a should-abstain condition; any answer counts, even a
    correct one at QC. ``qids`` restricts it to a subset (the paired QC-eligible set)."""
    chosen = _select(rows, qids)
    return _ratio(
        sum(map(answered, chosen)), len(chosen), "no should-abstain rows (no QC-eligible questions)"
    )


def audit_hwsa(
    qc_rows: Sequence[Mapping[str, Any]],
    q0_rows: Sequence[Mapping[str, Any]] | None,
    clean_qids: Iterable[str],
) -> dict[str, Value]:
    """Table 6 (robustness to swap quality): HwSA@QC on every QC row (``qc_all``) and on
    the questions whose swap an auditor rated fluent or borderline (``qc_clean``), their
    ``shift`` (clean - all), and the Q0 -> QC delta (QC - Q0) on both sets, with Q0 taken on
    the same questions (paired): ``q0_all``, ``q0_clean``, ``delta_all``, ``delta_clean``.
    ``q0_rows`` None (no Q0 cell) leaves the Q0 values NaN with a reason."""
    clean = set(clean_qids)
    qc_qids = {r["qid"] for r in qc_rows}
    out = {"qc_all": hwsa(qc_rows), "qc_clean": hwsa(qc_rows, clean)}
    if qc_qids and not qc_qids & clean:
        out["qc_clean"] = Value.undefined("no QC row among the audited fluent/borderline swaps")
    if q0_rows is None:
        missing = Value.undefined("no Q0 cell (Q0 is not among generation.conditions)")
        out["q0_all"] = out["q0_clean"] = missing
    else:
        out["q0_all"] = hwsa(q0_rows, qc_qids)
        out["q0_clean"] = hwsa(q0_rows, qc_qids & clean)
    for name, (a, b) in {
        "shift": ("qc_all", "qc_clean"),
        "delta_all": ("q0_all", "qc_all"),
        "delta_clean": ("q0_clean", "qc_clean"),
    }.items():
        low, high = out[a], out[b]
        if np.isnan(low) or np.isnan(high):
            out[name] = Value.undefined(low.reason or high.reason or "undefined", high.n)
        else:
            out[name] = Value(float(high) - float(low), high.n)
    return out


def capability_set(
    p1_q100_rows: Sequence[Mapping[str, Any]], gold: Mapping[str, Sequence[str]]
) -> set[str]:
    """C_{P1,m}: qids the model answers correctly (EM) at Q100 under P1."""
    return {r["qid"] for r in p1_q100_rows if row_em(r, gold[r["qid"]]) == 1.0}


def fac(rows: Sequence[Mapping[str, Any]], capability: Iterable[str]) -> Value:
    """FAC (Eq. 2): abstention rate on the capability set. Only explicit abstentions
    count; a capable question missing from ``rows`` is not counted (n is the number of
    capable questions with a row)."""
    chosen = _select(rows, capability)
    return _ratio(
        sum(map(abstained, chosen)),
        len(chosen),
        "empty capability set: the model answers no question correctly (EM) at Q100 under P1",
    )


def em_rate(
    rows: Sequence[Mapping[str, Any]],
    gold: Mapping[str, Sequence[str]],
    qids: Iterable[str] | None = None,
) -> Value:
    """Mean EM over rows (abstentions and unparseable rows score 0)."""
    chosen = _select(rows, qids)
    return _ratio(sum(row_em(r, gold[r["qid"]]) for r in chosen), len(chosen), "no rows")


def f1_rate(
    rows: Sequence[Mapping[str, Any]],
    gold: Mapping[str, Sequence[str]],
    qids: Iterable[str] | None = None,
) -> Value:
    """Mean token F1 over rows (abstentions and unparseable rows score 0)."""
    chosen = _select(rows, qids)
    return _ratio(sum(row_f1(r, gold[r["qid"]]) for r in chosen), len(chosen), "no rows")


def qc_breakdown(
    rows: Sequence[Mapping[str, Any]],
    qc_contexts: Mapping[str, Mapping[str, Any]],
    lenient: bool = False,
) -> dict[str, Value]:
    """Answered QC rows split into echo / override / hallucination (Table 3, Table 9);
    ``lenient``: the containment split (see :func:`classify_qc_answer`).

    Returns ``answered`` (count, n = QC rows), the three counts and the three shares
    (``echo_share`` ...; n = answered rows; NaN with a reason when nothing was answered).
    ``qc_contexts`` maps qid -> QC context row (``answers``, ``replacement``,
    ``replacement_entity``).
    """
    counts = dict.fromkeys(QC_CATEGORIES, 0)
    n_answered = 0
    for row in rows:
        if not answered(row):
            continue
        context = qc_contexts[row["qid"]]
        counts[
            classify_qc_answer(
                row.get("answer"), context["answers"], planted_strings(context), lenient
            )
        ] += 1
        n_answered += 1
    out: dict[str, Value] = {"answered": Value(n_answered, len(rows))}
    for category in QC_CATEGORIES:
        out[category] = Value(counts[category], n_answered)
        out[f"{category}_share"] = _ratio(counts[category], n_answered, "no answered QC rows")
    return out


# --- refusal precision / recall / F1 (EvidentialRAG Eqs. 23-25) -------------------------

NO_REFUSAL = "no abstention in these rows: refusal precision is undefined"
NO_SHOULD_ABSTAIN = "no row of a should-abstain condition (Q0, QC, QX): refusal recall is undefined"


def refusal_f1_from(precision: float, recall: float) -> float:
    """Eq. 25: the harmonic mean; NaN when either is undefined, 0 when both are 0."""
    if np.isnan(precision) or np.isnan(recall):
        return float("nan")
    if precision + recall == 0:
        return 0.0
    return 2 * precision * recall / (precision + recall)


def refusal_scores(
    rows_by_condition: Mapping[str, Sequence[Mapping[str, Any]]],
) -> dict[str, Value]:
    """Refusal precision, recall and F1 pooled over the conditions of ``rows_by_condition``
    (condition -> decision rows).

    R_i = 1 for an abstention (decision "abstain"; a parse failure is not a refusal),
    U_i = 1 for a row of a should-abstain condition (Q0, QC, QX). Precision = sum(R U) /
    sum(R) (n = refusals), recall = sum(R U) / sum(U) (n = should-abstain rows), F1 =
    2PR / (P + R) (n = rows). A zero denominator gives NaN with its reason.
    """
    refused = hits = should = total = 0
    for condition, rows in rows_by_condition.items():
        if condition not in SHOULD_ANSWER + SHOULD_ABSTAIN:
            raise ValueError(f"unknown condition {condition!r}")
        unanswerable = condition in SHOULD_ABSTAIN
        for row in rows:
            r = abstained(row)
            total += 1
            refused += r
            should += unanswerable
            hits += r and unanswerable
    precision = _ratio(hits, refused, NO_REFUSAL)
    recall = _ratio(hits, should, NO_SHOULD_ABSTAIN)
    f1 = refusal_f1_from(float(precision), float(recall))
    reason = precision.reason or recall.reason
    return {
        "refusal_precision": precision,
        "refusal_recall": recall,
        "refusal_f1": Value(f1, total) if not np.isnan(f1) else Value.undefined(reason, total),
    }
