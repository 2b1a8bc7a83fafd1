"""The decision rows of EvidentialRAG's policies EVID and EVID_CB, from their stored rows
(``results/evidential/.../{EVID,EVID_CB}.jsonl``: the fused state, the route and the
generator's output), and the decide functions the policy registry names for them
(:data:`grabrag.core.registry.BUILTIN`). The decision follows the route (the seed's refusal
definition):

==========================================  ==========  ===========  =======================
route / generator output                    decision    confidence   rule
==========================================  ==========  ===========  =======================
direct, generator output unparseable        None        None         ``parse_failed``
direct, generator abstained                 abstain     0            ``generator_abstained``
direct, generator answered                  its answer  max fused b  ``evidential_direct``
conflict_aware (tau1 <= U_global < tau2)    abstain     0            ``conflict_aware``
abstain (U_global >= tau2)                  abstain     0            ``evidential_abstain``
==========================================  ==========  ===========  =======================

The confidence of an answer is Eq. 27 on the 0-100 scale
(:func:`grabrag.evidential.routing.evid_confidence`: 100 x the largest fused singleton mass),
not the generator's self-reported one. Every EVID row, whatever its route, also carries
``fused_confidence`` (Eq. 27) and ``selected_claim`` (the highest-mass claim, None without
one), which EvidentialRAG's ECE (Eq. 26) scores; ``confidence`` keeps GRAB-RAG's convention
(0 for an abstention) for GRAB-RAG's own AURC/ECE. On the conflict-aware and abstain routes
the generator was told to abstain, so its output (parsed or not) does not change the
decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from grabrag.core.decisions import ABSTAIN, ANSWER
from grabrag.core.errors import DataError
from grabrag.evidential.routing import ROUTES, evid_confidence, selected_claim
from grabrag.policies.rows import (
    CONFLICT_AWARE,
    EVIDENTIAL_ABSTAIN,
    EVIDENTIAL_DIRECT,
    GENERATOR_ABSTAINED,
    abstain_row,
    decision_row,
    parse_failed_row,
)

EVIDENTIAL = ("EVID", "EVID_CB")
_LABELS = {
    "EVID": "EVID (EvidentialRAG)",
    "EVID_CB": "EVID_CB (EvidentialRAG + closed-book source)",
}


def evidential_decision(row: Mapping[str, Any], policy: str) -> dict[str, Any]:
    """The decision row of one EVID / EVID_CB row (table in the module docstring)."""
    qid = row.get("qid")
    label = _LABELS[policy]
    for column in ("qid", "route", "fused_b", "generator_decision", "generator_answer"):
        if column not in row:
            raise DataError(f"{label} row for qid {qid}: column {column!r} is missing")
    if row.get("policy") not in (None, policy):
        raise DataError(
            f"{label} rows: qid {qid} comes from {row['policy']!r}, expected {policy!r}; "
            "the rule was given the wrong evidential file"
        )
    route = row["route"]
    if route not in ROUTES:
        raise DataError(f"{label} row for qid {qid}: unknown route {route!r}")
    frame = row.get("frame") or []
    extra = {
        "route": route,
        "u_global": row.get("u_global"),
        # Eq. 27 on every route (EvidentialRAG's ECE scores routed abstentions too).
        "fused_confidence": evid_confidence(row["fused_b"]),
        "selected_claim": selected_claim(frame, row["fused_b"]) if frame else None,
    }
    if route == "conflict_aware":
        return abstain_row(row, policy, CONFLICT_AWARE, **extra)
    if route == "abstain":
        return abstain_row(row, policy, EVIDENTIAL_ABSTAIN, **extra)
    decision = row["generator_decision"]
    if decision is None or row.get("parse_status") == "failed":
        return parse_failed_row(row, policy, **extra)
    if decision == ABSTAIN:
        return abstain_row(row, policy, GENERATOR_ABSTAINED, **extra)
    if decision != ANSWER or not isinstance(row["generator_answer"], str):
        raise DataError(f"{label} row for qid {qid}: unknown generator decision {decision!r}")
    confidence = evid_confidence(row["fused_b"])
    return decision_row(
        row, policy, ANSWER, row["generator_answer"], confidence, EVIDENTIAL_DIRECT, **extra
    )


def evidential_decisions(rows: Sequence[Mapping[str, Any]], policy: str) -> list[dict[str, Any]]:
    """EVID or EVID_CB for every question of its evidential file, in its order."""
    if policy not in EVIDENTIAL:
        raise ValueError(f"{policy!r} is not an evidential policy ({', '.join(EVIDENTIAL)})")
    seen: set[str] = set()
    out = []
    for row in rows:
        if row.get("qid") in seen:
            raise DataError(f"{_LABELS[policy]} rows: qid {row['qid']} appears more than once")
        seen.add(row.get("qid"))
        out.append(evidential_decision(row, policy))
    return out


def decide_evid(inputs: Mapping[str, Any], settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    return evidential_decisions(inputs["EVID"], "EVID")


def decide_evid_cb(inputs: Mapping[str, Any], settings: Mapping[str, Any]) -> list[dict[str, Any]]:
    return evidential_decisions(inputs["EVID_CB"], "EVID_CB")
