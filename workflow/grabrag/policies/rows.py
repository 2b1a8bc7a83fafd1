"""The shape every policy's decision rows share: the two decisions, the ``rule`` names that
say why a row decided as it did, and the builders of a row. GRAB-RAG's policies
(:mod:`grabrag.policies.paper`) and EvidentialRAG's (:mod:`grabrag.evidential.decisions`)
write their rows with them, so the metrics read every policy's rows alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from grabrag.core.decisions import ABSTAIN, ANSWER
from grabrag.core.parsing import RULE_CB_PARSE_FAILED, RULE_PARSE_FAILED

CONTRADICTION = "contradiction"

# Rules (the ``rule`` column).
GENERATED = "generated"
P1_ABSTAINED = "p1_abstained"
CB_UNRELIABLE = "cb_unreliable"
F1_AGREE = "f1_agree"
F1_CONFLICT = "f1_conflict"
NLI_CONTRADICTION = "nli_contradiction"
NLI_CONSISTENT = "nli_consistent"
EVIDENTIAL_DIRECT = "evidential_direct"
GENERATOR_ABSTAINED = "generator_abstained"
CONFLICT_AWARE = "conflict_aware"
EVIDENTIAL_ABSTAIN = "evidential_abstain"
EVIDENTIAL_RULES = (
    EVIDENTIAL_DIRECT,
    GENERATOR_ABSTAINED,
    RULE_PARSE_FAILED,
    CONFLICT_AWARE,
    EVIDENTIAL_ABSTAIN,
)
RULES = (
    GENERATED,
    RULE_PARSE_FAILED,
    P1_ABSTAINED,
    CB_UNRELIABLE,
    RULE_CB_PARSE_FAILED,
    F1_AGREE,
    F1_CONFLICT,
    NLI_CONTRADICTION,
    NLI_CONSISTENT,
    EVIDENTIAL_DIRECT,
    GENERATOR_ABSTAINED,
    CONFLICT_AWARE,
    EVIDENTIAL_ABSTAIN,
)


def is_failed(row: Mapping[str, Any]) -> bool:
    return row.get("decision") is None or row.get("parse_status") == "failed"


def decision_row(
    base: Mapping[str, Any],
    policy: str,
    decision: str | None,
    answer: str | None,
    confidence: float | None,
    rule: str,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "qid": base["qid"],
        "index": base.get("index"),
        "condition": base.get("condition"),
        "policy": policy,
        "decision": decision,
        "answer": answer,
        "confidence": confidence,
        "rule": rule,
        **extra,
    }


def abstain_row(base: Mapping[str, Any], policy: str, rule: str, **extra: Any) -> dict[str, Any]:
    return decision_row(base, policy, ABSTAIN, "", 0, rule, **extra)


def p1_answer_row(base: Mapping[str, Any], policy: str, rule: str, **extra: Any) -> dict[str, Any]:
    return decision_row(base, policy, ANSWER, base["answer"], base["confidence"], rule, **extra)


def parse_failed_row(base: Mapping[str, Any], policy: str, **extra: Any) -> dict[str, Any]:
    return decision_row(base, policy, None, None, None, RULE_PARSE_FAILED, **extra)
