"""Context-Driven Decomposition (CDD), its contradiction gate (CDD-alpha), prompt-only
baselines and trace diagnostics (Chen et al., "Does RAG Know When Retrieval Is Wrong?
Diagnosing Context Compliance under Knowledge Conflict", arXiv:2605.14473).

The method
----------
CDD turns a knowledge conflict between the retrieved passages and the model's own
(parametric) knowledge into five observable steps, each one grammar-constrained JSON call:

1. ``contextual``  - the answer the passages give: {"answer", "confidence"}; the answer
   is empty when the passages do not answer.
2. ``parametric``  - the answer from the model's own knowledge: {"answer", "confidence"}.
   The paper asks it after the passages were shown ("ignoring the passages",
   ``parametric="in_context"``, one more call; the default of ``config/paper.yaml``). Our
   variant ``parametric="closed_book"`` reads GRAB-RAG's closed-book (CB) pass, already
   generated (:func:`parametric_from_closed_book`, no new call): the paper's limitations
   note that the in-context answer is a context-prompted prior, and the CB pass is the
   context-free prior they ask for. It is the embedded default (``config.yaml``), which
   is sized for CI.
3. ``divergence``  - do the two answers diverge? {"diverge", "explanation"}.
4. ``premise``     - quote the passage sentence carrying the conflicting claim:
   {"passage", "premise"}; the quote is machine-checked against the context
   (``premise_found``: whitespace- and case-normalised substring).
5. ``resolution``  - the final answer from the trace of steps 1-4:
   {"decision", "answer", "confidence", "source", "rationale"}.

Each step is its own call (not one long prompt): the user message is the passages, the
question, the rendered trace of the earlier steps the step may see, the step's
instruction and its response format. Choice: separate calls with a rendered trace make
the trace *intervenable* - the diagnostics (:func:`truncate_trace`,
:func:`inject_mistake`) edit the trace and rerun only the resolution
(:func:`resolution_messages`), which is the paper's causal-sensitivity test.

Ablations (``variant``): ``no_premise`` never runs step 4; ``no_divergence`` never runs
step 3 and always runs step 4. In ``full``, step 4 is skipped when step 3 finds no
divergence (there is no conflicting premise to isolate) and recorded as skipped.

Choice: step 5 always runs, also when step 3 finds no divergence (instead of returning
step 1's answer directly): (a) every question then gets its decision, confidence and
abstention from the same step, so "no divergence" questions are not scored under a
different confidence (step 1's "do the passages state it" confidence) than the others;
(b) step 5 can still abstain when the passages do not answer, and can catch a wrong
"no divergence" verdict; (c) every trace has a resolution to perturb, so the
sensitivity tests cover all questions, not only the divergent ones. It costs one call.

Parsing and failure fallbacks (:func:`parse_step`), never inventing a value:

* Repair only closes a string and/or the object cut off by max_tokens ('"}' or '}');
  it never adds a field, and it does not close a cut-off trailing number (a cut "8"
  might have been "85"): steps 1/2, whose last field is the confidence, are repaired
  only when whitespace after the number shows it was complete.
* step 1/2 failed  -> answer "" (unknown), confidence None.
* step 3 failed    -> diverge = both answers non-empty and different after
  :func:`grabrag.scoring.metrics.normalize_answer`, else False; explanation "". Flagged
  ``fallback``; the pipeline goes on with that value.
* step 4 failed    -> passage None, premise "", premise_found False.
* step 5 failed    -> decision, answer, confidence, source None: the row is
  ``parse_failed``, neither an answer nor an abstention, exactly like GRAB-RAG's
  policies (no made-up confidence enters AURC/ECE).

Choice: strings are parsed with ``json.loads(strict=False)``: the grammar's string rule
(GRAB-RAG's) admits raw newlines and tabs, which strict JSON rejects.

CDD-alpha
---------
A contradiction gate routes high-conflict questions into the full decomposition and the
others to Standard RAG (GRAB-RAG's P1 row). It compares the step-1 (contextual) answer
with the step-2 (parametric) answer (:func:`gate_route`):

* ``gate="model"`` (the paper's gate, a contradiction judgement; ``config/paper.yaml``):
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

Baselines
---------
Prompt-only policies (:data:`BASELINE_PROMPTS`, :func:`baseline_messages`), parsed by
:func:`grabrag.generation.generator.parse_output`: conflict-aware instruction RAG (CAI), a
length-matched sham chain of thought (SHAM), reflection prompting (REFLECT) and
prompt-filtered RAG (FILTER). On equal footing with CDD: the same (neutral) system
message as the CDD steps, GRAB-RAG's scaffold and P1's abstention clause. CAI does what
its text says: follow the context unless it contradicts well-established knowledge,
then answer from that knowledge. REFLECT and FILTER reason *before* they commit: their
response format and grammar put the reasoning first (:data:`REASONING_FIRST_FORMAT`,
:data:`REASONING_FIRST_GRAMMAR`; same fields, so the rows parse into the same schema).
CAI and SHAM keep GRAB-RAG's answer-first format (CAI's instruction needs no worked
reasoning before the answer, and SHAM's steps are content-free by design).

Diagnostics
-----------
Trace perturbations (:func:`truncate_trace`, :func:`inject_mistake`) with the rerun of
the resolution, causal sensitivity (:func:`causal_sensitivity`,
:func:`sensitivity_bootstrap`), which source controls the final answer
(:func:`source_control`), and the mapping of GRAB-RAG conditions onto the paper's
perturbation types (:func:`perturbation_type`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np

from grabrag.generation.prompts import (
    GBNF_GRAMMAR,
    POLICY_INSTRUCTIONS,
    RESPONSE_FORMAT,
    SYSTEM_CLOSED_BOOK,
    context_user_prompt,
)
from grabrag.scoring.bootstrap import (
    CONFIDENCE_LEVEL,
    N_RESAMPLES,
    bootstrap_totals,
    ratio,
    resample_counts,
)
from grabrag.scoring.metrics import normalize_answer, token_f1

# --- names -----------------------------------------------------------------------------

CONTEXTUAL, PARAMETRIC, DIVERGENCE, PREMISE, RESOLUTION = (
    "contextual",
    "parametric",
    "divergence",
    "premise",
    "resolution",
)
STEPS = (CONTEXTUAL, PARAMETRIC, DIVERGENCE, PREMISE, RESOLUTION)
GATE = "gate"
"""CDD-alpha's contradiction judgement (gate="model"); not one of the five steps."""
LEXICAL, MODEL = "lexical", "model"
GATES = (LEXICAL, MODEL)

FULL, NO_PREMISE, NO_DIVERGENCE = "full", "no_premise", "no_divergence"
VARIANTS = (FULL, NO_PREMISE, NO_DIVERGENCE)
CLOSED_BOOK, IN_CONTEXT = "closed_book", "in_context"
PARAMETRIC_SOURCES = (CLOSED_BOOK, IN_CONTEXT)

# Step status. ok/repaired/failed as grabrag.generation.generator; "skipped" for a step that did
# not run; "injected" for a step written by inject_mistake.
OK, REPAIRED, FAILED, SKIPPED, INJECTED = "ok", "repaired", "failed", "skipped", "injected"
# Why a step was skipped.
ABLATED = "ablated"  # the variant has no such step
NOT_DIVERGENT = "no_divergence"  # step 3 found no divergence: no premise to isolate
NO_PAIR = "no_pair"  # gate: an empty answer, or two equal ones, cannot contradict
TRUNCATED = "truncated"  # removed by truncate_trace
# Where a step's content comes from.
GENERATED, FROM_CLOSED_BOOK, NOT_RUN = "generated", "closed_book", "not_run"

ANSWER, ABSTAIN = "answer", "abstain"
DECISIONS = (ANSWER, ABSTAIN)
SOURCE_CONTEXT, SOURCE_PARAMETRIC, SOURCE_NEITHER, SOURCE_BOTH = (
    "context",
    "parametric",
    "neither",
    "both",
)
SOURCES = (SOURCE_CONTEXT, SOURCE_PARAMETRIC, SOURCE_NEITHER)

# Decision-row rules.
RESOLVED = "cdd_resolved"
PARSE_FAILED = "parse_failed"  # grabrag.policies.paper' rule for the same case
GATE_BYPASS = "gate_bypass"

# --- grammars --------------------------------------------------------------------------
#
# llama.cpp's GBNF parser ends a rule at a newline outside parentheses (and crashes at
# sampling time on a rule split over lines), so every rule is built on one line here;
# strings, whitespace and confidence follow prompts.GBNF_GRAMMAR exactly.

_WS = "ws ::= [ \\t\\n]*"
_STR = 'str ::= "\\"" [^"\\\\]* "\\""'
_CONFIDENCE = 'confidence ::= "0" | [1-9] | [1-9][0-9] | "100"'
_DECISION = 'decision ::= "\\"answer\\"" | "\\"abstain\\""'
_BOOLEAN = 'boolean ::= "true" | "false"'
# Passage numbers 0-99; 0 means "no conflicting sentence".
_PASSAGE = "passage ::= [0-9] | [1-9][0-9]"
_SOURCE = 'source ::= "\\"context\\"" | "\\"parametric\\"" | "\\"neither\\""'


def _object_rule(fields: Sequence[tuple[str, str]]) -> str:
    """``root`` for a JSON object with ``fields`` (name, rule) in this order, one line,
    in prompts.GBNF_GRAMMAR's style: "{" ws "\\"a\\":" ws rule "," ws ... ws "}"."""
    parts = ['root ::= "{" ws']
    for position, (name, rule) in enumerate(fields):
        if position:
            parts.append('"," ws')
        parts.append(f'"\\"{name}\\":" ws {rule}')
    parts.append('ws "}"')
    return " ".join(parts)


def _grammar(fields: Sequence[tuple[str, str]], *rules: str) -> str:
    return "\n".join([_object_rule(fields), *rules]) + "\n"


# (field name, GBNF rule) per step, in generation order; _CHECKS validates each field.
_FIELDS: dict[str, tuple[tuple[str, str], ...]] = {
    CONTEXTUAL: (("answer", "str"), ("confidence", "confidence")),
    PARAMETRIC: (("answer", "str"), ("confidence", "confidence")),
    DIVERGENCE: (("diverge", "boolean"), ("explanation", "str")),
    # Choice: passage before premise, so the long free-text quote is the last field and a
    # quote cut off by max_tokens can be closed (a prefix of a quote is still a quote,
    # premise_found stays meaningful); a cut-off passage number could not be repaired.
    PREMISE: (("passage", "passage"), ("premise", "str")),
    RESOLUTION: (
        ("decision", "decision"),
        ("answer", "str"),
        ("confidence", "confidence"),
        ("source", "source"),
        ("rationale", "str"),
    ),
    GATE: (("contradict", "boolean"),),
}

ANSWER_GRAMMAR = _grammar(_FIELDS[CONTEXTUAL], _WS, _STR, _CONFIDENCE)
"""Steps 1 and 2: {"answer": str, "confidence": 0-100}."""
DIVERGENCE_GRAMMAR = _grammar(_FIELDS[DIVERGENCE], _BOOLEAN, _WS, _STR)
PREMISE_GRAMMAR = _grammar(_FIELDS[PREMISE], _PASSAGE, _WS, _STR)
RESOLUTION_GRAMMAR = _grammar(_FIELDS[RESOLUTION], _DECISION, _SOURCE, _CONFIDENCE, _WS, _STR)
STEP_GRAMMARS: dict[str, str] = {
    CONTEXTUAL: ANSWER_GRAMMAR,
    PARAMETRIC: ANSWER_GRAMMAR,
    DIVERGENCE: DIVERGENCE_GRAMMAR,
    PREMISE: PREMISE_GRAMMAR,
    RESOLUTION: RESOLUTION_GRAMMAR,
}
GATE_GRAMMAR = _grammar(_FIELDS[GATE], _BOOLEAN, _WS)
"""CDD-alpha's model gate: {"contradict": true|false}."""
BASELINE_GRAMMAR = GBNF_GRAMMAR
"""CAI and SHAM answer in GRAB-RAG's format, under GRAB-RAG's grammar."""
# GRAB-RAG's four fields with the reasoning first; decision, str and confidence rules as
# prompts.GBNF_GRAMMAR.
_REASONING_FIRST_FIELDS = (
    ("reasoning", "str"),
    ("decision", "decision"),
    ("answer", "str"),
    ("confidence", "confidence"),
)
REASONING_FIRST_GRAMMAR = _grammar(_REASONING_FIRST_FIELDS, _WS, _STR, _DECISION, _CONFIDENCE)
"""REFLECT and FILTER: GRAB-RAG's fields, reasoning first (the model reasons before it
commits to a decision and an answer)."""

# --- prompts ---------------------------------------------------------------------------

CDD_SYSTEM = SYSTEM_CLOSED_BOOK
"""Choice: GRAB-RAG's neutral system message (no "use ONLY the provided context"), since
steps 2 and 5 must be free to weigh the model's own knowledge against the passages; each
step's instruction says which source to use. The prompt-only baselines and the model
gate use it too (:func:`baseline_messages`, :func:`gate_messages`)."""

STEP_INSTRUCTIONS: dict[str, str] = {
    CONTEXTUAL: (
        "Task: contextual answer. Answer the question using ONLY the passages above, even "
        "where they disagree with what you believe. Do not use your own knowledge. If the "
        "passages do not contain the answer, leave the answer empty. Give your confidence "
        "(0-100) that the passages state this answer."
    ),
    # The paper's in-context elicitation (parametric="in_context", config/paper.yaml); the
    # embedded default reads the closed-book pass instead (parametric_from_closed_book).
    PARAMETRIC: (
        "Task: parametric answer. Ignore the passages above. What would you answer from "
        "your own knowledge alone, as if you had not seen them? If you do not know, leave "
        "the answer empty. Give your confidence (0-100) in this answer."
    ),
    DIVERGENCE: (
        "Task: divergence check. Compare the contextual answer and the parametric answer "
        "above. They diverge when they name different facts (a different person, place, "
        "date, number or other entity), so that they cannot both be correct. Different "
        "wording of the same fact is not divergence, and neither is a missing answer. Set "
        "diverge to true or false and explain briefly."
    ),
    PREMISE: (
        "Task: premise isolation. Find the sentence in the passages that carries the claim "
        "behind the contextual answer where it conflicts with your own knowledge. Copy "
        "that sentence exactly as it appears, word for word, and give the number of its "
        "passage. If no sentence conflicts with your own knowledge, give passage 0 and an "
        "empty premise."
    ),
    # Choice: with no answer in the passages the resolution abstains rather than
    # answering closed-book: CDD resolves conflicts, it is not a licence to answer
    # without evidence (that would measure closed-book QA at Q0, not conflict handling).
    RESOLUTION: (
        "Task: conflict resolution. Decide the final answer from the analysis above. If "
        'the passages do not contain the answer, set decision to "abstain" and leave the '
        "answer empty. If the contextual and parametric answers agree, or there is no "
        "parametric answer, give the contextual answer. If they conflict, judge which "
        "source is reliable: follow the passages unless their claim contradicts "
        "well-established knowledge; in that case give the answer from your own "
        "knowledge, or abstain if you are not sure of it either. Set source to where your "
        'final answer comes from: "context", "parametric", or "neither" when you abstain. '
        "Give a brief rationale."
    ),
}

_ANSWER_FORMAT = (
    "Respond ONLY with a JSON object in this exact format:\n"
    '{"answer": "your answer or empty string",\n'
    '"confidence": 0-100}\n'
    "Start with { immediately.\n"
    "Do not use backslashes."
)
STEP_FORMATS: dict[str, str] = {
    CONTEXTUAL: _ANSWER_FORMAT,
    PARAMETRIC: _ANSWER_FORMAT,
    DIVERGENCE: (
        "Respond ONLY with a JSON object in this exact format:\n"
        '{"diverge": true or false,\n'
        '"explanation": "brief explanation"}\n'
        "Start with { immediately.\n"
        "Keep the explanation brief.\n"
        "Do not use backslashes."
    ),
    PREMISE: (
        "Respond ONLY with a JSON object in this exact format:\n"
        '{"passage": passage number or 0,\n'
        '"premise": "the exact sentence or empty string"}\n'
        "Start with { immediately.\n"
        "Do not use backslashes."
    ),
    RESOLUTION: (
        "Respond ONLY with a JSON object in this exact format:\n"
        '{"decision": "answer" or "abstain",\n'
        '"answer": "your answer or empty string",\n'
        '"confidence": 0-100,\n'
        '"source": "context" or "parametric" or "neither",\n'
        '"rationale": "brief rationale"}\n'
        "Start with { immediately.\n"
        "Keep the rationale brief.\n"
        "Do not use backslashes."
    ),
}

# Which earlier steps each step sees in its prompt. Choice: the in-context parametric
# step does not see step 1's answer, keeping the elicitation as independent as the
# protocol allows (the passages are already in view; the answer would anchor it more).
_VISIBLE: dict[str, tuple[str, ...]] = {
    CONTEXTUAL: (),
    PARAMETRIC: (),
    DIVERGENCE: (CONTEXTUAL, PARAMETRIC),
    PREMISE: (CONTEXTUAL, PARAMETRIC, DIVERGENCE),
    RESOLUTION: (CONTEXTUAL, PARAMETRIC, DIVERGENCE, PREMISE),
}

_MISTAKE_CLAIMS = {
    # which elicited answer the injected one equals (and which are given) -> the claim
    "both": "Both answers are correct: the answer is {wrong_answer}.",
    "contextual": "The contextual answer is correct: the answer is {wrong_answer}.",
    "contextual_over": (
        "The contextual answer is correct and the parametric answer is mistaken: the answer "
        "is {wrong_answer}."
    ),
    "parametric": "The parametric answer is correct: the answer is {wrong_answer}.",
    "parametric_over": (
        "The parametric answer is correct and the contextual answer is mistaken: the answer "
        "is {wrong_answer}."
    ),
    "neither_both": "Both answers are mistaken: the correct answer is {wrong_answer}.",
    "neither_contextual": (
        "The contextual answer is mistaken: the correct answer is {wrong_answer}."
    ),
    "neither_parametric": (
        "The parametric answer is mistaken: the correct answer is {wrong_answer}."
    ),
    "neither_none": "Neither answer is given, but the correct answer is {wrong_answer}.",
}
MISTAKE_DIRECTIVE = "Give {wrong_answer} as the final answer."
"""The injected divergence conclusion (:func:`mistake_explanation`) is a factual claim
plus this behavioural directive, as the paper's mistake injection (its limitations note
that the two are confounded)."""


def _mistake_case(contextual: str, parametric: str, wrong_answer: str) -> str:
    context, prior = normalize_answer(contextual or ""), normalize_answer(parametric or "")
    wrong = normalize_answer(wrong_answer)
    if context and wrong == context:
        if wrong == prior:
            return "both"
        return "contextual_over" if prior else "contextual"
    if prior and wrong == prior:
        return "parametric_over" if context else "parametric"
    if context and prior:
        return "neither_both"
    if context:
        return "neither_contextual"
    return "neither_parametric" if prior else "neither_none"


def mistake_explanation(contextual: str, parametric: str, wrong_answer: str) -> str:
    """The injected step-3 explanation for a trace whose steps 1 and 2 gave
    ``contextual`` and ``parametric``: a claim that ``wrong_answer`` is correct, worded so
    that it agrees with the two answers the trace shows (it calls an answer mistaken only
    when it differs from the injected one, "both" only when both are given), then
    :data:`MISTAKE_DIRECTIVE`. Equality is after normalize_answer."""
    claim = _MISTAKE_CLAIMS[_mistake_case(contextual, parametric, wrong_answer)]
    return " ".join([claim, MISTAKE_DIRECTIVE]).format(wrong_answer=wrong_answer)


def longest_mistake_explanation(wrong_answer: str) -> str:
    """The longest text :func:`mistake_explanation` can give for ``wrong_answer`` (the
    prompt-size preflight)."""
    return max(
        (
            " ".join([claim, MISTAKE_DIRECTIVE]).format(wrong_answer=wrong_answer)
            for claim in _MISTAKE_CLAIMS.values()
        ),
        key=len,
    )


def _context_prefix(context: str, question: str) -> str:
    """GRAB-RAG's scaffold ("Context: ...", "Question: ...") taken from its P0 prompt, so
    the CDD steps and the baselines share it character for character."""
    p0 = context_user_prompt(context, question, "P0")
    if not p0.endswith(RESPONSE_FORMAT):  # P0 is scaffold + format, nothing else
        raise AssertionError("prompts.context_user_prompt changed its layout")
    return p0[: -len(RESPONSE_FORMAT)].rstrip("\n")


def _quoted(text: str) -> str:
    return f'"{text}"'


def _answer_line(label: str, fields: Mapping[str, Any], missing: str) -> str:
    answer = fields.get("answer") or ""
    if not normalize_answer(answer):
        return f"{label}: none ({missing})."
    confidence = fields.get("confidence")
    tail = f" (confidence {confidence})" if confidence is not None else ""
    return f"{label}: {_quoted(answer)}{tail}."


def render_step(step: str, entry: Mapping[str, Any]) -> str | None:
    """One trace line for a step the model may see; None for a step that did not run.

    Only the model's own outputs are rendered (with a failed step's fallback values):
    Choice: the machine check ``premise_found`` is not shown, so the trace the
    diagnostics perturb is the model's, not our checker's."""
    if entry.get("status") == SKIPPED:
        return None
    fields = entry.get("fields") or {}
    if step == CONTEXTUAL:
        return _answer_line(
            "Contextual answer (from the passages)", fields, "the passages do not answer"
        )
    if step == PARAMETRIC:
        return _answer_line(
            "Parametric answer (from your own knowledge)", fields, "you do not know"
        )
    if step == DIVERGENCE:
        verdict = "diverge" if fields.get("diverge") else "do not diverge"
        explanation = (fields.get("explanation") or "").strip()
        line = f"Divergence check: the answers {verdict}."
        return f"{line} {explanation}" if explanation else line
    if step == PREMISE:
        premise = (fields.get("premise") or "").strip()
        if not premise:
            return "Conflicting premise: none in the passages."
        passage = fields.get("passage")
        where = f" (passage {passage})" if passage else ""
        return f"Conflicting premise{where}: {_quoted(premise)}"
    raise ValueError(f"step {step!r} is not shown in a trace")


def render_trace(step: str, trace: Mapping[str, Mapping[str, Any]]) -> str:
    """The "Analysis so far" block ``step`` sees ("" when it sees nothing)."""
    lines = [
        line
        for earlier in _VISIBLE[step]
        if earlier in trace and (line := render_step(earlier, trace[earlier])) is not None
    ]
    if not lines:
        return ""
    return "Analysis so far:\n" + "\n".join(f"- {line}" for line in lines)


def step_messages(
    step: str,
    question: str,
    context: str,
    trace: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[dict[str, str]]:
    """Chat messages for one CDD step. ``trace`` maps step name -> step entry
    (:meth:`StepResult.to_dict`); only the earlier steps ``step`` may see are rendered.
    Every step shares the prefix system + passages + question (KV-cache reuse)."""
    if step not in STEPS:
        raise ValueError(f"unknown CDD step {step!r}; known: {', '.join(STEPS)}")
    blocks = [_context_prefix(context, question)]
    analysis = render_trace(step, trace or {})
    if analysis:
        blocks.append(analysis)
    blocks += [STEP_INSTRUCTIONS[step], STEP_FORMATS[step]]
    return [
        {"role": "system", "content": CDD_SYSTEM},
        {"role": "user", "content": "\n\n".join(blocks)},
    ]


def resolution_messages(
    question: str, context: str, trace: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, str]]:
    """The step rerun on a perturbed trace (the causal-sensitivity test)."""
    return step_messages(RESOLUTION, question, context, trace)


# --- parsing ---------------------------------------------------------------------------


@dataclass
class StepResult:
    """One step of a CDD trace. ``fields`` holds the parsed values (or, when ``status`` is
    "failed", the documented fallback values with ``fallback`` True); it is empty for a
    skipped step. Tokens and seconds are this step's own call (0 when no call was made:
    skipped, or reused from the CB cell, whose row carries that call's cost)."""

    step: str
    status: str
    fields: dict[str, Any] = field(default_factory=dict)
    fallback: bool = False
    origin: str = GENERATED
    skip_reason: str | None = None
    raw: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _is_int(value: Any, low: int, high: int | None = None) -> bool:
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and value >= low
        and (high is None or value <= high)
    )


_CHECKS: dict[str, Callable[[Any], bool]] = {
    "answer": lambda v: isinstance(v, str),
    "confidence": lambda v: _is_int(v, 0, 100),
    "diverge": lambda v: isinstance(v, bool),
    "explanation": lambda v: isinstance(v, str),
    "passage": lambda v: _is_int(v, 0),
    "premise": lambda v: isinstance(v, str),
    "decision": lambda v: v in DECISIONS,
    "source": lambda v: v in SOURCES,
    "rationale": lambda v: isinstance(v, str),
    "contradict": lambda v: isinstance(v, bool),
}


def _validate(step: str, obj: Any) -> dict[str, Any] | None:
    """The step's fields, or None when one is missing or invalid (extra keys ignored)."""
    if not isinstance(obj, dict):
        return None
    out = {}
    for name, _rule in _FIELDS[step]:
        if name not in obj or not _CHECKS[name](obj[name]):
            return None
        out[name] = obj[name]
    return out


def _load(text: str) -> Any:
    try:
        return json.loads(text, strict=False)
    except json.JSONDecodeError:
        return None


def normalize_quote(text: str) -> str:
    """Case- and whitespace-normalised text for the premise check (nothing else)."""
    return " ".join(text.casefold().split())


def premise_found(premise: str, context: str) -> bool:
    """Whether the quoted premise occurs in the context, ignoring case and whitespace
    differences. An empty quote is never "found" (it would trivially be a substring)."""
    quote = normalize_quote(premise)
    return bool(quote) and quote in normalize_quote(context)


def divergence_fallback(contextual_answer: str | None, parametric_answer: str | None) -> bool:
    """Step 3's fallback: both answers non-empty and different after normalize_answer."""
    a = normalize_answer(contextual_answer or "")
    b = normalize_answer(parametric_answer or "")
    return bool(a) and bool(b) and a != b


def _trace_answer(trace: Mapping[str, Mapping[str, Any]] | None, step: str) -> str:
    entry = (trace or {}).get(step) or {}
    return (entry.get("fields") or {}).get("answer") or ""


def fallback_fields(
    step: str, trace: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """The documented values a failed step stands for (see the module docstring)."""
    if step in (CONTEXTUAL, PARAMETRIC):
        return {"answer": "", "confidence": None}
    if step == DIVERGENCE:
        diverge = divergence_fallback(
            _trace_answer(trace, CONTEXTUAL), _trace_answer(trace, PARAMETRIC)
        )
        return {"diverge": diverge, "explanation": ""}
    if step == PREMISE:
        return {"passage": None, "premise": "", "premise_found": False}
    if step == RESOLUTION:
        return dict.fromkeys(name for name, _ in _FIELDS[RESOLUTION])
    if step == GATE:
        return {"contradict": None}
    raise ValueError(f"unknown CDD step {step!r}; known: {', '.join(STEPS)}")


def _repair(step: str, raw: str) -> dict[str, Any] | None:
    """Close a cut-off last string and/or the object; never add a field."""
    numeric_last = _FIELDS[step][-1][1] != "str"
    for suffix in ('"}', "}"):
        parsed = _validate(step, _load(raw + suffix))
        if parsed is None:
            continue
        # A number cut at the end may be incomplete ("8" of "85"): only whitespace
        # after it (the grammar's ws before "}") shows it was finished.
        if numeric_last and suffix == "}" and not raw[-1:].isspace():
            continue
        return parsed
    return None


def parse_step(
    step: str,
    raw: str,
    finish_reason: str | None,
    *,
    context: str | None = None,
    trace: Mapping[str, Mapping[str, Any]] | None = None,
) -> StepResult:
    """Parse one step's output: ok, repaired (cut off by max_tokens and closed), or
    failed with :func:`fallback_fields`. ``context`` is required for the premise step
    (``premise_found``); ``trace`` (the earlier steps) gives step 3's fallback its two
    answers (without it both count as empty: no divergence). ``step`` may also be
    :data:`GATE` (CDD-alpha's contradiction judgement)."""
    if step not in (*STEPS, GATE):
        raise ValueError(f"unknown CDD step {step!r}; known: {', '.join(STEPS)}, {GATE}")
    if step == PREMISE and context is None:
        raise ValueError("the premise step needs the context to check the quote")
    status = OK
    fields = _validate(step, _load(raw))
    if fields is None and finish_reason == "length":
        fields = _repair(step, raw)
        status = REPAIRED
    if fields is None:
        return StepResult(
            step, FAILED, fallback_fields(step, trace), True, raw=raw, finish_reason=finish_reason
        )
    if step == PREMISE:
        fields["premise_found"] = premise_found(fields["premise"], context or "")
    return StepResult(step, status, fields, raw=raw, finish_reason=finish_reason)


def parametric_from_closed_book(cb_row: Mapping[str, Any]) -> StepResult:
    """Step 2 from GRAB-RAG's closed-book generation row (no new call).

    An answered CB row gives its answer and confidence; an abstaining one means "does not
    know": answer "" (its confidence kept); an unparseable one (decision None) is a
    failed step with step 2's fallback (answer "", confidence None)."""
    decision = cb_row.get("decision")
    raw = cb_row.get("raw")
    finish = cb_row.get("finish_reason")
    if decision is None or cb_row.get("parse_status") == FAILED:
        return StepResult(
            PARAMETRIC,
            FAILED,
            fallback_fields(PARAMETRIC),
            True,
            FROM_CLOSED_BOOK,
            raw=raw,
            finish_reason=finish,
        )
    if decision not in DECISIONS:
        raise ValueError(f"closed-book row has unknown decision {decision!r}")
    answer = (cb_row.get("answer") or "") if decision == ANSWER else ""
    return StepResult(
        PARAMETRIC,
        cb_row.get("parse_status") or OK,
        {"answer": answer, "confidence": cb_row.get("confidence")},
        origin=FROM_CLOSED_BOOK,
        raw=raw,
        finish_reason=finish,
    )


def _skipped(step: str, reason: str) -> StepResult:
    return StepResult(step, SKIPPED, origin=NOT_RUN, skip_reason=reason)


# --- the pipeline ----------------------------------------------------------------------


class GrammarCompleter(Protocol):
    """A chat completion under a GBNF grammar (a string; the implementation compiles and
    caches it). Returns LlamaGenerator.complete's dict: raw, finish_reason,
    prompt_tokens, completion_tokens, seconds."""

    def __call__(self, messages: list[dict[str, str]], *, grammar: str) -> dict[str, Any]: ...


def run_step(
    complete: GrammarCompleter,
    step: str,
    question: str,
    context: str,
    trace: Mapping[str, Mapping[str, Any]],
) -> StepResult:
    """Call the model for one step under its grammar and parse the result."""
    result = complete(step_messages(step, question, context, trace), grammar=STEP_GRAMMARS[step])
    parsed = parse_step(
        step, result["raw"], result.get("finish_reason"), context=context, trace=trace
    )
    parsed.prompt_tokens = int(result.get("prompt_tokens") or 0)
    parsed.completion_tokens = int(result.get("completion_tokens") or 0)
    parsed.seconds = float(result.get("seconds") or 0.0)
    return parsed


def decision_from_resolution(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The decision fields of a resolution step entry (``parse_failed`` when it failed)."""
    fields = entry.get("fields") or {}
    if entry.get("status") not in (OK, REPAIRED):
        return {
            "decision": None,
            "answer": None,
            "confidence": None,
            "source": None,
            "rule": PARSE_FAILED,
            "parse_status": entry.get("status"),
        }
    return {
        "decision": fields["decision"],
        "answer": fields["answer"],
        "confidence": fields["confidence"],
        "source": fields["source"],
        "rule": RESOLVED,
        "parse_status": entry["status"],
    }


def run_cdd(
    complete: GrammarCompleter,
    reset: Callable[[], None],
    question: str,
    context: str,
    cb_row: Mapping[str, Any] | None,
    variant: str = FULL,
    parametric: str = CLOSED_BOOK,
) -> dict[str, Any]:
    """Run CDD on one question; returns its decision row plus the whole trace::

        {"variant", "parametric", "decision", "answer", "confidence", "source", "rule",
         "parse_status", "calls", "prompt_tokens", "completion_tokens", "seconds",
         "trace": {step: StepResult.to_dict() for every step in STEPS}}

    ``reset`` clears the KV cache first (as grabrag.generation.generator.run_cells does per
    question), so a question's outputs do not depend on the one before. ``cb_row`` (the
    question's CB generation row) is required when ``parametric="closed_book"``.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown CDD variant {variant!r}; known: {', '.join(VARIANTS)}")
    if parametric not in PARAMETRIC_SOURCES:
        raise ValueError(
            f"unknown parametric source {parametric!r}; known: {', '.join(PARAMETRIC_SOURCES)}"
        )
    if parametric == CLOSED_BOOK and cb_row is None:
        raise ValueError('parametric="closed_book" needs the closed-book row')
    reset()
    trace: dict[str, dict[str, Any]] = {}

    def run(step: str) -> None:
        trace[step] = run_step(complete, step, question, context, trace).to_dict()

    run(CONTEXTUAL)
    if parametric == CLOSED_BOOK:
        assert cb_row is not None
        trace[PARAMETRIC] = parametric_from_closed_book(cb_row).to_dict()
    else:
        run(PARAMETRIC)
    if variant == NO_DIVERGENCE:
        trace[DIVERGENCE] = _skipped(DIVERGENCE, ABLATED).to_dict()
    else:
        run(DIVERGENCE)
    if variant == NO_PREMISE:
        trace[PREMISE] = _skipped(PREMISE, ABLATED).to_dict()
    elif variant == FULL and not trace[DIVERGENCE]["fields"]["diverge"]:
        trace[PREMISE] = _skipped(PREMISE, NOT_DIVERGENT).to_dict()
    else:
        run(PREMISE)
    run(RESOLUTION)
    made = [e for e in trace.values() if e["origin"] == GENERATED]
    return {
        "variant": variant,
        "parametric": parametric,
        **decision_from_resolution(trace[RESOLUTION]),
        "calls": len(made),
        "prompt_tokens": sum(e["prompt_tokens"] for e in made),
        "completion_tokens": sum(e["completion_tokens"] for e in made),
        "seconds": round(sum(e["seconds"] for e in made), 3),
        "trace": trace,
    }


# --- CDD-alpha: the contradiction gate -------------------------------------------------

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
    step entry (:meth:`StepResult.to_dict`, field ``contradict``; a failed parse has
    ``contradict`` None), or a skipped entry (reason ``no_pair``, no call) when
    :func:`gate_needs_judgement` is False."""
    contextual, parametric = _trace_answer(trace, CONTEXTUAL), _trace_answer(trace, PARAMETRIC)
    if not gate_needs_judgement(contextual, parametric):
        return _skipped(GATE, NO_PAIR).to_dict()
    result = complete(gate_messages(question, contextual, parametric), grammar=GATE_GRAMMAR)
    parsed = parse_step(GATE, result["raw"], result.get("finish_reason"))
    parsed.prompt_tokens = int(result.get("prompt_tokens") or 0)
    parsed.completion_tokens = int(result.get("completion_tokens") or 0)
    parsed.seconds = float(result.get("seconds") or 0.0)
    return parsed.to_dict()


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
            "rule": PARSE_FAILED if failed else GATE_BYPASS,
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


# --- prompt-only baselines ---------------------------------------------------------------
#
# Choice: every baseline is GRAB-RAG's P1 instruction (the abstention clause) plus its own
# content, under GRAB-RAG's scaffold and CDD's system message (:data:`CDD_SYSTEM`, without
# "use ONLY the provided context", which would contradict the baselines' own instructions
# to weigh what the model knows), so the baselines and CDD start from the same footing.
# CAI and SHAM use GRAB-RAG's response format and grammar; REFLECT and FILTER the same
# fields with the reasoning first (:data:`REASONING_FIRST_FORMAT`), because their
# instructions ask for reasoning (a first answer and its critique; the claims to drop)
# that must come before the answer it decides.

_ABSTAIN_CLAUSE = POLICY_INSTRUCTIONS["P1"]


def word_count(text: str) -> int:
    return len(text.split())


CDD_INSTRUCTION_WORDS = word_count(" ".join(STEP_INSTRUCTIONS[s] for s in STEPS))
"""Words of the five CDD step instructions together (response formats excluded): the
length the sham prompt is matched to."""
LENGTH_TOLERANCE = 0.10


def within_length(
    text: str, target_words: int = CDD_INSTRUCTION_WORDS, tolerance: float = LENGTH_TOLERANCE
) -> bool:
    """Whether ``text`` has within ``tolerance`` (relative) of ``target_words`` words."""
    return abs(word_count(text) - target_words) <= tolerance * target_words


def length_matched(
    head: str,
    filler: Sequence[str],
    tail: str,
    target_words: int = CDD_INSTRUCTION_WORDS,
    tolerance: float = LENGTH_TOLERANCE,
) -> str:
    """``head``, then numbered steps cycling through ``filler`` ("Step 1: ..."), then
    ``tail``: as many steps as keep the text at most ``target_words`` words long, at least
    one. Raises ValueError when the result is not within ``tolerance`` of the target
    (a head + tail already too long, or filler sentences too long to land close)."""
    if not filler:
        raise ValueError("need at least one filler sentence")
    steps: list[str] = []

    def text() -> str:
        return "\n".join([head, *steps, tail])  # one step a line

    while True:
        candidate = f"Step {len(steps) + 1}: {filler[len(steps) % len(filler)]}"
        if steps and word_count(text()) + word_count(candidate) > target_words:
            break
        steps.append(candidate)
    out = text()
    if not within_length(out, target_words, tolerance):
        raise ValueError(
            f"the length-matched text has {word_count(out)} words, not within "
            f"{tolerance:.0%} of {target_words}"
        )
    return out


# Content-free steps: reading and re-reading, no judgement about truth, knowledge,
# conflict or reliability (tests check the sham carries none of those words).
SHAM_FILLER = (
    "Read the question carefully.",
    "Read each passage in the context from beginning to end.",
    "Read the question again, word by word.",
    "Count how many passages the context contains.",
    "Look at the title of each passage.",
    "Read the question one more time.",
    "Make sure you have read every passage.",
)

BASELINE_PROMPTS: dict[str, str] = {
    "CAI": (
        "Trust the context unless it conflicts with well-established scientific or "
        "historical knowledge. If a claim in the context contradicts well-established "
        "knowledge, say so in your reasoning and give the answer from that knowledge "
        f'instead, or set decision to "abstain" if you are not sure of it. {_ABSTAIN_CLAUSE}'
    ),
    "SHAM": length_matched(
        "Work through the following steps before you respond.",
        SHAM_FILLER,
        f"Then answer the question. {_ABSTAIN_CLAUSE}",
    ),
    "REFLECT": (
        "First, answer the question from the context. Then critique your own answer: "
        "check it against the context and against what you know, and look for mistakes. "
        "Finally, give your final answer, revised if the critique found a problem. Write "
        "the first answer and the critique in your reasoning, before the decision, and "
        f"the final answer in the answer. {_ABSTAIN_CLAUSE}"
    ),
    "FILTER": (
        "First, find any claims in the context that are severely implausible or "
        "contradict well-established knowledge, and disregard them. Then answer the "
        "question using only the remaining context. In your reasoning, before the "
        f"decision, list the claims you disregarded. {_ABSTAIN_CLAUSE}"
    ),
}
BASELINES = tuple(BASELINE_PROMPTS)

REASONING_FIRST_FORMAT = (
    "Respond ONLY with a JSON object in this exact format:\n"
    '{"reasoning": "your reasoning",\n'
    '"decision": "answer" or "abstain",\n'
    '"answer": "your answer or empty string",\n'
    '"confidence": 0-100}\n'
    "Start with { immediately.\n"
    "Keep reasoning brief.\n"
    "Do not use backslashes."
)
"""GRAB-RAG's response format (prompts.RESPONSE_FORMAT) with the reasoning first."""
REASONING_FIRST = ("REFLECT", "FILTER")
"""The baselines that reason before they commit (:data:`REASONING_FIRST_GRAMMAR`)."""


def baseline_format(name: str) -> str:
    return REASONING_FIRST_FORMAT if name in REASONING_FIRST else RESPONSE_FORMAT


def baseline_grammar(name: str) -> str:
    """The GBNF grammar of a baseline's call."""
    if name not in BASELINE_PROMPTS:
        raise ValueError(f"unknown baseline {name!r}; known: {', '.join(BASELINES)}")
    return REASONING_FIRST_GRAMMAR if name in REASONING_FIRST else BASELINE_GRAMMAR


def baseline_messages(name: str, question: str, context: str) -> list[dict[str, str]]:
    """GRAB-RAG's P-prompt scaffold with the baseline's instruction as the policy
    instruction and the baseline's response format, under :data:`CDD_SYSTEM`; call with
    :func:`baseline_grammar` (or :func:`grammar_for_messages`) and parse the output with
    :func:`grabrag.generation.generator.parse_output` (it reads the fields in any order)."""
    if name not in BASELINE_PROMPTS:
        raise ValueError(f"unknown baseline {name!r}; known: {', '.join(BASELINES)}")
    user = "\n\n".join(
        [_context_prefix(context, question), BASELINE_PROMPTS[name], baseline_format(name)]
    )
    return [
        {"role": "system", "content": CDD_SYSTEM},
        {"role": "user", "content": user},
    ]


def grammar_for_messages(messages: Sequence[Mapping[str, str]]) -> str:
    """The grammar of a baseline call, from its messages: the reasoning-first grammar
    when the user message ends with :data:`REASONING_FIRST_FORMAT`, else GRAB-RAG's.
    (The generation loop builds messages per prompt name and then calls the model with
    the messages alone; this keeps format and grammar in step.)"""
    user = messages[-1]["content"]
    return REASONING_FIRST_GRAMMAR if user.endswith(REASONING_FIRST_FORMAT) else BASELINE_GRAMMAR


# --- diagnostics: trace perturbation ------------------------------------------------------


def _copy_trace(trace: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        step: {**entry, "fields": dict(entry.get("fields") or {})}
        for step, entry in trace.items()
        if step != RESOLUTION
    }


def truncate_trace(trace: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """The trace with its conflict analysis removed, for the truncation test.

    Precisely: steps 1 and 2 (the two elicited answers) are kept as they are; steps 3 and
    4 become skipped entries (reason ``truncated``, nothing rendered); the resolution is
    dropped (it is what gets rerun, :func:`resolution_messages`). Choice: a step-level
    cut rather than "the first half of the trace text": a character cut would land at an
    arbitrary place that depends on the explanation's length, whereas this removes
    exactly what CDD adds to "two answers" - the divergence verdict and the premise.
    """
    out = _copy_trace(trace)
    for step in (DIVERGENCE, PREMISE):
        out[step] = _skipped(step, TRUNCATED).to_dict()
    return out


def inject_mistake(
    trace: Mapping[str, Mapping[str, Any]], wrong_answer: str
) -> dict[str, dict[str, Any]]:
    """The trace with a wrong conclusion injected, for the mistake-injection test.

    The divergence step is replaced by an injected entry whose explanation is
    :func:`mistake_explanation` (the wrong answer as fact plus the directive to give it)
    and whose verdict is the one the two shown answers support (:func:`divergence_fallback`:
    both given and different), so the injected text never contradicts the trace around
    it, whatever the condition (an empty contextual answer at Q0, agreeing answers at
    Q100, the planted answer at QC). Steps 1, 2 and 4 are kept as they are; the
    resolution is dropped (to be rerun). A trace without a divergence step (variant
    ``no_divergence``) has no conclusion to replace: ValueError.
    """
    if not normalize_answer(wrong_answer or ""):
        raise ValueError("the injected answer must not be empty")
    divergence = trace.get(DIVERGENCE)
    if divergence is None or divergence.get("skip_reason") == ABLATED:
        raise ValueError("the trace has no divergence step to inject a mistake into")
    out = _copy_trace(trace)
    contextual, parametric = _trace_answer(trace, CONTEXTUAL), _trace_answer(trace, PARAMETRIC)
    out[DIVERGENCE] = StepResult(
        DIVERGENCE,
        INJECTED,
        {
            "diverge": divergence_fallback(contextual, parametric),
            "explanation": mistake_explanation(contextual, parametric, wrong_answer),
        },
        origin=INJECTED,
    ).to_dict()
    return out


def rerun_resolution(
    complete: GrammarCompleter,
    question: str,
    context: str,
    trace: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    """Rerun step 5 on a (perturbed) trace: its decision fields plus the step entry."""
    entry = run_step(complete, RESOLUTION, question, context, trace).to_dict()
    return {**decision_from_resolution(entry), "resolution": entry}


# --- diagnostics: causal sensitivity ------------------------------------------------------


@dataclass(frozen=True)
class Sensitivity:
    """Causal sensitivity; ``reason`` says why ``value`` is NaN (None when defined)."""

    value: float
    reason: str | None = None

    def __float__(self) -> float:
        return self.value


def causal_sensitivity(acc_clean: float, acc_corrupted: float) -> Sensitivity:
    """(Acc_clean - Acc_corrupted) / Acc_clean, the paper's relative accuracy drop under a
    trace perturbation. Negative when the perturbation helps (not clipped). NaN with a
    reason when the clean accuracy is 0 (no correct answer that could be lost)."""
    for name, value in (("acc_clean", acc_clean), ("acc_corrupted", acc_corrupted)):
        if not math.isfinite(value) or not 0 <= value <= 1:
            raise ValueError(f"{name} must be an accuracy in [0, 1], not {value!r}")
    if acc_clean == 0:
        return Sensitivity(
            float("nan"), "clean accuracy is 0: no correct answer a perturbation could change"
        )
    return Sensitivity((acc_clean - acc_corrupted) / acc_clean)


def _as_correct(values: Any, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one value per question")
    if array.dtype != bool:
        if array.size and not np.all((array == 0) | (array == 1)):
            raise ValueError(f"{name} must be bool (or 0/1)")
    return array.astype(float)


def sensitivity_bootstrap(
    correct_clean: Any,
    correct_corrupted: Any,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    confidence_level: float = CONFIDENCE_LEVEL,
) -> tuple[float, float, float]:
    """Causal sensitivity with a paired percentile bootstrap over questions:
    (value, low, high).

    ``correct_clean[i]`` and ``correct_corrupted[i]`` are question i's correctness under
    the clean and the perturbed trace; a resample draws questions with replacement and
    keeps both of a drawn question's values (grabrag.scoring.bootstrap's draw and interval).
    Resamples with no correct clean answer are undefined and dropped; all NaN when the
    statistic is undefined on the data itself.
    """
    clean = _as_correct(correct_clean, "correct_clean")
    corrupted = _as_correct(correct_corrupted, "correct_corrupted")
    if clean.shape != corrupted.shape:
        raise ValueError(
            f"correct_clean has {clean.size} questions but correct_corrupted {corrupted.size}"
        )
    counts = resample_counts(clean.size, n_resamples, seed, dtype=np.float32)
    result = bootstrap_totals(
        {"clean": clean, "corrupted": corrupted},
        {"sensitivity": lambda t: ratio(t["clean"] - t["corrupted"], t["clean"])},
        counts,
        confidence_level,
    )["sensitivity"]
    return result.value, result.low, result.high


# --- diagnostics: source control and perturbation types -----------------------------------


def source_control(
    final_answer: str | None, contextual_answer: str | None, parametric_answer: str | None
) -> str:
    """Which elicited answer the final answer is: "context", "parametric", "both" (it
    equals both, which then agree) or "neither" (a third answer, or no answer).

    Choice: equality after normalize_answer (exact match), not token F1 >= 0.8: swapped
    answers often share most tokens (a tier-4 sub-entity swap changes one word of a
    multi-word answer), and F1 would credit both sources. Empty answers never match.
    Pass None as ``final_answer`` for an abstention or a failed parse.
    """
    final = normalize_answer(final_answer or "")
    if not final:
        return SOURCE_NEITHER
    from_context = final == normalize_answer(contextual_answer or "")
    from_prior = final == normalize_answer(parametric_answer or "")
    if from_context and from_prior:
        return SOURCE_BOTH
    if from_context:
        return SOURCE_CONTEXT
    if from_prior:
        return SOURCE_PARAMETRIC
    return SOURCE_NEITHER


def row_source_control(cdd_row: Mapping[str, Any]) -> str:
    """:func:`source_control` of a CDD row: its answer (None unless it answered) against
    its trace's step-1 and step-2 answers."""
    final = cdd_row.get("answer") if cdd_row.get("decision") == ANSWER else None
    trace = cdd_row["trace"]
    return source_control(final, _trace_answer(trace, CONTEXTUAL), _trace_answer(trace, PARAMETRIC))


ENTITY_SWAP, TEMPORAL_SHIFT, DISTRACTOR = "entity_swap", "temporal_shift", "distractor"
NUMERIC, INTER_CONTEXT, NO_ANSWER, CLEAN = "numeric", "inter_context", "no_answer", "clean"
PAPER_TYPES = (ENTITY_SWAP, TEMPORAL_SHIFT, DISTRACTOR)
"""The paper's perturbation types that have a counterpart here (its Logical
Contradiction has none); the adversarial macro average is over these."""
OTHER_TYPES = (NUMERIC, INTER_CONTEXT, NO_ANSWER)
"""Perturbations of GRAB-RAG with no counterpart in the paper, reported beside the macro."""
_QC_TIERS = {
    "1": TEMPORAL_SHIFT,
    "1b": TEMPORAL_SHIFT,
    "2": NUMERIC,
    "3": ENTITY_SWAP,
    "4": ENTITY_SWAP,
}
_CONDITIONS = {"Q100": CLEAN, "Q50": DISTRACTOR, "Q0": NO_ANSWER, "QX": INTER_CONTEXT}


def perturbation_type(condition: str, tier: str | int | None = None) -> str:
    """The perturbation type of a GRAB-RAG condition (QC by its swap tier).

    The paper's types: QC tiers 3/4 entity_swap, 1/1b temporal_shift, Q50 distractor
    (Distractor Evidence: the answer is present among distractor passages). Beside
    them, with no counterpart in the paper: QC tier 2 numeric, QX inter_context, Q0
    no_answer (only hard negatives: no answer in the passages at all). Q100 is clean.
    The paper's Logical Contradiction has no counterpart. The tier is read only for QC."""
    if condition == "QC":
        key = None if tier is None else str(tier)
        if key not in _QC_TIERS:
            raise ValueError(f"unknown QC tier {tier!r}; known: {', '.join(_QC_TIERS)}")
        return _QC_TIERS[key]
    if condition not in _CONDITIONS:
        raise ValueError(
            f"no perturbation type for condition {condition!r}; known: QC, "
            + ", ".join(_CONDITIONS)
        )
    return _CONDITIONS[condition]
