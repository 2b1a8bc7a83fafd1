"""Metrics per cell with paired bootstrap CIs, as one tidy long table (GRAB-RAG sections
3.5, 5, 6; Appendices A, D, E).

Input: decision rows (``results/policies/<model>/<dataset>/<condition>/<policy>.jsonl``)
keyed ``(model, dataset, condition, policy)`` and context rows
(``results/contexts/<dataset>/<condition>.jsonl``) keyed ``(dataset, condition)``. Output:
one row per (model, dataset, policy, condition, metric) with the columns in
:data:`grabrag.evaluation.schema.COLUMNS`. Values are shares in [0, 1] (tables multiply by
100), except the ``qc_*`` counts and AURC/ECE. The steps: reading and checking the rows
(:mod:`grabrag.evaluation.inputs`), scoring them into per-question columns
(:mod:`grabrag.evaluation.cells`), the metric rows of each policy
(:mod:`grabrag.evaluation.metric_rows`) and their bootstrap (:mod:`grabrag.evaluation.block`).

Metrics (``condition`` column in brackets):

* ``answer_rate``, ``abstain_rate``, ``parse_failed_rate``, ``em``, ``f1`` [each
  condition]: over all rows of the cell (QC: the QC-eligible questions). ``answer_rate``
  is Ans@Q100/Ans@Q50 and, at Q0/QC, the answer rate over every question of the
  condition (Q0: all questions, as Appendix G).
* ``fac`` [Q100, Q50]: abstain rate on the capability set C_{P1,m} (questions the model
  answers correctly, EM, at Q100 under P1). NaN when there is no P1 Q100 cell or C is
  empty.
* ``hwsa`` [Q0, QC] and ``hwsa_diff`` [QC-Q0]: answer rate on the paired QC-eligible
  subset (questions with a row at both Q0 and QC), and QC - Q0 on it (Table 1, Table 7).
* ``hwsa`` [QX] and ``hwsa_diff`` [QX-QC]: answer rate at QX on the questions with rows
  at both QC and QX, and QX - QC on them (paired; QX holds exactly QC's questions).
* ``aurc``, ``ece``, ``ece_15`` [each condition, and ``all`` = the paper's four
  conditions Q100, Q50, Q0, QC pooled, Table 10; QX is not pooled in]: see
  :func:`grabrag.scoring.calibration.aurc` (ties averaged) and
  :func:`grabrag.scoring.calibration.ece`;
  unparseable rows are left out, n = rows scored.
* ``ece_answer_15`` [each condition, and ``pooled`` = every condition of the cell, QX
  included, the set the EvidentialRAG sweep pools too] for EVID, EVID_CB, P0 (naive
  RAG, the "without evidential evaluator" ablation) and P1 beside it only: EvidentialRAG's
  ECE (Eqs. 26-27), :func:`grabrag.scoring.calibration.ece_mean` with 15 equal-width bins
  compared at their mean confidence; confidence and correctness of each row's selected answer
  (:func:`grabrag.scoring.calibration.selected_answer_score`: for EVID the fused singleton
  mass of the top claim on every route, routed abstentions included). Not GRAB-RAG's ``ece_15``
  (bin midpoints, correct = the right behaviour).
* ``route_direct``, ``route_conflict_aware``, ``route_abstain`` [each condition, and
  ``pooled``] for EVID and EVID_CB: the share of rows on each route (Eq. 15).
* ``refusal_precision``, ``refusal_recall``, ``refusal_f1`` [``pooled`` = every
  condition of the cell, QX included]: EvidentialRAG Eqs. 23-25 with R = abstained and
  U = a should-abstain condition (Q0, QC, QX); a parse failure is not a refusal; see
  :func:`grabrag.scoring.abstention.refusal_scores`. n = refusals, should-abstain rows, rows.
* ``qc_answered`` [QC] (count; n = QC rows), ``qc_echo``, ``qc_override``,
  ``qc_hallucination`` (counts; n = answered QC rows; a count over an empty base is 0,
  not NaN, so counts can be summed across cells, and its reason says the base is
  empty) and ``qc_echo_share``,
  ``qc_override_share``, ``qc_hallucination_share`` (shares of answered QC rows; Table 3,
  Table 9). Matching: :func:`grabrag.scoring.answers.classify_qc_answer`, the paper's normalised
  match (the answer equals a gold alias or the planted replacement after normalisation).
  The same seven with the suffix ``_lenient`` (``qc_echo_lenient``,
  ``qc_echo_lenient_share`` ...) use containment instead (the target on word boundaries
  inside the answer).
* ``normalised_hwsa`` [QC]: HwSA at QC / Ans@Q100 (all questions), section 6. Policy
  ``mean`` rows give the paper's per-(model, dataset) form: the mean over the paper's
  policies P0-P4 of HwSA@QC divided by the mean over them of Ans@Q100 (with ``hwsa`` [QC] and
  ``answer_rate`` [Q100] means alongside); the paper then averages the datasets.
* ``em_eligible``, ``em_excluded``, ``em_gap`` [Q100]: Q100 EM on QC-eligible vs excluded
  questions and their difference (selection bias, section 6).

CIs: paired percentile bootstrap over questions (:mod:`grabrag.scoring.bootstrap`), one
multiplicity matrix per dataset drawn from ``default_rng((seed, crc32(dataset)))``:
every statistic of a dataset (all models, policies, conditions) is computed on the same
resampled questions, so all differences are paired, and a dataset's CIs do not depend on
which other datasets, models or policies are evaluated with it. Subset statistics (FAC,
HwSA on the eligible subset, shares of answered rows, the eligible/excluded EM) are
ratios of resampled sums, so their subset size varies across resamples as it would
across samples of questions. The resampled totals are float32 (twice as fast; counts are
exact, F1 sums and AURC/ECE move CI endpoints by under 1e-6); point estimates use float64.

Zero-size cases give value NaN with a ``reason`` and NaN CIs, never 0 or a crash.

Cells must be complete: a cell's qids must be exactly those of the context rows of its
(dataset, condition), or for a policy in ``question_limits`` (policy -> N: its method runs
on the first N questions only) of those rows among the first N; anything else is a
DataError naming the cell. Such a policy's rows are its own questions' (their ``n``).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from grabrag.core import registry
from grabrag.core.conditions import NAMES
from grabrag.core.errors import DataError
from grabrag.evaluation.cells import CellColumns
from grabrag.evaluation.inputs import CellKey, DatasetFrame
from grabrag.evaluation.metric_rows import mean_rows, policy_block
from grabrag.evaluation.schema import CI_UNDEFINED, DEFAULT_ECE_BINS
from grabrag.scoring.bootstrap import (
    CONFIDENCE_LEVEL,
    N_RESAMPLES,
    percentile_interval,
    resample_counts,
)


def policy_sort_key(policy: str) -> tuple[int, str]:
    """Registration order (grabrag.core.registry), then unregistered names alphabetically."""
    order = registry.names()
    return (order.index(policy) if policy in order else len(order), policy)


def dataset_seed(seed: int, dataset: str) -> tuple[int, int]:
    """The bootstrap seed of one dataset: (config seed, CRC-32 of the dataset name)."""
    return (int(seed), zlib.crc32(dataset.encode("utf-8")))


def evaluate_dataset(
    dataset: str,
    decisions: Mapping[tuple[str, str, str], Sequence[Mapping[str, Any]]],
    contexts: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    n_resamples: int = N_RESAMPLES,
    seed: int = 42,
    confidence_level: float = CONFIDENCE_LEVEL,
    ece_bins: Sequence[int] = DEFAULT_ECE_BINS,
    counts: np.ndarray | None = None,
    question_limits: Mapping[str, int] | None = None,
) -> list[dict[str, Any]]:
    """Tidy metric rows of one dataset. ``decisions``: (model, condition, policy) -> rows;
    ``contexts``: condition -> context rows. ``counts`` overrides the resample matrix
    (tests)."""
    limits = question_limits or {}
    ds = DatasetFrame(dataset, contexts)
    if counts is None:
        counts = resample_counts(ds.n, n_resamples, dataset_seed(seed, dataset), dtype=np.float32)
    elif counts.shape[1] != ds.n:
        raise ValueError(f"counts has {counts.shape[1]} columns, dataset has {ds.n} questions")
    by_model: dict[str, dict[str, dict[str, CellColumns]]] = {}
    for (model, condition, policy), rows in decisions.items():
        if condition not in NAMES:
            raise DataError(f"cell {model}/{dataset}/{condition}/{policy}: unknown condition")
        indexed = ds.cell((model, dataset, condition, policy), rows, limits.get(policy))
        by_model.setdefault(model, {}).setdefault(policy, {})[condition] = CellColumns(
            ds, condition, indexed, policy
        )
    out: list[dict[str, Any]] = []
    for model in sorted(by_model):
        policies = by_model[model]
        capability = None
        p1_q100 = policies.get("P1", {}).get("Q100")
        if p1_q100 is not None:
            capability = p1_q100.em * p1_q100.answered  # EM is 0 unless answered
        for policy in sorted(policies, key=policy_sort_key):
            cells = {c: policies[policy][c] for c in NAMES if c in policies[policy]}
            block = policy_block(cells, capability, ds.eligible.astype(float), ece_bins, ds.n)
            head = {"model": model, "dataset": dataset, "policy": policy}
            out.extend(block.run(counts, confidence_level, head))
        out.extend(mean_rows(model, dataset, policies, counts, confidence_level))
    return out


def evaluate(
    decisions: Mapping[CellKey, Sequence[Mapping[str, Any]]],
    contexts: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]],
    *,
    n_resamples: int = N_RESAMPLES,
    seed: int = 42,
    confidence_level: float = CONFIDENCE_LEVEL,
    ece_bins: Sequence[int] = DEFAULT_ECE_BINS,
    question_limits: Mapping[str, int] | None = None,
) -> list[dict[str, Any]]:
    """The tidy metric table (rows with :data:`~grabrag.evaluation.schema.COLUMNS`) of
    every cell in ``decisions``.

    ``decisions``: (model, dataset, condition, policy) -> decision rows;
    ``contexts``: (dataset, condition) -> context rows. Each dataset is evaluated with
    :func:`evaluate_dataset` (its own resample matrix).
    """
    datasets = sorted({key[1] for key in decisions})
    out: list[dict[str, Any]] = []
    for dataset in datasets:
        cells = {
            (model, condition, policy): rows
            for (model, d, condition, policy), rows in decisions.items()
            if d == dataset
        }
        ctx = {condition: rows for (d, condition), rows in contexts.items() if d == dataset}
        if not ctx:
            raise DataError(f"no context rows for dataset {dataset}")
        out.extend(
            evaluate_dataset(
                dataset,
                cells,
                ctx,
                n_resamples=n_resamples,
                seed=seed,
                confidence_level=confidence_level,
                ece_bins=ece_bins,
                question_limits=question_limits,
            )
        )
    return out


def abstention_over_datasets(
    decisions: Mapping[CellKey, Sequence[Mapping[str, Any]]],
    contexts: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]],
    *,
    n_resamples: int = N_RESAMPLES,
    seed: int = 42,
    confidence_level: float = CONFIDENCE_LEVEL,
    question_limits: Mapping[str, int] | None = None,
) -> list[dict[str, Any]]:
    """Figure 2's numbers: the abstention rate of each (model, policy, condition) averaged
    over the datasets that have that cell, with a percentile bootstrap CI.

    Each dataset is resampled with its own multiplicity matrix, the one its metrics use
    (same seed, so a one-dataset mean has exactly that dataset's CI). The datasets are
    independent samples of questions, so a resample of the mean is the mean of the
    datasets' resampled rates. Rows have :data:`~grabrag.evaluation.schema.COLUMNS`;
    ``dataset`` names the averaged datasets joined by "+", ``n`` is the number of rows
    (questions) over them.
    """
    draws: dict[tuple[str, str, str], list[tuple[str, float, np.ndarray, int]]] = {}
    for dataset in sorted({key[1] for key in decisions}):
        ctx = {c: rows for (d, c), rows in contexts.items() if d == dataset}
        if not ctx:
            raise DataError(f"no context rows for dataset {dataset}")
        ds = DatasetFrame(dataset, ctx)
        counts = resample_counts(ds.n, n_resamples, dataset_seed(seed, dataset), dtype=np.float32)
        for (model, d, condition, policy), rows in decisions.items():
            if d != dataset:
                continue
            if condition not in NAMES:
                raise DataError(f"cell {model}/{dataset}/{condition}/{policy}: unknown condition")
            limit = (question_limits or {}).get(policy)
            cell = CellColumns(
                ds, condition, ds.cell((model, dataset, condition, policy), rows, limit)
            )
            present = int(cell.present.sum())
            if present == 0:
                continue  # e.g. QC of a dataset without QC-eligible questions
            with np.errstate(invalid="ignore", divide="ignore"):
                resampled = (counts @ cell.abstained.astype(np.float32)) / (
                    counts @ cell.present.astype(np.float32)
                )
            point = float(cell.abstained.sum()) / present
            draws.setdefault((model, policy, condition), []).append(
                (dataset, point, resampled, present)
            )
    out = []
    for (model, policy, condition), parts in sorted(
        draws.items(),
        key=lambda item: (
            item[0][0],
            policy_sort_key(item[0][1]),
            NAMES.index(item[0][2]),
        ),
    ):
        value = float(np.mean([point for _, point, _, _ in parts]))
        mean_draws = np.mean(np.stack([r for _, _, r, _ in parts]), axis=0)
        low, high, _ = percentile_interval(mean_draws, confidence_level)
        interval_ok = bool(np.isfinite(low[0]) and np.isfinite(high[0]))
        out.append(
            {
                "model": model,
                "dataset": "+".join(d for d, _, _, _ in parts),
                "policy": policy,
                "condition": condition,
                "metric": "abstain_rate",
                "value": value,
                "ci_low": float(low[0]),
                "ci_high": float(high[0]),
                "n": sum(n for _, _, _, n in parts),
                "reason": None if interval_ok else CI_UNDEFINED,
            }
        )
    return out
