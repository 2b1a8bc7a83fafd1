"""CDD in the workflow: the per-question generation loop with its ablations and
trace perturbations, the decision rows of the CDD-family policies, and the diagnostics.

:mod:`grabrag.cdd.method` holds the method (steps, prompts, grammars, parsing, gate, baselines,
perturbations, sensitivity); this module runs it over context rows and turns stored
rows into decisions and diagnostics. The LLM is passed in as a callable, so everything
here is testable with a stub and loads no model itself.

Stored files (``results/cdd/<model>/<dataset>/``)
--------------------------------------------------
* ``<condition>/traces.jsonl``: one row per question: ``qid, index, condition``, the
  full CDD run's decision fields and whole trace (:func:`grabrag.cdd.method.run_cdd`: variant,
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
* ``diagnostics.csv``: :data:`DIAGNOSTIC_COLUMNS`, see :func:`diagnostics`.

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
two answers are given and differ (:func:`grabrag.cdd.method.run_gate`, the question's last
call, stored as ``gate_judgement``). A variant's own ``calls`` count is what it would
cost on its own; the row's ``llm_calls`` is what was run. A reused call's step keeps
the output and token counts and has ``seconds`` 0.

Mistake injection: the injected wrong answer
--------------------------------------------
:func:`wrong_answer`: the first non-empty candidate that is not a correct answer (EM
against the gold aliases): the row's planted ``replacement`` (QC and QX rows), else the
parametric (step 2) answer, else :data:`FIXED_WRONG_ANSWER`. Choice: the planted
replacement first, because at QC it is the wrong answer the passages already push, so
the test asks whether the trace's conclusion, not new information, moves the answer;
a gold-matching candidate is skipped, since injecting the right answer is no mistake.

Accuracy and behaviour (diagnostics)
------------------------------------
Accuracy is the CDD paper's answer accuracy in every CDD statistic (:func:`correct`): the
final answer matches a gold alias (EM after SQuAD normalisation) at every condition; an
abstention (or an unparseable final step) is not correct. At QC a correct answer is the
true one recovered against the swapped passage, the paper's adversarial accuracy. So an
always-abstaining policy has accuracy 0. GRAB-RAG's own score, where abstaining is the
right behaviour at the should-abstain conditions (an EM-correct answer at Q100/Q50, an
abstention at Q0/QC/QX; :func:`behaviour_correct`), is reported beside it as
``behaviour``, never under the name accuracy.
"""

from __future__ import annotations

import json
import math
import time
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from grabrag.cdd import method as C
from grabrag.core.conditions import SHOULD_ABSTAIN, SHOULD_ANSWER
from grabrag.core.errors import DataError
from grabrag.core.io import append_checkpoint_row, read_checkpoint_rows
from grabrag.generation.batching import Batcher, run_in_groups
from grabrag.generation.generator import PARSE_FAILED as GENERATION_FAILED
from grabrag.scoring import metrics as M
from grabrag.scoring.bootstrap import (
    CONFIDENCE_LEVEL,
    N_RESAMPLES,
    mean_interval,
    percentile_interval,
    resample_counts,
)

# --- names ----------------------------------------------------------------------------

CDD, CDD_ALPHA = "CDD", "CDD_ALPHA"
TRACE_POLICIES = (CDD, CDD_ALPHA)
BASELINE_POLICIES = C.BASELINES  # CAI, SHAM, REFLECT, FILTER
FAMILY = (*TRACE_POLICIES, *BASELINE_POLICIES)
REFERENCE_POLICY = "P1"
"""Standard RAG (GRAB-RAG's P1) is reported beside the CDD family for reference."""
DISPLAY_NAMES = {CDD: "CDD", CDD_ALPHA: "CDD-alpha"}

TRUNCATED, MISTAKE = "truncated", "mistake"
PERTURBATIONS = (TRUNCATED, MISTAKE)
ABLATIONS = (C.NO_PREMISE, C.NO_DIVERGENCE)
STEP_STATUSES = (C.OK, C.REPAIRED, C.FAILED, C.SKIPPED, C.INJECTED)
"""Every status a stored trace step can have."""

STEP_MAX_TOKENS = 128
FIXED_WRONG_ANSWER = "Atlantis"
"""The last-resort injected wrong answer (a fictional place; never a gold answer here)."""
REPLACEMENT, PARAMETRIC_ANSWER, FIXED = "replacement", "parametric_answer", "fixed"

TRACE_FORMAT = 2
"""Bumped when the traces.jsonl layout changes: a code edit, so the CDD jobs rerun."""

ALL = "all"
MACRO = "macro_adversarial"

# diagnostics.csv
SENSITIVITY, ABLATION, SOURCE_CONTROL, PERTURBATION_TYPE = (
    "sensitivity",
    "ablation",
    "source_control",
    "perturbation_type",
)
DIAGNOSTIC_COLUMNS = (
    "model",
    "dataset",
    "section",
    "policy",
    "variant",
    "condition",
    "perturbation_type",
    "metric",
    "value",
    "ci_low",
    "ci_high",
    "n",
    "reason",
)
SOURCE_LABELS = (C.SOURCE_CONTEXT, C.SOURCE_PARAMETRIC, C.SOURCE_BOTH, C.SOURCE_NEITHER)
PERTURBATION_TYPES = (C.CLEAN, *C.PAPER_TYPES, *C.OTHER_TYPES)
ADVERSARIAL_TYPES = C.PAPER_TYPES
"""The types the adversarial macro average is over: the paper's that exist here."""
ACCURACY, BEHAVIOUR = "accuracy", "behaviour"

_NO_ROWS = "no rows"
_NO_ADVERSARIAL = (
    "no row of the paper's perturbation types (entity swap, temporal shift, distractor)"
)

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
        (PARAMETRIC_ANSWER, _step_answer(trace, C.PARAMETRIC)),
    )
    for source, answer in candidates:
        if M.normalize_answer(answer) and not M.exact_match(answer, gold):
            return answer, source
    return FIXED_WRONG_ANSWER, FIXED


def cdd_question(
    complete: GrammarComplete,
    reset: Callable[[], None],
    row: Mapping[str, Any],
    cb_row: Mapping[str, Any] | None,
    *,
    parametric: str = C.CLOSED_BOOK,
    diagnostics: bool = True,
    gate: str = C.LEXICAL,
) -> dict[str, Any]:
    """Every CDD call of one context row: the full run, with ``diagnostics`` the two
    ablations and the two perturbed step-5 reruns, and with ``gate="model"`` CDD-alpha's
    contradiction judgement on the full run's step-1 and step-2 answers (last, stored as
    ``gate_judgement``). Resets the KV cache once, then runs the calls back to back
    through a :class:`ReusingCompleter`."""
    if gate not in C.GATES:
        raise ValueError(f"unknown gate {gate!r}; known: {', '.join(C.GATES)}")
    started = time.perf_counter()
    question, context = row["question"], row["context"]
    reset()
    reusing = ReusingCompleter(complete)

    def no_reset() -> None:  # one reset per question: the calls share the prefix
        return None

    full = C.run_cdd(reusing, no_reset, question, context, cb_row, C.FULL, parametric)
    out: dict[str, Any] = {
        "qid": row["qid"],
        "index": row.get("index"),
        "condition": row.get("condition"),
        **full,
    }
    if diagnostics:
        out["ablations"] = {
            variant: C.run_cdd(reusing, no_reset, question, context, cb_row, variant, parametric)
            for variant in ABLATIONS
        }
        trace = full["trace"]
        truncated = C.rerun_resolution(reusing, question, context, C.truncate_trace(trace))
        answer, source = wrong_answer(row, trace)
        mistake = C.rerun_resolution(reusing, question, context, C.inject_mistake(trace, answer))
        out["perturbations"] = {
            TRUNCATED: truncated,
            MISTAKE: {**mistake, "wrong_answer": answer, "wrong_answer_source": source},
        }
    if gate == C.MODEL:
        out["gate_judgement"] = C.run_gate(reusing, question, full["trace"])
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
    parametric: str = C.CLOSED_BOOK,
    diagnostics: bool = True,
    gate: str = C.LEXICAL,
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
    if parametric not in C.PARAMETRIC_SOURCES:
        raise ValueError(f"unknown parametric source {parametric!r}")
    cb: dict[str, Mapping[str, Any]] = {}
    if parametric == C.CLOSED_BOOK:
        cb = {r["qid"]: r for r in cb_rows or ()}
        missing = [r["qid"] for r in rows if r["qid"] not in cb]
        if missing:
            raise DataError(
                f"no closed-book (CB) row for qid {', '.join(missing[:5])} "
                f"({len(missing)} of {len(rows)} questions); CDD's parametric step reads it"
            )
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    batch = batcher.size if batcher else 1
    done = read_trace_checkpoint(checkpoint, f"{fingerprint}/batch {batch}")
    started = time.perf_counter()
    generated = 0
    position = {row["qid"]: i for i, row in enumerate(rows, start=1)}

    def share(qid: str) -> str:
        return f"[{position[qid]}/{len(rows)}] {100 * position[qid] / len(rows):5.1f}%"

    def question(row: Mapping[str, Any]) -> dict[str, Any]:
        qid = row["qid"]
        one = reset if batcher is None else _no_reset
        kwargs = {"parametric": parametric, "diagnostics": diagnostics, "gate": gate}
        return {**cdd_question(complete, one, row, cb.get(qid), **kwargs), "batch": batch}

    def skipped(group: Sequence[Mapping[str, Any]]) -> None:
        for row in group:
            if log:
                log(f"{share(row['qid'])} {row['qid']} (from checkpoint)")

    with checkpoint.open("a", encoding="utf-8") as handle:

        def finished(group: Sequence[Mapping[str, Any]], outs: list[dict[str, Any]]) -> None:
            nonlocal generated
            for row, out in zip(group, outs, strict=True):
                qid = row["qid"]
                append_checkpoint_row(handle, {**out, _FINGERPRINT: f"{fingerprint}/batch {batch}"})
                done[qid] = out
                generated += 1
                if log:
                    elapsed = time.perf_counter() - started
                    left = sum(1 for r in rows if r["qid"] not in done)
                    eta = elapsed / generated * left
                    log(
                        f"{share(qid)} {qid}: {out['llm_calls']} LLM calls "
                        f"({out['reused_calls']} reused), {out['question_seconds']:.1f} s; "
                        f"ETA {eta:.0f} s"
                    )

        if batcher is not None:
            run_in_groups(batcher, rows, question, lambda r: r["qid"] in done, finished, skipped)
        for row in rows if batcher is None else ():
            if row["qid"] in done:
                skipped([row])
            else:
                finished([row], [question(row)])
    return [done[r["qid"]] for r in rows]


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
        explanation = C.longest_mistake_explanation(longest) + " " + filler
        trace = {
            C.CONTEXTUAL: {"status": C.OK, "fields": {"answer": filler, "confidence": 100}},
            C.PARAMETRIC: {
                "status": C.OK,
                "fields": {"answer": max(cb_answer, filler, key=len), "confidence": 100},
            },
            C.DIVERGENCE: {"status": C.OK, "fields": {"diverge": True, "explanation": explanation}},
            C.PREMISE: {"status": C.OK, "fields": {"passage": 99, "premise": filler}},
        }
        yield (
            f"question {row['qid']} (CDD step 5, longest trace)",
            C.step_messages(C.RESOLUTION, row["question"], row["context"], trace),
        )


# --- decision rows ---------------------------------------------------------------------------


def _decision_row(base: Mapping[str, Any], policy: str, **fields: Any) -> dict[str, Any]:
    return {
        "qid": base["qid"],
        "index": base.get("index"),
        "condition": base.get("condition"),
        "policy": policy,
        **fields,
    }


def _unique(rows: Sequence[Mapping[str, Any]], label: str) -> dict[str, Mapping[str, Any]]:
    index: dict[str, Mapping[str, Any]] = {}
    for position, row in enumerate(rows, start=1):
        if "qid" not in row:
            raise DataError(f"{label} row {position}: column 'qid' is missing")
        if row["qid"] in index:
            raise DataError(f"{label} rows: qid {row['qid']} appears more than once")
        index[row["qid"]] = row
    return index


def _check_trace_row(row: Mapping[str, Any]) -> None:
    for column in ("decision", "answer", "confidence", "rule", "trace"):
        if column not in row:
            raise DataError(f"CDD trace row for qid {row['qid']}: column {column!r} is missing")
    if row["decision"] not in (C.ANSWER, C.ABSTAIN, None):
        raise DataError(f"CDD trace row for qid {row['qid']}: unknown decision {row['decision']!r}")


def cdd_decisions(trace_rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """CDD's decision rows: the full run's step-5 decision, answer and confidence (rule
    ``cdd_resolved``); an unparseable step 5 is ``parse_failed`` (decision, answer and
    confidence None: neither an answer nor an abstention). ``source`` is step 5's own
    claim of where the answer comes from; ``llm_calls`` what the question cost."""
    _unique(trace_rows, "CDD trace")
    out = []
    for row in trace_rows:
        _check_trace_row(row)
        failed = row["rule"] == C.PARSE_FAILED or row["decision"] is None
        out.append(
            _decision_row(
                row,
                CDD,
                decision=None if failed else row["decision"],
                answer=None if failed else row["answer"],
                confidence=None if failed else row["confidence"],
                rule=C.PARSE_FAILED if failed else C.RESOLVED,
                source=None if failed else row.get("source"),
                parse_status=row.get("parse_status"),
                llm_calls=row.get("calls"),
            )
        )
    return out


def cdd_alpha_decisions(
    p1_rows: Sequence[Mapping[str, Any]],
    trace_rows: Sequence[Mapping[str, Any]],
    threshold: float = C.GATE_THRESHOLD,
    gate: str = C.LEXICAL,
) -> list[dict[str, Any]]:
    """CDD-alpha for every question of the P1 cell, in its order, from stored rows only
    (:func:`grabrag.cdd.method.cdd_alpha_row`): the gate (``gate="model"``: the stored
    contradiction judgement of the step-1 and step-2 answers; ``"lexical"``: 1 - token
    F1 >= ``threshold``) sends a question to the full CDD row, else it keeps P1's
    generation row (rule ``gate_bypass``, or ``parse_failed``)."""
    traces = _unique(trace_rows, "CDD trace")
    _unique(p1_rows, "P1 generation")
    missing = [r["qid"] for r in p1_rows if r["qid"] not in traces]
    if missing:
        raise DataError(
            f"no CDD trace row for qid {', '.join(missing[:5])} ({len(missing)} of "
            f"{len(p1_rows)} questions); rerun cdd_generate for this cell"
        )
    out = []
    for p1 in p1_rows:
        if p1.get("prompt") not in (None, REFERENCE_POLICY):
            raise DataError(
                f"P1 generation rows: qid {p1['qid']} comes from prompt {p1['prompt']!r}; "
                "CDD-alpha was given the wrong generation file"
            )
        trace_row = traces[p1["qid"]]
        _check_trace_row(trace_row)
        try:
            routed = C.cdd_alpha_row(p1, trace_row, threshold, gate)
        except ValueError as error:
            raise DataError(f"CDD trace row for qid {p1['qid']}: {error}") from None
        out.append(
            _decision_row(
                p1,
                CDD_ALPHA,
                decision=routed["decision"],
                answer=routed["answer"],
                confidence=routed["confidence"],
                rule=routed["rule"],
                source=routed["source"],
                gated=routed["gated"],
                route=routed["route"],
                gate=routed["gate"],
                gate_basis=routed["gate_basis"],
                gate_score=routed["gate_score"],
                threshold=routed["threshold"],
                llm_calls=routed["cdd_calls"],
            )
        )
    return out


def cut_confidence(row: Mapping[str, Any]) -> bool:
    """Whether a reasoning-first generation row was repaired without whitespace at its
    end: its last field, the confidence, may have been cut by max_tokens."""
    raw = row.get("raw") or ""
    return row.get("parse_status") == "repaired" and not raw[-1:].isspace()


def baseline_decisions(rows: Sequence[Mapping[str, Any]], policy: str) -> list[dict[str, Any]]:
    """A prompt-only baseline's decision rows, as GRAB-RAG's single-pass P0-P2: the
    generation row's decision (rule ``generated``), or ``parse_failed``.

    A reasoning-first baseline (REFLECT, FILTER) ends with the confidence, so an output
    cut off by max_tokens right after a number may hold an incomplete one ("8" of
    "85"): such a repaired row counts as ``parse_failed`` unless whitespace after the
    number shows it was finished (:func:`cut_confidence`)."""
    if policy not in BASELINE_POLICIES:
        raise ValueError(f"{policy!r} is not a baseline ({', '.join(BASELINE_POLICIES)})")
    _unique(rows, f"{policy} generation")
    out = []
    for row in rows:
        if row.get("prompt") not in (None, policy):
            raise DataError(
                f"{policy} generation rows: qid {row['qid']} comes from prompt "
                f"{row['prompt']!r}; the rule was given the wrong generation file"
            )
        decision = row.get("decision")
        if (
            decision is None
            or row.get("parse_status") == GENERATION_FAILED
            or (policy in C.REASONING_FIRST and cut_confidence(row))
        ):
            out.append(
                _decision_row(
                    row, policy, decision=None, answer=None, confidence=None, rule="parse_failed"
                )
            )
            continue
        if decision not in (C.ANSWER, C.ABSTAIN):
            raise DataError(f"{policy} row for qid {row['qid']}: unknown decision {decision!r}")
        out.append(
            _decision_row(
                row,
                policy,
                decision=decision,
                answer=row.get("answer"),
                confidence=row.get("confidence"),
                rule="generated",
            )
        )
    return out


# --- diagnostics -------------------------------------------------------------------------------


def correct(row: Mapping[str, Any] | None, gold: Sequence[str]) -> bool:
    """The CDD paper's answer accuracy of one outcome: the final answer matches a gold
    alias (EM after SQuAD normalisation, :func:`grabrag.scoring.metrics.row_em`), at every
    condition. An abstention, an unparseable (decision None) or a missing outcome is
    not correct."""
    return row is not None and M.answered(row) and M.row_em(row, gold) == 1.0


def behaviour_correct(row: Mapping[str, Any] | None, condition: str, gold: Sequence[str]) -> bool:
    """GRAB-RAG's behaviour score of one outcome (``behaviour``, never called accuracy):
    an EM-correct answer at Q100/Q50, an abstention at Q0/QC/QX; an unparseable or
    missing outcome is wrong."""
    if row is None:
        return False
    if condition in SHOULD_ANSWER:
        return correct(row, gold)
    if condition in SHOULD_ABSTAIN:
        return M.abstained(row)
    raise ValueError(f"unknown condition {condition!r}")


def _changed(clean: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    """Whether a perturbed outcome differs from the clean one (decision, or answer after
    SQuAD normalisation)."""
    if clean.get("decision") != other.get("decision"):
        return True
    if clean.get("decision") != C.ANSWER:
        return False
    return M.normalize_answer(clean.get("answer") or "") != M.normalize_answer(
        other.get("answer") or ""
    )


def _seed(seed: int, *parts: str) -> list[int]:
    """A resample seed per (dataset, subset): every statistic of one subset shares the
    draws (so clean vs corrupted, and the two perturbations, are paired)."""
    return [int(seed), *(zlib.crc32(p.encode()) for p in parts)]


class _Rows:
    """A growing list of tidy diagnostic rows with the fixed head columns."""

    def __init__(self, model: str, dataset: str) -> None:
        self.head = {"model": model, "dataset": dataset}
        self.rows: list[dict[str, Any]] = []

    def add(
        self,
        section: str,
        metric: str,
        value: float,
        low: float = math.nan,
        high: float = math.nan,
        n: int = 0,
        reason: str | None = None,
        *,
        policy: str = "",
        variant: str = "",
        condition: str = "",
        perturbation_type: str = "",
    ) -> None:
        self.rows.append(
            {
                **self.head,
                "section": section,
                "policy": policy,
                "variant": variant,
                "condition": condition,
                "perturbation_type": perturbation_type,
                "metric": metric,
                "value": float(value),
                "ci_low": float(low),
                "ci_high": float(high),
                "n": int(n),
                "reason": reason or "",
            }
        )


def _mean(values: Sequence[float], counts: np.ndarray, level: float) -> tuple[float, ...]:
    if not len(values):
        return (math.nan, math.nan, math.nan)
    interval = mean_interval(np.asarray(values, dtype=float), counts, level)
    return (interval.value, interval.low, interval.high)


def _condition_units(
    conditions: Sequence[str],
    contexts: Mapping[str, Sequence[Mapping[str, Any]]],
    traces: Mapping[str, Sequence[Mapping[str, Any]]],
) -> list[tuple[str, list[tuple[str, Mapping[str, Any], list[str]]]]]:
    """[(condition or "all", [(condition, trace row, gold aliases)])], the trace rows of
    each condition in context order, then all of them pooled."""
    per_condition = []
    for condition in conditions:
        gold = {r["qid"]: list(r.get("answers") or []) for r in contexts[condition]}
        by_qid = _unique(traces.get(condition, []), f"CDD trace ({condition})")
        missing = [q for q in gold if q not in by_qid]
        if missing:
            raise DataError(
                f"CDD traces of {condition} lack qid {', '.join(missing[:5])}; "
                "rerun cdd_generate for this cell"
            )
        per_condition.append(
            (condition, [(condition, by_qid[q], gold[q]) for q in gold])  # context order
        )
    pooled = [unit for _, units in per_condition for unit in units]
    return [*per_condition, (ALL, pooled)]


def diagnostics(
    model: str,
    dataset: str,
    conditions: Sequence[str],
    contexts: Mapping[str, Sequence[Mapping[str, Any]]],
    traces: Mapping[str, Sequence[Mapping[str, Any]]] | None,
    decisions: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]],
    *,
    n_resamples: int = N_RESAMPLES,
    confidence_level: float = CONFIDENCE_LEVEL,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """The tidy rows of ``diagnostics.csv`` for one model x dataset (:data:`DIAGNOSTIC_COLUMNS`).

    ``contexts``: condition -> context rows; ``traces``: condition -> traces.jsonl rows
    (None when CDD did not run); ``decisions``: (condition, policy) -> decision rows.
    Sections (``condition`` "all" pools every condition's rows; CIs are percentile
    bootstrap intervals over the rows of the condition, or of all conditions, drawn
    from a seed per (seed, dataset, condition), so every statistic of one condition is
    paired):

    Accuracy is the CDD paper's answer accuracy everywhere (:func:`correct`: the final
    answer matches a gold alias; an abstention is not correct); GRAB-RAG's behaviour
    score (:func:`behaviour_correct`) is the separate metric ``behaviour``.

    * ``sensitivity`` (policy CDD, variant ``truncated`` / ``mistake``, per condition and
      ``all``; only when the traces have the perturbation runs): ``acc_clean``,
      ``acc_corrupted`` (answer accuracy), ``sensitivity`` = (acc_clean - acc_corrupted) / acc_clean
      (NaN with a reason when acc_clean is 0), ``changed`` (share of rows whose decision
      or normalised answer the perturbation changed).
    * ``ablation`` (policy CDD, variant ``full`` / ``no_premise`` / ``no_divergence``, per
      condition and ``all``; only with the ablation runs): ``accuracy``, ``behaviour``,
      ``answer_rate``.
    * ``source_control`` (policy CDD, variant ``full``, per condition and ``all``): how
      many answered rows give the contextual answer, the parametric one, both (they
      agree) or neither (:func:`grabrag.cdd.method.row_source_control`); value = count, n =
      answered rows.
    * ``perturbation_type`` (each policy with decisions, per type of
      :func:`grabrag.cdd.method.perturbation_type`, pooling the conditions of a type):
      ``accuracy`` and ``behaviour``, then type ``macro_adversarial``: the unweighted mean
      over the paper's types that have rows (:data:`ADVERSARIAL_TYPES`: entity swap,
      temporal shift, distractor; the paper's macro average, its CI resampling each
      type's rows separately), n = rows of those types. numeric, inter_context and
      no_answer are reported as types of their own, outside the macro.
    """
    out = _Rows(model, dataset)
    level = confidence_level
    if traces is not None:
        stored = [row for rows in traces.values() for row in rows]
        runs = {}
        for key in ("perturbations", "ablations"):
            having = sum(key in row for row in stored)
            if having not in (0, len(stored)):
                raise DataError(
                    f"CDD traces of {model}/{dataset}: {having} of {len(stored)} rows have "
                    f"{key}; the cells were made with different cdd.diagnostics settings"
                )
            runs[key] = bool(having)
        for condition, units in _condition_units(conditions, contexts, traces):
            _condition_diagnostics(out, condition, units, runs, n_resamples, level, seed, dataset)
    _perturbation_types(out, conditions, contexts, decisions, n_resamples, level, seed, dataset)
    return out.rows


def _condition_diagnostics(
    out: _Rows,
    condition: str,
    units: Sequence[tuple[str, Mapping[str, Any], list[str]]],
    runs: Mapping[str, bool],
    n_resamples: int,
    level: float,
    seed: int,
    dataset: str,
) -> None:
    n = len(units)
    counts = resample_counts(n, n_resamples, _seed(seed, dataset, condition), dtype=np.float32)
    reason = None if n else _NO_ROWS
    where = {"policy": CDD, "condition": condition}
    clean = [correct(row, gold) for _, row, gold in units]
    # sensitivity
    if runs["perturbations"]:
        for variant in PERTURBATIONS:
            rows = [row["perturbations"][variant] for _, row, _ in units]
            corrupted = [correct(r, g) for r, (_, _, g) in zip(rows, units, strict=True)]
            changed = [_changed(row, r) for r, (_, row, _) in zip(rows, units, strict=True)]
            at = {**where, "variant": variant}
            out.add(SENSITIVITY, "acc_clean", *_mean(clean, counts, level), n, reason, **at)
            out.add(SENSITIVITY, "acc_corrupted", *_mean(corrupted, counts, level), n, reason, **at)
            if n:
                point = C.causal_sensitivity(float(np.mean(clean)), float(np.mean(corrupted)))
                value, low, high = C.sensitivity_bootstrap(
                    clean, corrupted, n_resamples, _seed(seed, dataset, condition), level
                )
                out.add(SENSITIVITY, "sensitivity", value, low, high, n, point.reason, **at)
            else:
                out.add(SENSITIVITY, "sensitivity", math.nan, n=0, reason=_NO_ROWS, **at)
            out.add(SENSITIVITY, "changed", *_mean(changed, counts, level), n, reason, **at)
    # ablations
    if runs["ablations"]:
        for variant in (C.FULL, *ABLATIONS):
            rows = [row if variant == C.FULL else row["ablations"][variant] for _, row, _ in units]
            accuracy = [correct(r, g) for r, (_, _, g) in zip(rows, units, strict=True)]
            behaviour = [
                behaviour_correct(r, c, g) for r, (c, _, g) in zip(rows, units, strict=True)
            ]
            answered = [r is not None and M.answered(r) for r in rows]
            at = {**where, "variant": variant}
            out.add(ABLATION, ACCURACY, *_mean(accuracy, counts, level), n, reason, **at)
            out.add(ABLATION, BEHAVIOUR, *_mean(behaviour, counts, level), n, reason, **at)
            out.add(ABLATION, "answer_rate", *_mean(answered, counts, level), n, reason, **at)
    # source control of the full run's answered rows
    sources = [C.row_source_control(row) for _, row, _ in units if M.answered(row)]
    at = {**where, "variant": C.FULL}
    for label in SOURCE_LABELS:
        out.add(
            SOURCE_CONTROL,
            label,
            sources.count(label),
            n=len(sources),
            reason=None if sources else "no answered rows",
            **at,
        )


def _perturbation_types(
    out: _Rows,
    conditions: Sequence[str],
    contexts: Mapping[str, Sequence[Mapping[str, Any]]],
    decisions: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]],
    n_resamples: int,
    level: float,
    seed: int,
    dataset: str,
) -> None:
    policies = list(dict.fromkeys(policy for _, policy in decisions))
    for policy in policies:
        # type -> [(accuracy, behaviour)] over the rows of every condition of that type
        by_type: dict[str, list[tuple[bool, bool]]] = {t: [] for t in PERTURBATION_TYPES}
        for condition in conditions:
            rows = decisions.get((condition, policy))
            if rows is None:
                continue
            decided = _unique(rows, f"{policy} decisions ({condition})")
            for context in contexts[condition]:
                kind = C.perturbation_type(condition, context.get("tier"))
                row = decided.get(context["qid"])
                if row is None:
                    raise DataError(
                        f"{policy} decisions of {condition} lack qid {context['qid']}; "
                        "rerun the policy rule"
                    )
                gold = list(context.get("answers") or [])
                by_type[kind].append((correct(row, gold), behaviour_correct(row, condition, gold)))
        metrics = (ACCURACY, BEHAVIOUR)
        # per adversarial type with rows: (point estimate, resampled means) per metric
        typed: dict[str, list[tuple[float, np.ndarray]]] = {m: [] for m in metrics}
        covered = 0
        for kind in PERTURBATION_TYPES:
            pairs = by_type[kind]
            n = len(pairs)
            counts = resample_counts(n, n_resamples, _seed(seed, dataset, kind), dtype=np.float32)
            at = {"policy": policy, "perturbation_type": kind}
            adversarial = n > 0 and kind in ADVERSARIAL_TYPES
            covered += n if adversarial else 0
            for k, metric in enumerate(metrics):
                values = np.asarray([p[k] for p in pairs], dtype=float)
                reason = None if n else _NO_ROWS
                out.add(PERTURBATION_TYPE, metric, *_mean(values, counts, level), n, reason, **at)
                if adversarial:
                    resampled = (counts @ values.astype(np.float32)) / n
                    typed[metric].append((float(values.mean()), resampled))
        at = {"policy": policy, "perturbation_type": MACRO}
        for metric in metrics:
            if not typed[metric]:
                out.add(PERTURBATION_TYPE, metric, math.nan, n=0, reason=_NO_ADVERSARIAL, **at)
                continue
            point = float(np.mean([value for value, _ in typed[metric]]))
            macro = np.mean(np.column_stack([r for _, r in typed[metric]]), axis=1)
            low, high, _ = percentile_interval(macro, level)
            out.add(PERTURBATION_TYPE, metric, point, low[0], high[0], covered, **at)
