"""Abstention policies P0-P4 (GRAB-RAG section 3.4, Appendix B "P3 Decision Logic", Appendix F).

Every policy turns stored rows into one decision row per question::

    {"qid", "index", "condition", "policy", "decision", "answer", "confidence", "rule"}

plus, for P3, ``f1`` (the agreement score, None when the rule table stopped earlier) and,
for P4, ``nli_labels`` (the passage labels, None when a gate stopped earlier). No policy
calls a model: P3 and P4 only read the P1 cell, the closed-book (CB) cell and, for P4,
the NLI file.

* P0, P1, P2 pass their own generation rows through (rule ``generated``).
* P3 applies the Appendix B rule table, in order, first match wins:

  ====================================  ===========  ==========  =================
  condition                             decision     confidence  rule
  ====================================  ===========  ==========  =================
  P1 abstains                           abstain      0           ``p1_abstained``
  CB abstains or CB confidence < cutoff  P1's answer  P1's        ``cb_unreliable``
  F1(P1 answer, CB answer) >= threshold  P1's answer  P1's        ``f1_agree``
  otherwise                             abstain      0           ``f1_conflict``
  ====================================  ===========  ==========  =================

  Ties: a CB confidence equal to the cutoff is not below it (it goes on to the F1
  check); an F1 equal to the threshold agrees. F1 is :func:`grabrag.scoring.answers.token_f1`,
  the evaluation metric's own normalisation. Token F1 is a ratio of small integers, so
  it is compared with a 1e-9 tolerance: an F1 that is exactly 0.8 on paper but
  0.7999999999999999 in floating point still agrees.
* P4 shares P3's first two gates, then reads the NLI labels of the question's passages
  (:mod:`grabrag.policies.nli`): any ``contradiction`` -> abstain, confidence 0, rule
  ``nli_contradiction``; else P1's answer and confidence, rule ``nli_consistent``.

Failed parses (the generation row has ``parse_status`` "failed" and decision None) are
neither an answer nor an abstention, and are kept that way: the decision row has
decision None, answer None, confidence None and rule ``parse_failed``. Nothing is
invented (no confidence 0 that would enter AURC/ECE as a real score), they count as
"did not answer" in :func:`grabrag.scoring.abstention.answer_rate`, and reports can count them by
their rule. P3 and P4 never answer without P1's answer, so a failed P1 row makes a
``parse_failed`` P3/P4 row too. A failed CB row gives no parametric signal: like an
abstaining CB pass it defers to P1 (P1's answer and confidence), under its own rule
``cb_parse_failed`` so it stays countable. An abstention made by a policy rule has
answer "" (the prompt's "leave the answer empty").

Rows are matched by qid. Every question of the P1 cell needs a CB row (and, for P4, an
NLI row); a missing one is a DataError naming the qids and the kind of file.

The decision-row shape and the rule names are shared with the other methods' policies
(:mod:`grabrag.policies.rows`); EvidentialRAG's policies decide in
:mod:`grabrag.evidential.decisions`, CDD's in :mod:`grabrag.cdd.decisions`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from grabrag.core.conditions import CLOSED_BOOK_PROMPT
from grabrag.core.decisions import ABSTAIN, ANSWER
from grabrag.core.errors import DataError
from grabrag.policies.rows import (
    CB_UNRELIABLE,
    CONTRADICTION,
    F1_AGREE,
    F1_CONFLICT,
    GENERATED,
    NLI_CONSISTENT,
    NLI_CONTRADICTION,
    P1_ABSTAINED,
    RULE_CB_PARSE_FAILED,
    abstain_row,
    decision_row,
    is_failed,
    p1_answer_row,
    parse_failed_row,
)
from grabrag.scoring.answers import token_f1

SINGLE_PASS = ("P0", "P1", "P2")
NLI = "NLI"

CONFIDENCE_CUTOFF = 50
F1_THRESHOLD = 0.8
F1_TOLERANCE = 1e-9
# Table 12 (Appendix F): the sweep grid (p3_sweep_grid adds the configured setting).
SWEEP_THRESHOLDS = (0.0, 0.2, 0.4, 0.6, 0.7, 0.8, 0.9, 1.0)
SWEEP_CUTOFFS = (0, 20, 40, 50, 60, 80)


def p3_sweep_grid(threshold: float, cutoff: float) -> dict[str, list[float]]:
    """The P3 sweep's F1 thresholds and confidence cutoffs: the grid plus the configured
    ``threshold`` and ``cutoff`` when it lacks them, so the tables and figure that read the
    sweep at the configured setting always find it."""
    return {
        "thresholds": sorted({*SWEEP_THRESHOLDS, float(threshold)}),
        "cutoffs": sorted({*SWEEP_CUTOFFS, cutoff}),
    }


_KINDS = {
    "P0": "P0 generation",
    "P1": "P1 generation (context pass)",
    "P2": "P2 generation",
    CLOSED_BOOK_PROMPT: "closed-book (CB) generation",
    NLI: "NLI",
}


# --- row checks ------------------------------------------------------------------------


def _check_generation_rows(rows: Sequence[Mapping[str, Any]], kind: str) -> None:
    """Columns and values the policies rely on; a wrong prompt is a wiring mistake."""
    label = _KINDS[kind]
    seen: set[str] = set()
    for position, row in enumerate(rows, start=1):
        for column in ("qid", "decision", "answer", "confidence"):
            if column not in row:
                raise DataError(f"{label} row {position}: column {column!r} is missing")
        qid = row["qid"]
        if qid in seen:
            raise DataError(f"{label} rows: qid {qid} appears more than once")
        seen.add(qid)
        prompt = row.get("prompt")
        if prompt is not None and prompt != kind:
            raise DataError(
                f"{label} rows: qid {qid} comes from prompt {prompt!r}, expected {kind!r}; "
                "the rule was given the wrong generation file"
            )
        decision = row["decision"]
        if decision not in (ANSWER, ABSTAIN, None):
            raise DataError(f"{label} row for qid {qid}: unknown decision {decision!r}")
        if decision is not None and not is_failed(row):
            confidence = row["confidence"]
            if isinstance(confidence, bool) or not isinstance(confidence, int | float):
                raise DataError(
                    f"{label} row for qid {qid}: confidence {confidence!r} is not a number"
                )
            if not isinstance(row["answer"], str):
                raise DataError(f"{label} row for qid {qid}: answer {row['answer']!r} is not text")


def _by_qid(
    rows: Sequence[Mapping[str, Any]], kind: str, needed: Iterable[str]
) -> dict[str, Mapping[str, Any]]:
    """Index ``rows`` by qid; every qid in ``needed`` must be there."""
    index: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        if "qid" not in row:
            raise DataError(f"{_KINDS[kind]} rows: a row has no 'qid' column")
        if row["qid"] in index:
            raise DataError(f"{_KINDS[kind]} rows: qid {row['qid']} appears more than once")
        index[row["qid"]] = row
    needed = list(needed)
    missing = [qid for qid in needed if qid not in index]
    if missing:
        shown = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
        raise DataError(
            f"no {_KINDS[kind]} row for qid {shown} ({len(missing)} of {len(needed)} "
            f"questions); the {_KINDS[kind]} file does not match the P1 cell, rerun the rule "
            "that writes it"
        )
    return index


# --- P0, P1, P2 -----------------------------------------------------------------------


def single_pass_decisions(rows: Sequence[Mapping[str, Any]], policy: str) -> list[dict[str, Any]]:
    """P0, P1 or P2: the generation rows of that prompt, as decision rows."""
    if policy not in SINGLE_PASS:
        raise ValueError(f"{policy!r} is not a single-pass policy ({', '.join(SINGLE_PASS)})")
    _check_generation_rows(rows, policy)
    out = []
    for row in rows:
        if is_failed(row):
            out.append(parse_failed_row(row, policy))
        else:
            out.append(
                decision_row(
                    row, policy, row["decision"], row["answer"], row["confidence"], GENERATED
                )
            )
    return out


# --- P3 -------------------------------------------------------------------------------


def _cb_gate(
    p1: Mapping[str, Any], cb: Mapping[str, Any], policy: str, cutoff: float
) -> dict[str, Any] | None:
    """P3 and P4's first two gates; None when the CB pass is confident and answered."""
    if is_failed(p1):
        return parse_failed_row(p1, policy)
    if p1["decision"] == ABSTAIN:
        return abstain_row(p1, policy, P1_ABSTAINED)
    if is_failed(cb):
        return p1_answer_row(p1, policy, RULE_CB_PARSE_FAILED)
    if cb["decision"] == ABSTAIN or cb["confidence"] < cutoff:
        return p1_answer_row(p1, policy, CB_UNRELIABLE)
    return None


def agreement_f1(context_answer: str, cb_answer: str) -> float:
    """Token F1 between the two passes' answers (the evaluation metric's normalisation)."""
    return token_f1(context_answer, [cb_answer])


def p3_decision(
    p1: Mapping[str, Any],
    cb: Mapping[str, Any],
    cutoff: float = CONFIDENCE_CUTOFF,
    threshold: float = F1_THRESHOLD,
) -> dict[str, Any]:
    """The Appendix B rule table for one question (P1 row + CB row of the same qid)."""
    gated = _cb_gate(p1, cb, "P3", cutoff)
    if gated is not None:
        return {**gated, "f1": None}
    f1 = agreement_f1(p1["answer"], cb["answer"])
    if f1 >= threshold - F1_TOLERANCE:
        return p1_answer_row(p1, "P3", F1_AGREE, f1=f1)
    return abstain_row(p1, "P3", F1_CONFLICT, f1=f1)


def p3_decisions(
    p1_rows: Sequence[Mapping[str, Any]],
    cb_rows: Sequence[Mapping[str, Any]],
    cutoff: float = CONFIDENCE_CUTOFF,
    threshold: float = F1_THRESHOLD,
) -> list[dict[str, Any]]:
    """P3 for every question of the P1 cell, in its order."""
    _check_generation_rows(p1_rows, "P1")
    _check_generation_rows(cb_rows, CLOSED_BOOK_PROMPT)
    cb = _by_qid(cb_rows, CLOSED_BOOK_PROMPT, (r["qid"] for r in p1_rows))
    return [p3_decision(row, cb[row["qid"]], cutoff, threshold) for row in p1_rows]


# --- P4 -------------------------------------------------------------------------------


def _check_nli_row(row: Mapping[str, Any], cb: Mapping[str, Any]) -> list[str]:
    qid = row["qid"]
    if row.get("skipped_reason"):
        raise DataError(
            f"NLI row for qid {qid} was skipped ({row['skipped_reason']}) but P4 needs it: "
            "the NLI file was made with a different confidence cutoff or closed-book file; "
            "rerun the NLI rule with P4's cutoff"
        )
    labels = row.get("labels")
    if not isinstance(labels, list):
        raise DataError(f"NLI row for qid {qid}: 'labels' is missing or not a list")
    if "cb_answer" in row and row["cb_answer"] != cb["answer"]:
        raise DataError(
            f"NLI row for qid {qid} was made for the closed-book answer {row['cb_answer']!r}, "
            f"but the CB file now says {cb['answer']!r}; rerun the NLI rule"
        )
    return labels


def p4_decision(
    p1: Mapping[str, Any],
    cb: Mapping[str, Any],
    nli: Mapping[str, Any] | None,
    cutoff: float = CONFIDENCE_CUTOFF,
) -> dict[str, Any]:
    """P4 for one question: P3's first two gates, then any contradicting passage vetoes."""
    gated = _cb_gate(p1, cb, "P4", cutoff)
    if gated is not None:
        return {**gated, "nli_labels": None}
    if nli is None:
        raise DataError(f"no NLI row for qid {p1['qid']}; P4 needs one (rerun the NLI rule)")
    labels = _check_nli_row(nli, cb)
    if CONTRADICTION in labels:
        return abstain_row(p1, "P4", NLI_CONTRADICTION, nli_labels=labels)
    return p1_answer_row(p1, "P4", NLI_CONSISTENT, nli_labels=labels)


def p4_decisions(
    p1_rows: Sequence[Mapping[str, Any]],
    cb_rows: Sequence[Mapping[str, Any]],
    nli_rows: Sequence[Mapping[str, Any]],
    cutoff: float = CONFIDENCE_CUTOFF,
) -> list[dict[str, Any]]:
    """P4 for every question of the P1 cell; the NLI file must cover every question."""
    _check_generation_rows(p1_rows, "P1")
    _check_generation_rows(cb_rows, CLOSED_BOOK_PROMPT)
    qids = [r["qid"] for r in p1_rows]
    cb = _by_qid(cb_rows, CLOSED_BOOK_PROMPT, qids)
    nli = _by_qid(nli_rows, NLI, qids)
    return [p4_decision(row, cb[row["qid"]], nli[row["qid"]], cutoff) for row in p1_rows]


# --- the decide functions the registry names (grabrag.core.registry.BUILTIN) ------------


def decide_p0(inputs: Mapping[str, Any], settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    return single_pass_decisions(inputs["P0"], "P0")


def decide_p1(inputs: Mapping[str, Any], settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    return single_pass_decisions(inputs["P1"], "P1")


def decide_p2(inputs: Mapping[str, Any], settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    return single_pass_decisions(inputs["P2"], "P2")


def decide_p3(inputs: Mapping[str, Any], settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    cutoff = settings.get("cutoff", CONFIDENCE_CUTOFF)
    threshold = settings.get("threshold", F1_THRESHOLD)
    return p3_decisions(inputs["P1"], inputs[CLOSED_BOOK_PROMPT], cutoff, threshold)


def decide_p4(inputs: Mapping[str, Any], settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    cutoff = settings.get("cutoff", CONFIDENCE_CUTOFF)
    return p4_decisions(inputs["P1"], inputs[CLOSED_BOOK_PROMPT], inputs[NLI], cutoff)


# --- Table 12 sweep -------------------------------------------------------------------


def p3_sweep_decisions(
    p1_rows: Sequence[Mapping[str, Any]],
    cb_rows: Sequence[Mapping[str, Any]],
    thresholds: Sequence[float] = SWEEP_THRESHOLDS,
    cutoffs: Sequence[float] = SWEEP_CUTOFFS,
) -> dict[tuple[float, float], list[dict[str, Any]]]:
    """P3's decision rows for every (threshold, cutoff), from stored rows only."""
    return {
        (threshold, cutoff): p3_decisions(p1_rows, cb_rows, cutoff=cutoff, threshold=threshold)
        for threshold in thresholds
        for cutoff in cutoffs
    }


def p3_sweep(
    p1_rows: Sequence[Mapping[str, Any]],
    cb_rows: Sequence[Mapping[str, Any]],
    thresholds: Sequence[float] = SWEEP_THRESHOLDS,
    cutoffs: Sequence[float] = SWEEP_CUTOFFS,
    qids: set[str] | None = None,
) -> list[dict[str, Any]]:
    """Answer rate of P3 per (threshold, cutoff): rows {threshold, cutoff, n, answered,
    answer_rate}, thresholds outer, cutoffs inner. ``qids`` restricts the questions
    counted (e.g. a QC-eligible subset). A parse_failed row did not answer; n = 0 gives
    answer_rate NaN."""
    out = []
    for (threshold, cutoff), rows in p3_sweep_decisions(
        p1_rows, cb_rows, thresholds, cutoffs
    ).items():
        chosen = [r for r in rows if qids is None or r["qid"] in qids]
        answered = sum(r["decision"] == ANSWER for r in chosen)
        out.append(
            {
                "threshold": threshold,
                "cutoff": cutoff,
                "n": len(chosen),
                "answered": answered,
                "answer_rate": answered / len(chosen) if chosen else float("nan"),
            }
        )
    return out
