"""CDD's generation job: every CDD call of one question (the full run, its ablations,
the perturbed step-5 reruns and CDD-alpha's judgement) through a completer that runs
each distinct call once, the job loop over a cell's questions with checkpoint and
resume, and the prompt-size preflight.

The method itself is :mod:`grabrag.cdd.method` and the modules beside it; the stored rows
become decisions in :mod:`grabrag.cdd.decisions` and ``diagnostics.csv`` in
:mod:`grabrag.cdd.diagnostics`. The LLM is passed in as a callable, so everything here is
testable with a stub and loads no model itself.

Stored files (``results/cdd/<model>/<dataset>/``)
--------------------------------------------------
* ``<condition>/traces.jsonl``: one row per question: ``qid, index, condition``, the
  full CDD run's decision fields and whole trace (:func:`grabrag.cdd.method.run_cdd`:
  variant,
  parametric, decision, answer, confidence, source, rule, parse_status, calls,
  prompt_tokens, completion_tokens, seconds, trace), and, when ``cdd.diagnostics`` is on,
  ``ablations`` ({no_premise, no_divergence}: run_cdd rows) and ``perturbations``
  ({truncated, mistake}: the rerun step 5's decision fields and its ``resolution`` entry;
  the mistake run also has ``wrong_answer`` and ``wrong_answer_source``), with
  ``cdd.gate: model`` the contradiction judgement ``gate_judgement`` (a step entry:
  ``contradict``; skipped without a call when an answer is empty or both are equal).
  Then ``diagnostics`` and ``gate`` (the settings), ``llm_calls`` (calls actually made
  for the question), ``reused_calls`` (calls answered from an identical earlier call)
  and ``question_seconds``.
* ``<condition>/{CAI,SHAM,REFLECT,FILTER}.jsonl``: generation rows
  (:func:`grabrag.generation.generator.generation_row`, the schema of the P0-P2 cells).
* ``diagnostics.csv``: :data:`grabrag.cdd.diagnostics.DIAGNOSTIC_COLUMNS`, see
  :func:`grabrag.cdd.diagnostics.diagnostics`.

Calls per question (reuse)
--------------------------
Per question the KV cache is reset once, then every call runs back to back (they all
share the prefix system message + passages + question). Decoding is greedy, so an
identical call (same messages, same grammar) gives the same output: every call goes
through :class:`ReusingCompleter`, which answers a repeated call from the first one
instead of running it again. In practice, with ``parametric="closed_book"`` (step 2 is
the stored CB row, no call):

* full CDD: step 1, step 3, step 4 (only when step 3 finds a divergence), step 5: 3-4.
* no_premise: steps 1 and 3 are the full run's calls (reused); step 5 sees no premise
  line, which is the full run's step-5 prompt exactly when the full run skipped step 4
  (no divergence: a skipped step renders nothing), so it is reused then: 0-1 new calls.
* no_divergence: step 1 reused; step 4 and step 5 see no divergence line: 2 new calls.
* truncated and mistake-injected step-5 reruns: 1 new call each.

That is 7 (no divergence found) or 9 calls per question and condition with diagnostics
on (3 or 4 without), plus one for step 2 with ``parametric="in_context"`` (shared by
every variant), plus CDD-alpha's contradiction judgement with ``gate="model"`` when the
two answers are given and differ (:func:`grabrag.cdd.gate.run_gate`, the question's last
call, stored as ``gate_judgement``). A variant's own ``calls`` count is what it would
cost on its own; the row's ``llm_calls`` is what was run. A reused call's step keeps
the output and token counts and has ``seconds`` 0.

Mistake injection: the injected wrong answer
--------------------------------------------
:func:`wrong_answer`: the first non-empty candidate that is not a correct answer (EM
against the gold aliases): the row's planted ``replacement`` (QC and QX rows), else the
parametric (step 2) answer, else :data:`FIXED_WRONG_ANSWER`. Choice: the planted
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from grabrag.cdd.gate import GATES, LEXICAL, MODEL, run_gate
from grabrag.cdd.method import run_cdd
from grabrag.cdd.prompts import step_messages
from grabrag.cdd.schema import (
    CLOSED_BOOK_PRIOR,
    CONTEXTUAL,
    DIVERGENCE,
    FAILED,
    FULL,
    INJECTED,
    NO_DIVERGENCE,
    NO_PREMISE,
    OK,
    PARAMETRIC,
    PARAMETRIC_SOURCES,
    PREMISE,
    REPAIRED,
    RESOLUTION,
    SKIPPED,
)
from grabrag.cdd.trace_diagnostics import (
    inject_mistake,
    longest_mistake_explanation,
    rerun_resolution,
    truncate_trace,
)
from grabrag.core.errors import DataError
from grabrag.core.io import append_checkpoint_row, read_checkpoint_rows
from grabrag.core.text import normalize_answer
from grabrag.generation.batching import Batcher, run_in_groups
from grabrag.scoring.answers import exact_match

# --- names ----------------------------------------------------------------------------

TRUNCATED, MISTAKE = "truncated", "mistake"
PERTURBATIONS = (TRUNCATED, MISTAKE)
ABLATIONS = (NO_PREMISE, NO_DIVERGENCE)
STEP_STATUSES = (OK, REPAIRED, FAILED, SKIPPED, INJECTED)
"""Every status a stored trace step can have."""

STEP_MAX_TOKENS = 128
FIXED_WRONG_ANSWER = "Atlantis"
"""The last-resort injected wrong answer (a fictional place; never a gold answer here)."""
REPLACEMENT, PARAMETRIC_ANSWER, FIXED = "replacement", "parametric_answer", "fixed"

TRACE_FORMAT = 2
"""Bumped when the traces.jsonl layout changes: a code edit, so the CDD jobs rerun."""

GrammarComplete = Callable[..., dict[str, Any]]


# --- reuse of identical calls -----------------------------------------------------------


class ReusingCompleter:
    """A :class:`grabrag.cdd.method.GrammarCompleter` that runs each distinct call once.

    ``complete(messages, *, grammar)`` is the underlying call. A call identical to an
    earlier one (same messages and grammar) since the last :meth:`clear` is answered
    from the stored result (greedy decoding gives the same output) with ``seconds`` 0.
    ``executed`` and ``reused`` count the two kinds."""

    def __init__(self, complete: GrammarComplete) -> None:
        self._complete = complete
        self._cache: dict[str, dict[str, Any]] = {}
        self.executed = 0
        self.reused = 0

    def clear(self) -> None:
        self._cache.clear()
        self.executed = self.reused = 0

    def __call__(self, messages: list[dict[str, str]], *, grammar: str) -> dict[str, Any]:
        key = json.dumps([messages, grammar], ensure_ascii=False)
        if key in self._cache:
            self.reused += 1
            return {**self._cache[key], "seconds": 0.0}
        result = self._complete(messages, grammar=grammar)
        self.executed += 1
        self._cache[key] = dict(result)
        return result


# --- one question -----------------------------------------------------------------------


def _step_answer(trace: Mapping[str, Mapping[str, Any]], step: str) -> str:
    return ((trace.get(step) or {}).get("fields") or {}).get("answer") or ""


def wrong_answer(
    context_row: Mapping[str, Any], trace: Mapping[str, Mapping[str, Any]]
) -> tuple[str, str]:
    """The answer injected by the mistake test and where it comes from (module docstring):
    (answer, "replacement" | "parametric_answer" | "fixed")."""
    gold = list(context_row.get("answers") or [])
    candidates = (
        (REPLACEMENT, context_row.get("replacement") or ""),
        (PARAMETRIC_ANSWER, _step_answer(trace, PARAMETRIC)),
    )
    for source, answer in candidates:
        if normalize_answer(answer) and not exact_match(answer, gold):
            return answer, source
    return FIXED_WRONG_ANSWER, FIXED


def cdd_question(
    complete: GrammarComplete,
    reset: Callable[[], None],
    row: Mapping[str, Any],
    cb_row: Mapping[str, Any] | None,
    *,
    parametric: str = CLOSED_BOOK_PRIOR,
    diagnostics: bool = True,
    gate: str = LEXICAL,
) -> dict[str, Any]:
    """Every CDD call of one context row: the full run, with ``diagnostics`` the two
    ablations and the two perturbed step-5 reruns, and with ``gate="model"`` CDD-alpha's
    contradiction judgement on the full run's step-1 and step-2 answers (last, stored as
    ``gate_judgement``). Resets the KV cache once, then runs the calls back to back
    through a :class:`ReusingCompleter`."""
    if gate not in GATES:
        raise ValueError(f"unknown gate {gate!r}; known: {', '.join(GATES)}")
    started = time.perf_counter()
    question, context = row["question"], row["context"]
    reset()
    reusing = ReusingCompleter(complete)

    def no_reset() -> None:  # one reset per question: the calls share the prefix
        return None

    full = run_cdd(reusing, no_reset, question, context, cb_row, FULL, parametric)
    out: dict[str, Any] = {
        "qid": row["qid"],
        "index": row.get("index"),
        "condition": row.get("condition"),
        **full,
    }
    if diagnostics:
        out["ablations"] = {
            variant: run_cdd(reusing, no_reset, question, context, cb_row, variant, parametric)
            for variant in ABLATIONS
        }
        trace = full["trace"]
        truncated = rerun_resolution(reusing, question, context, truncate_trace(trace))
        answer, source = wrong_answer(row, trace)
        mistake = rerun_resolution(reusing, question, context, inject_mistake(trace, answer))
        out["perturbations"] = {
            TRUNCATED: truncated,
            MISTAKE: {**mistake, "wrong_answer": answer, "wrong_answer_source": source},
        }
    if gate == MODEL:
        out["gate_judgement"] = run_gate(reusing, question, full["trace"])
    out["diagnostics"] = diagnostics
    out["gate"] = gate
    out["llm_calls"] = reusing.executed
    out["reused_calls"] = reusing.reused
    out["question_seconds"] = round(time.perf_counter() - started, 3)
    return out


# --- the job loop: checkpoint and resume ------------------------------------------------------

_FINGERPRINT = "_fingerprint"


def read_trace_checkpoint(path: Path, fingerprint: str) -> dict[str, dict[str, Any]]:
    """Finished questions of a checkpoint (qid -> row), by the shared reader: a torn last
    line is dropped, and so are rows written under other settings (another
    ``fingerprint``); the file keeps only the rows returned."""
    rows = read_checkpoint_rows(path, keep=lambda row: row.get(_FINGERPRINT) == fingerprint)
    return {
        qid: {k: v for k, v in row.items() if k != _FINGERPRINT} for (qid,), row in rows.items()
    }


def run_traces(
    complete: GrammarComplete,
    reset: Callable[[], None],
    rows: Sequence[Mapping[str, Any]],
    cb_rows: Sequence[Mapping[str, Any]] | None,
    checkpoint: Path,
    *,
    parametric: str = CLOSED_BOOK_PRIOR,
    diagnostics: bool = True,
    gate: str = LEXICAL,
    fingerprint: str = "",
    log: Callable[[str], None] | None = None,
    batcher: Batcher[Any, Any] | None = None,
) -> list[dict[str, Any]]:
    """:func:`cdd_question` for every context row, resuming from ``checkpoint``.

    Each finished question is appended to the checkpoint as one line (flushed and
    fsynced); a killed job redoes at most the question in flight, and since each
    question starts from a reset KV cache the result is what an uninterrupted run
    writes (timing aside). ``parametric``, ``diagnostics`` and ``gate`` as in
    :func:`cdd_question`. ``fingerprint`` names the settings: checkpoint rows of other
    settings are not reused. The caller removes the checkpoint once the output is
    written. ``log`` gets one progress line per question. With a ``batcher`` (the model's
    batch > 1) the questions of a group run side by side, each question's steps in their
    order; a group not finished when the job was killed is redone whole."""
    cb = _closed_book_rows(rows, cb_rows, parametric)
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    batch = batcher.size if batcher else 1
    stamp = f"{fingerprint}/batch {batch}"
    done = read_trace_checkpoint(checkpoint, stamp)
    progress = _Progress(rows, done, log)

    def question(row: Mapping[str, Any]) -> dict[str, Any]:
        qid = row["qid"]
        one = reset if batcher is None else _no_reset
        kwargs = {"parametric": parametric, "diagnostics": diagnostics, "gate": gate}
        return {**cdd_question(complete, one, row, cb.get(qid), **kwargs), "batch": batch}

    with checkpoint.open("a", encoding="utf-8") as handle:

        def finished(group: Sequence[Mapping[str, Any]], outs: list[dict[str, Any]]) -> None:
            for row, out in zip(group, outs, strict=True):
                append_checkpoint_row(handle, {**out, _FINGERPRINT: stamp})
                done[row["qid"]] = out
                progress.finished(row["qid"], out)

        _run_questions(rows, question, done, finished, progress.skipped, batcher)
    return [done[r["qid"]] for r in rows]


def _closed_book_rows(
    rows: Sequence[Mapping[str, Any]],
    cb_rows: Sequence[Mapping[str, Any]] | None,
    parametric: str,
) -> dict[str, Mapping[str, Any]]:
    """qid -> CB row for step 2 with ``parametric="closed_book"`` (a DataError when a
    question has none); empty for the in-context step 2, which reads no CB row."""
    if parametric not in PARAMETRIC_SOURCES:
        raise ValueError(f"unknown parametric source {parametric!r}")
    cb: dict[str, Mapping[str, Any]] = {}
    if parametric == CLOSED_BOOK_PRIOR:
        cb = {r["qid"]: r for r in cb_rows or ()}
        missing = [r["qid"] for r in rows if r["qid"] not in cb]
        if missing:
            raise DataError(
                f"no closed-book (CB) row for qid {', '.join(missing[:5])} "
                f"({len(missing)} of {len(rows)} questions); CDD's parametric step reads it"
            )
    return cb


class _Progress:
    """The job's progress lines: one per question, from the checkpoint or generated, the
    generated ones with an ETA from the questions generated so far in this run."""

    def __init__(
        self,
        rows: Sequence[Mapping[str, Any]],
        done: Mapping[str, Any],
        log: Callable[[str], None] | None,
    ) -> None:
        self.rows, self.done, self.log = rows, done, log
        self.position = {row["qid"]: i for i, row in enumerate(rows, start=1)}
        self.started = time.perf_counter()
        self.generated = 0

    def share(self, qid: str) -> str:
        position, total = self.position[qid], len(self.rows)
        return f"[{position}/{total}] {100 * position / total:5.1f}%"

    def skipped(self, group: Sequence[Mapping[str, Any]]) -> None:
        for row in group:
            if self.log:
                self.log(f"{self.share(row['qid'])} {row['qid']} (from checkpoint)")

    def finished(self, qid: str, out: Mapping[str, Any]) -> None:
        """After ``out`` was stored as done."""
        self.generated += 1
        if not self.log:
            return
        elapsed = time.perf_counter() - self.started
        left = sum(1 for r in self.rows if r["qid"] not in self.done)
        eta = elapsed / self.generated * left
        self.log(
            f"{self.share(qid)} {qid}: {out['llm_calls']} LLM calls "
            f"({out['reused_calls']} reused), {out['question_seconds']:.1f} s; "
            f"ETA {eta:.0f} s"
        )


def _run_questions(
    rows: Sequence[Mapping[str, Any]],
    question: Callable[[Mapping[str, Any]], dict[str, Any]],
    done: Mapping[str, Any],
    finished: Callable[[Sequence[Mapping[str, Any]], list[dict[str, Any]]], None],
    skipped: Callable[[Sequence[Mapping[str, Any]]], None],
    batcher: Batcher[Any, Any] | None,
) -> None:
    """Every question not ``done``, one at a time, or side by side in the ``batcher``'s
    groups; ``skipped`` gets the done ones, ``finished`` the new outputs."""
    if batcher is not None:
        run_in_groups(batcher, rows, question, lambda r: r["qid"] in done, finished, skipped)
        return
    for row in rows:
        if row["qid"] in done:
            skipped([row])
        else:
            finished([row], [question(row)])


def _no_reset() -> None:
    """A batched unit's reset: every batched call starts from an empty KV stream."""


def _filler(words: int) -> str:
    return " ".join(["word"] * words)


def preflight_calls(
    rows: Sequence[Mapping[str, Any]],
    cb_rows: Sequence[Mapping[str, Any]] | None,
    step_max_tokens: int,
) -> Iterable[tuple[str, list[dict[str, str]]]]:
    """(label, messages) of the longest prompt each question can send: step 5 seeing
    every earlier step, each step's text at its ``step_max_tokens`` limit (a filler of
    that many words), the mistake template with the longest candidate wrong answer
    included, and the real CB answer as the parametric one. For
    :meth:`grabrag.generation.generator.LlamaGenerator.preflight` with max_tokens = the
    step limit."""
    cb = {r["qid"]: r for r in cb_rows or ()}
    filler = _filler(step_max_tokens)
    for row in rows:
        cb_answer = (cb.get(row["qid"]) or {}).get("answer") or ""
        longest = max((row.get("replacement") or "", cb_answer, FIXED_WRONG_ANSWER), key=len)
        explanation = longest_mistake_explanation(longest) + " " + filler
        trace = {
            CONTEXTUAL: {"status": OK, "fields": {"answer": filler, "confidence": 100}},
            PARAMETRIC: {
                "status": OK,
                "fields": {"answer": max(cb_answer, filler, key=len), "confidence": 100},
            },
            DIVERGENCE: {"status": OK, "fields": {"diverge": True, "explanation": explanation}},
            PREMISE: {"status": OK, "fields": {"passage": 99, "premise": filler}},
        }
        yield (
            f"question {row['qid']} (CDD step 5, longest trace)",
            step_messages(RESOLUTION, row["question"], row["context"], trace),
        )
