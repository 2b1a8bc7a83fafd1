"""CDD-alpha: the contradiction gate that sends a high-conflict question through the full
decomposition and every other one to Standard RAG, and the decision it makes from the
stored rows.

A contradiction gate routes high-conflict questions into the full decomposition and the
others to Standard RAG (GRAB-RAG's P1 row). It compares the step-1 (contextual) answer
with the step-2 (parametric) answer (:func:`gate_route`):

* ``gate="model"`` (the paper's gate, a contradiction judgement; ``config/extended.yaml``):
  one grammar-constrained call asks "do these two answers contradict?"
  (:func:`gate_messages`, {"contradict": true|false}). Only a pair that cannot contradict
  is decided without it: an empty answer (no second claim) or two answers equal after
  normalize_answer. Every other pair is judged, also one whose answers share most tokens
  ("University of Oxford" vs "University of Cambridge"), which a token-overlap score
  would let through. An unparseable judgement falls back to the lexical rule (recorded).
* ``gate="lexical"`` (ours, the cheap option and the embedded default): no call,
  ``gate_score = 1 - token F1`` (:func:`gate_score`) at or above ``threshold``.

The judgement runs in the CDD generation job, which holds the model, after every other
call of the question (so the other calls' KV-cache history is unchanged), and is stored
in the trace row (``gate_judgement``); the policy rule needs no LLM call. A bypassed
question costs step 1 (and step 2 with ``parametric="in_context"``) plus the judgement
when one was made, a routed one the whole decomposition plus the judgement. Because a
run resets the KV cache per question and decodes greedily, a live CDD-alpha run makes
exactly these calls; Choice: CDD-alpha is therefore computed from the stored full-CDD
rows (:func:`cdd_alpha_row`) instead of a second generation run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from grabrag.cdd.method import GrammarCompleter
from grabrag.cdd.parsing import _skipped, _trace_answer, parse_step
from grabrag.cdd.prompts import CDD_SYSTEM, _quoted
from grabrag.cdd.schema import (
    CONTEXTUAL,
    FAILED,
    GATE,
    GATE_BYPASS,
    GATE_GRAMMAR,
    GENERATED,
    IN_CONTEXT,
    NO_PAIR,
    OK,
    PARAMETRIC,
    REPAIRED,
    SKIPPED,
)
from grabrag.core.decisions import DECISIONS
from grabrag.core.parsing import RULE_PARSE_FAILED
from grabrag.core.text import normalize_answer
from grabrag.scoring.answers import token_f1

LEXICAL, MODEL = "lexical", "model"
GATES = (LEXICAL, MODEL)

GATE_THRESHOLD = 0.5
"""Choice (lexical gate): high conflict when the two answers share at most half their
tokens (token F1 <= 0.5); a score equal to the threshold is high conflict."""
_GATE_TOLERANCE = 1e-9  # token F1 is a ratio of small integers (as policies.F1_TOLERANCE)
ROUTE_CDD, ROUTE_STANDARD = "cdd", "standard"
# How a gate decision was reached (decision rows' ``gate_basis``).
BASIS_LEXICAL, BASIS_JUDGEMENT, BASIS_NO_PAIR, BASIS_FALLBACK = (
    "lexical",
    "judgement",
    NO_PAIR,
    "lexical_fallback",
)

GATE_INSTRUCTION = (
    "Task: contradiction check. Two answers to the question above are given. Do they "
    "contradict each other? They contradict when they name different facts (a different "
    "person, place, organisation, date, number or other entity), so that they cannot both "
    "be correct, even when they share words (two different universities contradict). "
    "Different wording of the same fact does not contradict. Set contradict to true or "
    "false."
)
GATE_FORMAT = (
    "Respond ONLY with a JSON object in this exact format:\n"
    '{"contradict": true or false}\n'
    "Start with { immediately."
)


def gate_messages(
    question: str, contextual_answer: str, parametric_answer: str
) -> list[dict[str, str]]:
    """The model gate's call: the question and the two answers, no passages (the
    judgement is about the two answers alone), under :data:`CDD_SYSTEM`."""
    user = "\n\n".join(
        [
            f"Question: {question}",
            f"Answer 1: {_quoted(contextual_answer)}\nAnswer 2: {_quoted(parametric_answer)}",
            GATE_INSTRUCTION,
            GATE_FORMAT,
        ]
    )
    return [{"role": "system", "content": CDD_SYSTEM}, {"role": "user", "content": user}]


def gate_score(contextual_answer: str | None, parametric_answer: str | None) -> float:
    """1 - token F1 between the contextual (step 1) and parametric (step 2) answers, in
    [0, 1] (the lexical gate's score).

    Choice: 0 (no conflict) when either answer is empty after normalize_answer: a
    contradiction needs two claims; passages that do not answer (Q0) or a model that
    does not know are not a conflict, and take the standard answer."""
    if not normalize_answer(contextual_answer or "") or not normalize_answer(
        parametric_answer or ""
    ):
        return 0.0
    return 1.0 - token_f1(contextual_answer, [parametric_answer or ""])


def high_conflict(score: float, threshold: float = GATE_THRESHOLD) -> bool:
    return score >= threshold - _GATE_TOLERANCE


def gate_needs_judgement(contextual_answer: str | None, parametric_answer: str | None) -> bool:
    """Whether the model gate asks for a judgement: both answers given and different
    after normalize_answer. Only pairs that cannot contradict are left out; token
    overlap is no reason ("University of Oxford" vs "University of Cambridge" is judged)."""
    a = normalize_answer(contextual_answer or "")
    b = normalize_answer(parametric_answer or "")
    return bool(a) and bool(b) and a != b


def gate_score_from_trace(trace: Mapping[str, Mapping[str, Any]]) -> float:
    """The lexical gate score of a stored CDD trace (its step 1 and step 2 answers)."""
    return gate_score(_trace_answer(trace, CONTEXTUAL), _trace_answer(trace, PARAMETRIC))


def run_gate(
    complete: GrammarCompleter, question: str, trace: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """The model gate's judgement on a trace's step-1 and step-2 answers: the parsed
    step entry (:meth:`grabrag.cdd.parsing.StepResult.to_dict`, field ``contradict``; a
    failed parse has ``contradict`` None), or a skipped entry (reason ``no_pair``, no call)
    when :func:`gate_needs_judgement` is False."""
    contextual, parametric = _trace_answer(trace, CONTEXTUAL), _trace_answer(trace, PARAMETRIC)
    if not gate_needs_judgement(contextual, parametric):
        return _skipped(GATE, NO_PAIR).to_dict()
    result = complete(gate_messages(question, contextual, parametric), grammar=GATE_GRAMMAR)
    parsed = parse_step(GATE, result["raw"], result.get("finish_reason"))
    return parsed.record_call(result).to_dict()


def gate_route(
    contextual_answer: str | None,
    parametric_answer: str | None,
    gate: str = LEXICAL,
    threshold: float = GATE_THRESHOLD,
    judgement: Mapping[str, Any] | None = None,
) -> tuple[bool, str]:
    """CDD-alpha's gate decision: (high conflict, basis).

    ``gate="lexical"``: :func:`gate_score` >= ``threshold`` (basis ``lexical``).
    ``gate="model"``: a pair that cannot contradict (:func:`gate_needs_judgement`) is low
    conflict (basis ``no_pair``); any other pair is high conflict exactly when
    ``judgement`` (the stored :func:`run_gate` entry) says ``contradict: true`` (basis
    ``judgement``); a judgement that failed to parse falls back to the lexical rule (basis
    ``lexical_fallback``). A pair that needs a judgement but has none is a ValueError
    (the traces were made without the model gate)."""
    if gate not in GATES:
        raise ValueError(f"unknown gate {gate!r}; known: {', '.join(GATES)}")
    lexical = high_conflict(gate_score(contextual_answer, parametric_answer), threshold)
    if gate == LEXICAL:
        return lexical, BASIS_LEXICAL
    if not gate_needs_judgement(contextual_answer, parametric_answer):
        return False, BASIS_NO_PAIR
    if judgement is None or judgement.get("status") == SKIPPED:
        raise ValueError(
            "the model gate needs a contradiction judgement for this pair; the CDD traces "
            "were made without it (cdd.gate: model reruns cdd_generate)"
        )
    contradict = (judgement.get("fields") or {}).get("contradict")
    if judgement.get("status") not in (OK, REPAIRED) or not isinstance(contradict, bool):
        return lexical, BASIS_FALLBACK
    return contradict, BASIS_JUDGEMENT


def cdd_alpha_decision(
    p1_row: Mapping[str, Any],
    cdd_row: Mapping[str, Any] | None,
    score: float,
    threshold: float = GATE_THRESHOLD,
    *,
    routed: bool | None = None,
    gate: str = LEXICAL,
    basis: str = BASIS_LEXICAL,
    gate_calls: int = 0,
) -> dict[str, Any]:
    """CDD-alpha's decision for one question.

    High conflict (``routed``; by default ``score >= threshold``, the lexical gate): the
    CDD row's decision (``cdd_row`` is then required). Otherwise GRAB-RAG's standard
    single-pass answer, the P1 row (decision, answer, confidence as generated; rule
    ``gate_bypass``, or ``parse_failed`` when P1 could not be parsed). ``gated`` is True
    when the question went through the full decomposition. ``cdd_calls`` is what the
    route cost in CDD calls when ``cdd_row`` is given: 1 (step 1, needed by the gate; 2
    with the in-context step 2) for a bypass, the CDD row's calls otherwise, plus
    ``gate_calls`` (1 when the model gate judged the pair). ``gate_score`` is the lexical
    score whichever gate decided.
    """
    if routed is None:
        routed = high_conflict(score, threshold)
    calls = None
    if routed:
        if cdd_row is None:
            raise ValueError("a high-conflict question needs its CDD row")
        out = {
            "decision": cdd_row.get("decision"),
            "answer": cdd_row.get("answer"),
            "confidence": cdd_row.get("confidence"),
            "source": cdd_row.get("source"),
            "rule": cdd_row.get("rule"),
        }
        calls = cdd_row.get("calls")
        if calls is not None:
            calls += gate_calls
    else:
        failed = p1_row.get("decision") not in DECISIONS or p1_row.get("parse_status") == FAILED
        out = {
            "decision": None if failed else p1_row["decision"],
            "answer": None if failed else p1_row.get("answer"),
            "confidence": None if failed else p1_row.get("confidence"),
            "source": None,
            "rule": RULE_PARSE_FAILED if failed else GATE_BYPASS,
        }
        if cdd_row is not None:
            calls = (2 if cdd_row.get("parametric") == IN_CONTEXT else 1) + gate_calls
    return {
        **out,
        "gated": routed,
        "route": ROUTE_CDD if routed else ROUTE_STANDARD,
        "gate": gate,
        "gate_basis": basis,
        "gate_score": score,
        "threshold": threshold,
        "cdd_calls": calls,
    }


def cdd_alpha_row(
    p1_row: Mapping[str, Any],
    cdd_row: Mapping[str, Any],
    threshold: float = GATE_THRESHOLD,
    gate: str = LEXICAL,
) -> dict[str, Any]:
    """CDD-alpha from a stored full-CDD row and the P1 row: the gate reads the trace's
    step-1 and step-2 answers and, for ``gate="model"``, the stored judgement
    (``cdd_row["gate_judgement"]``); no LLM call."""
    trace = cdd_row["trace"]
    contextual, parametric = _trace_answer(trace, CONTEXTUAL), _trace_answer(trace, PARAMETRIC)
    judgement = cdd_row.get("gate_judgement")
    routed, basis = gate_route(contextual, parametric, gate, threshold, judgement)
    judged = (
        gate == MODEL
        and judgement is not None
        and judgement.get("origin") == GENERATED
        and judgement.get("status") != SKIPPED
    )
    return cdd_alpha_decision(
        p1_row,
        cdd_row,
        gate_score(contextual, parametric),
        threshold,
        routed=routed,
        gate=gate,
        basis=basis,
        gate_calls=int(judged),
    )
