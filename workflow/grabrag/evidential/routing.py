"""Routes and decisions from a question's fused mass (EvidentialRAG paper, section 3.5,
Appendix B), and the sweep that re-decides stored evaluations with no LLM call (Tables
9-10 and 12): the route of U_global, the generator's prompt for each route, the decision
row of one question, the "without dynamic routing" ablation and the lambda x tau grid.

* Eq. 15 (:func:`route`): direct if U < tau1, conflict-aware if tau1 <= U < tau2,
  abstain if U >= tau2.
* Eq. 27 (:func:`evid_confidence`): confidence = max_j fused singleton mass, which we
  put on the 0-100 scale the rest of the benchmark uses (``metrics.CONFIDENCE_SCALE``);
  Eq. 26's ECE is :func:`grabrag.scoring.calibration.ece_mean`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from grabrag.evidential.claims import passage_claim_count, question_evidence
from grabrag.evidential.evaluator import Evaluation
from grabrag.evidential.fusion import (
    LAMBDA,
    average_evidence,
    from_evidence,
    fuse,
    mean_pairwise_conflict,
)
from grabrag.generation.prompts import RESPONSE_FORMAT

# Defaults of the paper (section 4.3, Table 14).
TAU1 = 0.35
TAU2 = 0.65

Route = Literal["direct", "conflict_aware", "abstain"]
ROUTES: tuple[Route, ...] = ("direct", "conflict_aware", "abstain")


def _check_taus(tau1: float, tau2: float) -> None:
    if not 0.0 <= tau1 < tau2 <= 1.0:  # also rejects NaN
        raise ValueError(f"thresholds must satisfy 0 <= tau1 < tau2 <= 1, got {tau1!r}, {tau2!r}")


def route(u_global: float, tau1: float = TAU1, tau2: float = TAU2) -> Route:
    """Eq. 15: "direct" if U < tau1, "conflict_aware" if tau1 <= U < tau2, else
    "abstain" (U exactly tau1 is conflict-aware, exactly tau2 abstains)."""
    _check_taus(tau1, tau2)
    if not math.isfinite(u_global):
        raise ValueError(f"U_global must be finite, got {u_global!r}")
    if u_global < tau1:
        return "direct"
    if u_global < tau2:
        return "conflict_aware"
    return "abstain"


def guarded_route(
    frame: Sequence[str],
    b: Sequence[float] | np.ndarray,
    u_global: float,
    tau1: float = TAU1,
    tau2: float = TAU2,
    passage_claims: int | None = None,
) -> Route:
    """Eq. 15, except that a direct route whose top claim no passage supports (its index is
    ``passage_claims`` or more: the closed-book source alone) becomes conflict-aware: the
    passages and the model's memory disagree, and memory alone never makes a direct
    answer (EVID+CB, ours). ``passage_claims`` None: every claim comes from a passage."""
    chosen = route(u_global, tau1, tau2)
    top = _top_claim(frame, np.asarray(b, dtype=float))
    if chosen == "direct" and passage_claims is not None and top is not None:
        if top >= passage_claims:
            return "conflict_aware"
    return chosen


ROUTE_SYSTEM = (
    "You are a helpful question-answering assistant.\n"
    "Answer the question using ONLY the provided context and its evidence summary.\n"
    "Always respond with valid JSON."
)


def _top_claim(frame: Sequence[str], b: np.ndarray) -> int | None:
    """Index of the highest-mass claim (ties: first seen), None without any support."""
    if len(frame) == 0 or not np.any(b > 0):
        return None
    return int(np.argmax(b))


def evidence_summary(frame: Sequence[str], fused_b: Sequence[float], u_global: float) -> str:
    """The evidence block of the route prompt: claims by fused mass, then U_global."""
    b = np.asarray(fused_b, dtype=float)
    if len(frame) != b.size:
        raise ValueError(f"{len(frame)} claims but {b.size} fused masses")
    lines = ["Evidence summary (candidate answers found in the context, with their fused mass):"]
    order = sorted(range(len(frame)), key=lambda j: (-b[j], j))
    lines += [f'- "{frame[j]}": {b[j]:.2f}' for j in order]
    if len(frame) == 0:
        lines.append("- (no passage states an answer)")
    lines.append(f"Uncertainty (mass on no particular answer): {u_global:.2f}")
    return "\n".join(lines)


def route_instruction(route_name: Route, frame: Sequence[str], fused_b: Sequence[float]) -> str:
    """Appendix B's three generator instruction families."""
    b = np.asarray(fused_b, dtype=float)
    if route_name == "direct":
        top = _top_claim(frame, b)
        if top is None:
            raise ValueError("the direct route needs a claim with positive mass")
        return (
            f'The evidence agrees on "{frame[top]}". Answer with this highest-mass claim: set '
            'decision to "answer" and give the answer in a few words. Do not add details '
            "that the context does not support."
        )
    if route_name == "conflict_aware":
        claims = "; ".join(f'"{frame[j]}"' for j in sorted(range(len(frame)), key=lambda j: -b[j]))
        return (
            f"The retrieved sources disagree: they support competing answers ({claims}). "
            'Do not present any of them as settled. Set decision to "abstain", leave the '
            "answer empty, and in the reasoning name the competing claims and say that the "
            "sources disagree."
        )
    if route_name == "abstain":
        return (
            "The evidence is too weak or too uncertain for an answer. Do not give a "
            'definitive answer: set decision to "abstain", leave the answer empty, and in '
            "the reasoning say what additional evidence would be needed."
        )
    raise ValueError(f"unknown route {route_name!r}; expected one of {', '.join(ROUTES)}")


def route_messages(
    route_name: Route,
    question: str,
    context: str,
    frame: Sequence[str],
    fused_b: Sequence[float],
    u_global: float,
) -> list[dict[str, str]]:
    """The final generator prompt for one route. The generator answers in GRAB-RAG's
    JSON (``prompts.RESPONSE_FORMAT``, grammar ``prompts.GBNF_GRAMMAR``), so
    :func:`grabrag.generation.generator.parse_output` parses it."""
    user = "\n\n".join(
        [
            f"Context:\n{context}",
            f"Question: {question}",
            evidence_summary(frame, fused_b, u_global),
            route_instruction(route_name, frame, fused_b),
            RESPONSE_FORMAT,
        ]
    )
    return [{"role": "system", "content": ROUTE_SYSTEM}, {"role": "user", "content": user}]


# =====================================================================================
# Decisions from stored evaluations (no LLM)
# =====================================================================================


def evid_confidence(b: Sequence[float] | np.ndarray) -> float:
    """Eq. 27 on the 0-100 scale: 100 * max fused singleton mass; 0 without claims.
    Not multiplied by (1 - U_global): the paper notes that would double-discount."""
    b = np.asarray(b, dtype=float)
    if b.size == 0:
        return 0.0
    return float(min(max(float(b.max()) * 100.0, 0.0), 100.0))


def selected_claim(frame: Sequence[str], b: Sequence[float] | np.ndarray) -> str | None:
    """The answer Eq. 27 scores: the highest-mass claim (ties: first in the frame); None
    without any supported claim."""
    top = _top_claim(frame, np.asarray(b, dtype=float))
    return None if top is None else frame[top]


def decide(
    frame: Sequence[str],
    b: Sequence[float] | np.ndarray,
    u: float,
    tau1: float = TAU1,
    tau2: float = TAU2,
    passage_claims: int | None = None,
) -> dict[str, Any]:
    """Route (:func:`guarded_route`) and decision of one question from its fused mass.

    direct -> answer the highest-mass claim with confidence :func:`evid_confidence`;
    conflict_aware and abstain -> abstain, answer "", confidence 0. Every route also
    gives ``fused_confidence`` (Eq. 27 on the 0-100 scale) and ``selected_claim`` (the
    highest-mass claim, None without one): EvidentialRAG's ECE (Eq. 26) scores them on
    every row, abstentions included.

    Choice: an abstention gets confidence 0, GRAB-RAG's convention for a rule-made
    abstention (P3/P4), so GRAB-RAG's AURC/ECE treat every policy's abstentions alike.
    """
    b = np.asarray(b, dtype=float)
    if len(frame) != b.size:
        raise ValueError(f"{len(frame)} claims but {b.size} fused masses")
    chosen = guarded_route(frame, b, u, tau1, tau2, passage_claims)
    top = _top_claim(frame, b)
    scored = {"fused_confidence": evid_confidence(b), "selected_claim": selected_claim(frame, b)}
    if chosen == "direct" and top is not None:
        return {
            "route": chosen,
            "decision": "answer",
            "answer": frame[top],
            "confidence": evid_confidence(b),
            **scored,
        }
    # A direct route without a supported claim cannot happen (u < tau1 <= 1 needs
    # singleton mass); it would abstain rather than answer an arbitrary claim.
    return {"route": chosen, "decision": "abstain", "answer": "", "confidence": 0.0, **scored}


def _no_routing(
    frame: Sequence[str], b: np.ndarray, passage_claims: int | None = None
) -> dict[str, Any]:
    """The "without dynamic routing" ablation: always answer the highest-mass claim.

    Choice: with no supported claim (empty frame, or all fused singleton mass zero after
    a total Dempster conflict) there is nothing to answer, so it abstains; a top claim
    that only the closed-book source supports (EVID+CB) is not answered either."""
    top = _top_claim(frame, b)
    scored = {"fused_confidence": evid_confidence(b), "selected_claim": selected_claim(frame, b)}
    if top is None or (passage_claims is not None and top >= passage_claims):
        return {
            "route": "abstain",
            "decision": "abstain",
            "answer": "",
            "confidence": 0.0,
            **scored,
        }
    return {
        "route": "direct",
        "decision": "answer",
        "answer": frame[top],
        "confidence": evid_confidence(b),
        **scored,
    }


# The default grids of the sweep (config: evidential.lambda_grid / tau_grid); the
# configured lambda and (tau1, tau2) are added when they are not on them.
SWEEP_LAMS: tuple[float | None, ...] = (None, 0.0, 0.3, 0.6, 1.0)
SWEEP_TAUS: tuple[tuple[float, float], ...] = ((0.2, 0.5), (0.35, 0.65), (0.5, 0.8))


def rule_name(lam: float | None) -> str | float:
    """The sweep's ``rule`` column: "dempster" for lam None, else the lambda value."""
    return "dempster" if lam is None else float(lam)


def sweep_grid(
    lams: Sequence[float | str | None],
    taus: Sequence[Sequence[float]],
    lam: float,
    tau1: float,
    tau2: float,
) -> tuple[list[float | None], list[tuple[float, float]]]:
    """The sweep's lambda and (tau1, tau2) grids from config: "dempster" (or None) is the
    normalised Dempster rule; the configured ``lam`` and ``(tau1, tau2)`` are appended
    when the grids lack them, so the configured setting always has its rows."""
    grid: list[float | None] = []
    for value in lams:
        entry = None if value in (None, "dempster") else float(value)
        if entry is not None and not 0.0 <= entry <= 1.0:
            raise ValueError(f"lambda grid values must be in [0, 1] or 'dempster', got {value!r}")
        if entry not in grid:
            grid.append(entry)
    if float(lam) not in grid:
        grid.append(float(lam))
    pairs: list[tuple[float, float]] = []
    for pair in taus:
        if len(pair) != 2:
            raise ValueError(f"tau grid entries are (tau1, tau2) pairs, got {pair!r}")
        a, b = float(pair[0]), float(pair[1])
        _check_taus(a, b)
        if (a, b) not in pairs:
            pairs.append((a, b))
    if (float(tau1), float(tau2)) not in pairs:
        pairs.append((float(tau1), float(tau2)))
    return grid, pairs


def sweep(
    evaluations_by_qid: Mapping[str, Sequence[Evaluation]],
    lams: Sequence[float | None] = SWEEP_LAMS,
    taus: Sequence[tuple[float, float]] = SWEEP_TAUS,
    extra_sources_by_qid: Mapping[str, Iterable[Evaluation | None]] | None = None,
    ablation_lam: float = LAMBDA,
    merge_f1: float = 0.8,
    groups_by_qid: Mapping[str, Sequence[int]] | None = None,
) -> list[dict[str, Any]]:
    """Decision rows of the lambda x tau grid (Tables 9-10) and the ablations (Table 12),
    from stored evaluations only (each question's in fold order).

    Per question: one ``variant="evid"`` row per (rule, tau pair) with rule "dempster"
    (lam None) or the lambda value; one ``variant="no_fusion"`` row per tau pair (rule
    "average": :func:`grabrag.evidential.fusion.average_evidence` of the sources' evidence
    vectors instead of fusion); one ``variant="no_routing"`` row (fused at
    ``ablation_lam``, always answers; tau1/tau2 None). Every row has qid, variant, rule,
    tau1, tau2, route, decision, answer, confidence, fused_confidence, selected_claim,
    u_global, n_claims and mean_conflict (Eq. 14, the same for every row of a question).
    ``extra_sources_by_qid`` adds sources per question (EVID+CB: routed with
    :func:`guarded_route`); ``merge_f1`` is the claim-alignment threshold
    (:func:`grabrag.evidential.claims.align_claims`); ``groups_by_qid`` the sizes of each
    question's fold groups (:func:`grabrag.evidential.fusion.fuse`).
    """
    for lam in lams:
        if lam is not None and not 0.0 <= lam <= 1.0:
            raise ValueError(f"lam must be None or in [0, 1], got {lam!r}")
    for tau1, tau2 in taus:
        _check_taus(tau1, tau2)
    rows: list[dict[str, Any]] = []
    for qid, evaluations in evaluations_by_qid.items():
        extra = list((extra_sources_by_qid or {}).get(qid, ()))
        frame, vectors = question_evidence(evaluations, extra, merge_f1)
        masses = [from_evidence(v) for v in vectors]
        supported = passage_claim_count(evaluations, merge_f1) if extra else None
        shared = {"n_claims": len(frame), "mean_conflict": mean_pairwise_conflict(masses)}
        groups = (groups_by_qid or {}).get(qid)
        for lam in lams:
            b, u = fuse(masses, lam, groups)
            for tau1, tau2 in taus:
                decision = decide(frame, b, u, tau1, tau2, supported)
                rows.append(
                    _sweep_row(qid, "evid", rule_name(lam), tau1, tau2, decision, u, shared)
                )
        b, u = average_evidence(vectors)
        for tau1, tau2 in taus:
            decision = decide(frame, b, u, tau1, tau2, supported)
            rows.append(_sweep_row(qid, "no_fusion", "average", tau1, tau2, decision, u, shared))
        b, u = fuse(masses, ablation_lam, groups)
        decision = _no_routing(frame, b, supported)
        rows.append(
            _sweep_row(qid, "no_routing", float(ablation_lam), None, None, decision, u, shared)
        )
    return rows


def _sweep_row(
    qid: str,
    variant: str,
    rule: str | float,
    tau1: float | None,
    tau2: float | None,
    decision: Mapping[str, Any],
    u_global: float,
    shared: Mapping[str, Any],
) -> dict[str, Any]:
    return {
        "qid": qid,
        "variant": variant,
        "rule": rule,
        "tau1": tau1,
        "tau2": tau2,
        "route": decision["route"],
        "decision": decision["decision"],
        "answer": decision["answer"],
        "confidence": decision["confidence"],
        "fused_confidence": decision["fused_confidence"],
        "selected_claim": decision["selected_claim"],
        "u_global": u_global,
        **shared,
    }
