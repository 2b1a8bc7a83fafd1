"""Context-Driven Decomposition (CDD) on one question: the five-step pipeline
(:func:`run_cdd`) with its ablations (Chen et al., "Does RAG Know When Retrieval Is
Wrong? Diagnosing Context Compliance under Knowledge Conflict", arXiv:2605.14473).

The method
----------
CDD turns a knowledge conflict between the retrieved passages and the model's own
(parametric) knowledge into five observable steps, each one grammar-constrained JSON call:

1. ``contextual``  - the answer the passages give: {"answer", "confidence"}; the answer
   is empty when the passages do not answer.
2. ``parametric``  - the answer from the model's own knowledge: {"answer", "confidence"}.
   The paper asks it after the passages were shown ("ignoring the passages",
   ``parametric="in_context"``, one more call; as ``config/extended.yaml`` sets it). Our
   variant ``parametric="closed_book"`` reads GRAB-RAG's closed-book (CB) pass, already
   generated (:func:`grabrag.cdd.parsing.parametric_from_closed_book`, no new call): the
   paper's limitations note that the in-context answer is a context-prompted prior, and
   the CB pass is the context-free prior they ask for. It is the embedded default
   (``config.yaml``), which is sized for CI.
3. ``divergence``  - do the two answers diverge? {"diverge", "explanation"}.
4. ``premise``     - quote the passage sentence carrying the conflicting claim:
   {"passage", "premise"}; the quote is machine-checked against the context
   (``premise_found``: whitespace- and case-normalised substring).
5. ``resolution``  - the final answer from the trace of steps 1-4:
   {"decision", "answer", "confidence", "source", "rationale"}.

Each step is its own call with a rendered trace of the earlier steps
(:mod:`grabrag.cdd.prompts`), so the diagnostics can edit the trace and rerun only the
resolution (:mod:`grabrag.cdd.trace_diagnostics`).

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

The rest of CDD: the names and grammars (:mod:`grabrag.cdd.schema`), the step prompts
(:mod:`grabrag.cdd.prompts`), parsing a step's output (:mod:`grabrag.cdd.parsing`), the
contradiction gate of CDD-alpha (:mod:`grabrag.cdd.gate`), the prompt-only baselines
(:mod:`grabrag.cdd.baselines`) and the trace diagnostics
(:mod:`grabrag.cdd.trace_diagnostics`); in the workflow, the generation job
(:mod:`grabrag.cdd.runs`), the decision rows (:mod:`grabrag.cdd.decisions`) and
``diagnostics.csv`` (:mod:`grabrag.cdd.diagnostics`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from grabrag.cdd.parsing import StepResult, _skipped, parametric_from_closed_book, parse_step
from grabrag.cdd.prompts import step_messages
from grabrag.cdd.schema import (
    ABLATED,
    CLOSED_BOOK_PRIOR,
    CONTEXTUAL,
    DIVERGENCE,
    FULL,
    GENERATED,
    NO_DIVERGENCE,
    NO_PREMISE,
    NOT_DIVERGENT,
    OK,
    PARAMETRIC,
    PARAMETRIC_SOURCES,
    PREMISE,
    REPAIRED,
    RESOLUTION,
    RESOLVED,
    STEP_GRAMMARS,
    VARIANTS,
)
from grabrag.core.parsing import RULE_PARSE_FAILED


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
    return parsed.record_call(result)


def decision_from_resolution(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The decision fields of a resolution step entry (``parse_failed`` when it failed)."""
    fields = entry.get("fields") or {}
    if entry.get("status") not in (OK, REPAIRED):
        return {
            "decision": None,
            "answer": None,
            "confidence": None,
            "source": None,
            "rule": RULE_PARSE_FAILED,
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
    parametric: str = CLOSED_BOOK_PRIOR,
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
    if parametric == CLOSED_BOOK_PRIOR and cb_row is None:
        raise ValueError('parametric="closed_book" needs the closed-book row')
    reset()
    trace: dict[str, dict[str, Any]] = {}

    def run(step: str) -> None:
        trace[step] = run_step(complete, step, question, context, trace).to_dict()

    run(CONTEXTUAL)
    if parametric == CLOSED_BOOK_PRIOR:
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
