"""The prompts of CDD's five steps: the shared system message, each step's instruction
and response format, which earlier steps each step sees, and the rendering of that trace
into the step's user message (:func:`step_messages`).

Each step is its own call (not one long prompt): the user message is the passages, the
question, the rendered trace of the earlier steps the step may see, the step's
instruction and its response format. Choice: separate calls with a rendered trace make
the trace *intervenable* - the diagnostics (:func:`grabrag.cdd.trace_diagnostics.truncate_trace`,
:func:`grabrag.cdd.trace_diagnostics.inject_mistake`) edit the trace and rerun only the
resolution (:func:`resolution_messages`), which is the paper's causal-sensitivity test.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from grabrag.cdd.schema import (
    CONTEXTUAL,
    DIVERGENCE,
    PARAMETRIC,
    PREMISE,
    RESOLUTION,
    SKIPPED,
    STEPS,
)
from grabrag.core.text import normalize_answer
from grabrag.generation.prompts import RESPONSE_FORMAT, SYSTEM_CLOSED_BOOK, context_user_prompt

CDD_SYSTEM = SYSTEM_CLOSED_BOOK
"""Choice: GRAB-RAG's neutral system message (no "use ONLY the provided context"), since
steps 2 and 5 must be free to weigh the model's own knowledge against the passages; each
step's instruction says which source to use. The prompt-only baselines and the model
gate use it too (:func:`grabrag.cdd.baselines.baseline_messages`,
:func:`grabrag.cdd.gate.gate_messages`)."""

STEP_INSTRUCTIONS: dict[str, str] = {
    CONTEXTUAL: (
        "Task: contextual answer. Answer the question using ONLY the passages above, even "
        "where they disagree with what you believe. Do not use your own knowledge. If the "
        "passages do not contain the answer, leave the answer empty. Give your confidence "
        "(0-100) that the passages state this answer."
    ),
    # The paper's in-context elicitation (parametric="in_context", as config/extended.yaml
    # sets it); the embedded default reads the closed-book pass instead
    # (parametric_from_closed_book).
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
    (:meth:`grabrag.cdd.parsing.StepResult.to_dict`); only the earlier steps ``step`` may
    see are rendered.
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
