"""The decision rows of the CDD-family policies from their stored rows: CDD (the full
run's step 5), CDD-alpha (the contradiction gate between CDD and Standard RAG) and the
prompt-only baselines (their single generation pass), and the decide functions the
policy registry names for them (:data:`grabrag.core.registry.BUILTIN`).

No model runs here: every decision is read from the traces and generation rows the CDD
jobs stored (:mod:`grabrag.cdd.runs`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from grabrag.cdd.baselines import BASELINES, REASONING_FIRST
from grabrag.cdd.gate import GATE_THRESHOLD, LEXICAL, cdd_alpha_row
from grabrag.cdd.schema import RESOLVED
from grabrag.core.decisions import ABSTAIN, ANSWER
from grabrag.core.errors import DataError
from grabrag.core.parsing import PARSE_FAILED, RULE_PARSE_FAILED

# --- names ----------------------------------------------------------------------------

CDD, CDD_ALPHA = "CDD", "CDD_ALPHA"
TRACE_POLICIES = (CDD, CDD_ALPHA)
BASELINE_POLICIES = BASELINES  # CAI, SHAM, REFLECT, FILTER
FAMILY = (*TRACE_POLICIES, *BASELINE_POLICIES)
REFERENCE_POLICY = "P1"
"""Standard RAG (GRAB-RAG's P1) is reported beside the CDD family for reference."""


# --- decision rows ---------------------------------------------------------------------------


def _decision_row(base: Mapping[str, Any], policy: str, **fields: Any) -> dict[str, Any]:
    return {
        "qid": base["qid"],
        "index": base.get("index"),
        "condition": base.get("condition"),
        "policy": policy,
        **fields,
    }


def _unique(rows: Sequence[Mapping[str, Any]], label: str) -> dict[str, Mapping[str, Any]]:
    index: dict[str, Mapping[str, Any]] = {}
    for position, row in enumerate(rows, start=1):
        if "qid" not in row:
            raise DataError(f"{label} row {position}: column 'qid' is missing")
        if row["qid"] in index:
            raise DataError(f"{label} rows: qid {row['qid']} appears more than once")
        index[row["qid"]] = row
    return index


def _check_trace_row(row: Mapping[str, Any]) -> None:
    for column in ("decision", "answer", "confidence", "rule", "trace"):
        if column not in row:
            raise DataError(f"CDD trace row for qid {row['qid']}: column {column!r} is missing")
    if row["decision"] not in (ANSWER, ABSTAIN, None):
        raise DataError(f"CDD trace row for qid {row['qid']}: unknown decision {row['decision']!r}")


def cdd_decisions(trace_rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """CDD's decision rows: the full run's step-5 decision, answer and confidence (rule
    ``cdd_resolved``); an unparseable step 5 is ``parse_failed`` (decision, answer and
    confidence None: neither an answer nor an abstention). ``source`` is step 5's own
    claim of where the answer comes from; ``llm_calls`` what the question cost."""
    _unique(trace_rows, "CDD trace")
    out = []
    for row in trace_rows:
        _check_trace_row(row)
        failed = row["rule"] == RULE_PARSE_FAILED or row["decision"] is None
        out.append(
            _decision_row(
                row,
                CDD,
                decision=None if failed else row["decision"],
                answer=None if failed else row["answer"],
                confidence=None if failed else row["confidence"],
                rule=RULE_PARSE_FAILED if failed else RESOLVED,
                source=None if failed else row.get("source"),
                parse_status=row.get("parse_status"),
                llm_calls=row.get("calls"),
            )
        )
    return out


def cdd_alpha_decisions(
    p1_rows: Sequence[Mapping[str, Any]],
    trace_rows: Sequence[Mapping[str, Any]],
    threshold: float = GATE_THRESHOLD,
    gate: str = LEXICAL,
) -> list[dict[str, Any]]:
    """CDD-alpha for every question CDD ran on, in the P1 cell's order, from stored rows
    only (:func:`grabrag.cdd.method.cdd_alpha_row`): the gate (``gate="model"``: the stored
    contradiction judgement of the step-1 and step-2 answers; ``"lexical"``: 1 - token
    F1 >= ``threshold``) sends a question to the full CDD row, else it keeps P1's
    generation row (rule ``gate_bypass``, or ``parse_failed``).

    CDD runs on every question of the cell or, with ``cdd.n_questions``, on the first
    ones: its traces must be those of the P1 cell's first questions, one per question."""
    traces = _unique(trace_rows, "CDD trace")
    _unique(p1_rows, "P1 generation")
    covered = p1_rows[: len(traces)]
    missing = [r["qid"] for r in covered if r["qid"] not in traces]
    if missing:
        raise DataError(
            f"no CDD trace row for qid {', '.join(missing[:5])} ({len(missing)} of the "
            f"first {len(covered)} of {len(p1_rows)} questions); rerun cdd_generate for "
            "this cell"
        )
    out = []
    for p1 in covered:
        if p1.get("prompt") not in (None, REFERENCE_POLICY):
            raise DataError(
                f"P1 generation rows: qid {p1['qid']} comes from prompt {p1['prompt']!r}; "
                "CDD-alpha was given the wrong generation file"
            )
        trace_row = traces[p1["qid"]]
        _check_trace_row(trace_row)
        try:
            routed = cdd_alpha_row(p1, trace_row, threshold, gate)
        except ValueError as error:
            raise DataError(f"CDD trace row for qid {p1['qid']}: {error}") from None
        out.append(
            _decision_row(
                p1,
                CDD_ALPHA,
                decision=routed["decision"],
                answer=routed["answer"],
                confidence=routed["confidence"],
                rule=routed["rule"],
                source=routed["source"],
                gated=routed["gated"],
                route=routed["route"],
                gate=routed["gate"],
                gate_basis=routed["gate_basis"],
                gate_score=routed["gate_score"],
                threshold=routed["threshold"],
                llm_calls=routed["cdd_calls"],
            )
        )
    return out


def cut_confidence(row: Mapping[str, Any]) -> bool:
    """Whether a reasoning-first generation row was repaired without whitespace at its
    end: its last field, the confidence, may have been cut by max_tokens."""
    raw = row.get("raw") or ""
    return row.get("parse_status") == "repaired" and not raw[-1:].isspace()


def baseline_decisions(rows: Sequence[Mapping[str, Any]], policy: str) -> list[dict[str, Any]]:
    """A prompt-only baseline's decision rows, as GRAB-RAG's single-pass P0-P2: the
    generation row's decision (rule ``generated``), or ``parse_failed``.

    A reasoning-first baseline (REFLECT, FILTER) ends with the confidence, so an output
    cut off by max_tokens right after a number may hold an incomplete one ("8" of
    "85"): such a repaired row counts as ``parse_failed`` unless whitespace after the
    number shows it was finished (:func:`cut_confidence`)."""
    if policy not in BASELINE_POLICIES:
        raise ValueError(f"{policy!r} is not a baseline ({', '.join(BASELINE_POLICIES)})")
    _unique(rows, f"{policy} generation")
    out = []
    for row in rows:
        if row.get("prompt") not in (None, policy):
            raise DataError(
                f"{policy} generation rows: qid {row['qid']} comes from prompt "
                f"{row['prompt']!r}; the rule was given the wrong generation file"
            )
        decision = row.get("decision")
        if (
            decision is None
            or row.get("parse_status") == PARSE_FAILED
            or (policy in REASONING_FIRST and cut_confidence(row))
        ):
            out.append(
                _decision_row(
                    row, policy, decision=None, answer=None, confidence=None, rule="parse_failed"
                )
            )
            continue
        if decision not in (ANSWER, ABSTAIN):
            raise DataError(f"{policy} row for qid {row['qid']}: unknown decision {decision!r}")
        out.append(
            _decision_row(
                row,
                policy,
                decision=decision,
                answer=row.get("answer"),
                confidence=row.get("confidence"),
                rule="generated",
            )
        )
    return out


# --- the decide functions of the registered policies ------------------------------------


def decide_cdd(inputs: Mapping[str, Any], settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    return cdd_decisions(inputs[CDD])


def decide_cdd_alpha(
    inputs: Mapping[str, Any], settings: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """``gate``, ``gate_threshold``: the contradiction gate ("model" or "lexical") and the
    lexical gate's threshold (absent or None: grabrag.cdd.gate's defaults, the lexical gate)."""
    limit = settings.get("gate_threshold")
    limit = GATE_THRESHOLD if limit is None else limit
    return cdd_alpha_decisions(inputs["P1"], inputs[CDD], limit, settings.get("gate") or LEXICAL)


def decide_cai(inputs: Mapping[str, Any], settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    return baseline_decisions(inputs["CAI"], "CAI")


def decide_sham(inputs: Mapping[str, Any], settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    return baseline_decisions(inputs["SHAM"], "SHAM")


def decide_reflect(inputs: Mapping[str, Any], settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    return baseline_decisions(inputs["REFLECT"], "REFLECT")


def decide_filter(inputs: Mapping[str, Any], settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    return baseline_decisions(inputs["FILTER"], "FILTER")
