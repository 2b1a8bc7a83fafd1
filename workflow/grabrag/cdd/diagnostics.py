"""CDD's diagnostics of one model x dataset, the tidy rows of ``diagnostics.csv``
(:func:`diagnostics`, :data:`DIAGNOSTIC_COLUMNS`): causal sensitivity of the perturbed
traces, the ablations, source control, and every CDD-family policy's accuracy per
perturbation type with the paper's adversarial macro average.

Accuracy and behaviour
----------------------
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

import math
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from grabrag.cdd.decisions import CDD, _unique
from grabrag.cdd.runs import ABLATIONS, PERTURBATIONS
from grabrag.cdd.schema import FULL, SOURCE_BOTH, SOURCE_CONTEXT, SOURCE_NEITHER, SOURCE_PARAMETRIC
from grabrag.cdd.trace_diagnostics import (
    CLEAN,
    OTHER_TYPES,
    PAPER_TYPES,
    causal_sensitivity,
    perturbation_type,
    row_source_control,
    sensitivity_bootstrap,
)
from grabrag.core.conditions import SHOULD_ABSTAIN, SHOULD_ANSWER
from grabrag.core.decisions import ANSWER
from grabrag.core.errors import DataError
from grabrag.core.text import normalize_answer
from grabrag.scoring import answers as A
from grabrag.scoring.bootstrap import (
    CONFIDENCE_LEVEL,
    N_RESAMPLES,
    mean_interval,
    percentile_interval,
    resample_counts,
)

# --- names ----------------------------------------------------------------------------

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
SOURCE_LABELS = (SOURCE_CONTEXT, SOURCE_PARAMETRIC, SOURCE_BOTH, SOURCE_NEITHER)
PERTURBATION_TYPES = (CLEAN, *PAPER_TYPES, *OTHER_TYPES)
ADVERSARIAL_TYPES = PAPER_TYPES
"""The types the adversarial macro average is over: the paper's that exist here."""
ACCURACY, BEHAVIOUR = "accuracy", "behaviour"

_NO_ROWS = "no rows"
_NO_ADVERSARIAL = (
    "no row of the paper's perturbation types (entity swap, temporal shift, distractor)"
)


# --- diagnostics -------------------------------------------------------------------------------


def correct(row: Mapping[str, Any] | None, gold: Sequence[str]) -> bool:
    """The CDD paper's answer accuracy of one outcome: the final answer matches a gold
    alias (EM after SQuAD normalisation, :func:`grabrag.scoring.answers.row_em`), at every
    condition. An abstention, an unparseable (decision None) or a missing outcome is
    not correct."""
    return row is not None and A.answered(row) and A.row_em(row, gold) == 1.0


def behaviour_correct(row: Mapping[str, Any] | None, condition: str, gold: Sequence[str]) -> bool:
    """GRAB-RAG's behaviour score of one outcome (``behaviour``, never called accuracy):
    an EM-correct answer at Q100/Q50, an abstention at Q0/QC/QX; an unparseable or
    missing outcome is wrong."""
    if row is None:
        return False
    if condition in SHOULD_ANSWER:
        return correct(row, gold)
    if condition in SHOULD_ABSTAIN:
        return A.abstained(row)
    raise ValueError(f"unknown condition {condition!r}")


def _changed(clean: Mapping[str, Any], other: Mapping[str, Any]) -> bool:
    """Whether a perturbed outcome differs from the clean one (decision, or answer after
    SQuAD normalisation)."""
    if clean.get("decision") != other.get("decision"):
        return True
    if clean.get("decision") != ANSWER:
        return False
    return normalize_answer(clean.get("answer") or "") != normalize_answer(
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
      agree) or neither (:func:`grabrag.cdd.trace_diagnostics.row_source_control`); value =
      count, n = answered rows.
    * ``perturbation_type`` (each policy with decisions, per type of
      :func:`grabrag.cdd.trace_diagnostics.perturbation_type`, pooling the conditions of a type):
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
                point = causal_sensitivity(float(np.mean(clean)), float(np.mean(corrupted)))
                value, low, high = sensitivity_bootstrap(
                    clean, corrupted, n_resamples, _seed(seed, dataset, condition), level
                )
                out.add(SENSITIVITY, "sensitivity", value, low, high, n, point.reason, **at)
            else:
                out.add(SENSITIVITY, "sensitivity", math.nan, n=0, reason=_NO_ROWS, **at)
            out.add(SENSITIVITY, "changed", *_mean(changed, counts, level), n, reason, **at)
    # ablations
    if runs["ablations"]:
        for variant in (FULL, *ABLATIONS):
            rows = [row if variant == FULL else row["ablations"][variant] for _, row, _ in units]
            accuracy = [correct(r, g) for r, (_, _, g) in zip(rows, units, strict=True)]
            behaviour = [
                behaviour_correct(r, c, g) for r, (c, _, g) in zip(rows, units, strict=True)
            ]
            answered = [r is not None and A.answered(r) for r in rows]
            at = {**where, "variant": variant}
            out.add(ABLATION, ACCURACY, *_mean(accuracy, counts, level), n, reason, **at)
            out.add(ABLATION, BEHAVIOUR, *_mean(behaviour, counts, level), n, reason, **at)
            out.add(ABLATION, "answer_rate", *_mean(answered, counts, level), n, reason, **at)
    # source control of the full run's answered rows
    sources = [row_source_control(row) for _, row, _ in units if A.answered(row)]
    at = {**where, "variant": FULL}
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
                kind = perturbation_type(condition, context.get("tier"))
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
