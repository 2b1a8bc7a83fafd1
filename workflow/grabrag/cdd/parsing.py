"""Parsing one CDD step's output: :class:`StepResult` (one entry of a trace), the field
checks against the step's schema, the repair of an output cut off by max_tokens, the
premise check, the documented fallback values of a failed step, and step 2 read from
GRAB-RAG's closed-book row (:func:`parametric_from_closed_book`).

Parsing and failure fallbacks (:func:`parse_step`), never inventing a value:

* Repair only closes a string and/or the object cut off by max_tokens ('"}' or '}');
  it never adds a field, and it does not close a cut-off trailing number (a cut "8"
  might have been "85"): steps 1/2, whose last field is the confidence, are repaired
  only when whitespace after the number shows it was complete.
* step 1/2 failed  -> answer "" (unknown), confidence None.
* step 3 failed    -> diverge = both answers non-empty and different after
  :func:`grabrag.core.text.normalize_answer`, else False; explanation "". Flagged
  ``fallback``; the pipeline goes on with that value.
* step 4 failed    -> passage None, premise "", premise_found False.
* step 5 failed    -> decision, answer, confidence, source None: the row is
  ``parse_failed``, neither an answer nor an abstention, exactly like GRAB-RAG's
  policies (no made-up confidence enters AURC/ECE).

Choice: strings are parsed with ``json.loads(strict=False)``: the grammar's string rule
(GRAB-RAG's) admits raw newlines and tabs, which strict JSON rejects.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from grabrag.cdd.schema import (
    _FIELDS,
    CONTEXTUAL,
    DIVERGENCE,
    FAILED,
    FROM_CLOSED_BOOK,
    GATE,
    GENERATED,
    NOT_RUN,
    OK,
    PARAMETRIC,
    PREMISE,
    REPAIRED,
    RESOLUTION,
    SKIPPED,
    SOURCES,
    STEPS,
)
from grabrag.core.decisions import ANSWER, DECISIONS
from grabrag.core.text import normalize_answer


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
    # A served model's call says how it was made (grabrag.generation.generator.provenance);
    # None for a call made in the job's own process, whose entries carry no such key.
    served: dict[str, Any] | None = None

    def record_call(self, result: Mapping[str, Any]) -> StepResult:
        """This step's call's cost (and, when served, its provenance) from the model's
        result."""
        self.prompt_tokens = int(result.get("prompt_tokens") or 0)
        self.completion_tokens = int(result.get("completion_tokens") or 0)
        self.seconds = float(result.get("seconds") or 0.0)
        self.served = result.get("served")
        return self

    def to_dict(self) -> dict[str, Any]:
        entry = asdict(self)
        if entry["served"] is None:
            del entry["served"]
        return entry


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
