"""CDD's vocabulary and output schema: the names of its steps, variants, parametric
sources, step statuses, decisions, answer sources and decision-row rules, and the GBNF
grammars that constrain each call's JSON output (the five steps, CDD-alpha's model gate
and the prompt-only baselines).

Every other CDD module reads these names, so they live below all of them; the grammars
sit with the field lists (``_FIELDS``) that :mod:`grabrag.cdd.parsing` validates a
step's output against, so a step's grammar and its checks cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Sequence

from grabrag.generation.prompts import GBNF_GRAMMAR

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

FULL, NO_PREMISE, NO_DIVERGENCE = "full", "no_premise", "no_divergence"
VARIANTS = (FULL, NO_PREMISE, NO_DIVERGENCE)
CLOSED_BOOK_PRIOR, IN_CONTEXT = "closed_book", "in_context"
PARAMETRIC_SOURCES = (CLOSED_BOOK_PRIOR, IN_CONTEXT)

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

SOURCE_CONTEXT, SOURCE_PARAMETRIC, SOURCE_NEITHER, SOURCE_BOTH = (
    "context",
    "parametric",
    "neither",
    "both",
)
SOURCES = (SOURCE_CONTEXT, SOURCE_PARAMETRIC, SOURCE_NEITHER)

# Decision-row rules.
RESOLVED = "cdd_resolved"
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
