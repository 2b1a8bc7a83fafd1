"""Metrics per cell with paired bootstrap CIs, as one tidy long table (GRAB-RAG sections
3.5, 5, 6; Appendices A, D, E).

Input: decision rows (``results/policies/<model>/<dataset>/<condition>/<policy>.jsonl``)
keyed ``(model, dataset, condition, policy)`` and context rows
(``results/contexts/<dataset>/<condition>.jsonl``) keyed ``(dataset, condition)``. Output:
one row per (model, dataset, policy, condition, metric) with the columns in
:data:`COLUMNS`. Values are shares in [0, 1] (tables multiply by 100), except the
``qc_*`` counts and AURC/ECE.

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
  :func:`grabrag.scoring.metrics.aurc` (ties averaged) and :func:`grabrag.scoring.metrics.ece`;
  unparseable rows are left out, n = rows scored.
* ``ece_answer_15`` [each condition, and ``pooled`` = every condition of the cell, QX
  included, the set the EvidentialRAG sweep pools too] for EVID, EVID_CB, P0 (naive
  RAG, the "without evidential evaluator" ablation) and P1 beside it only: EvidentialRAG's
  ECE (Eqs. 26-27), :func:`grabrag.scoring.metrics.ece_mean` with 15 equal-width bins
  compared at their mean confidence; confidence and correctness of each row's selected answer
  (:func:`grabrag.scoring.metrics.selected_answer_score`: for EVID the fused singleton mass of the
  top claim on every route, routed abstentions included). Not GRAB-RAG's ``ece_15``
  (bin midpoints, correct = the right behaviour).
* ``route_direct``, ``route_conflict_aware``, ``route_abstain`` [each condition, and
  ``pooled``] for EVID and EVID_CB: the share of rows on each route (Eq. 15).
* ``refusal_precision``, ``refusal_recall``, ``refusal_f1`` [``pooled`` = every
  condition of the cell, QX included]: EvidentialRAG Eqs. 23-25 with R = abstained and
  U = a should-abstain condition (Q0, QC, QX); a parse failure is not a refusal; see
  :func:`grabrag.scoring.metrics.refusal_scores`. n = refusals, should-abstain rows, rows.
* ``qc_answered`` [QC] (count; n = QC rows), ``qc_echo``, ``qc_override``,
  ``qc_hallucination`` (counts; n = answered QC rows; a count over an empty base is 0,
  not NaN, so counts can be summed across cells, and its reason says the base is
  empty) and ``qc_echo_share``,
  ``qc_override_share``, ``qc_hallucination_share`` (shares of answered QC rows; Table 3,
  Table 9). Matching: :func:`grabrag.scoring.metrics.classify_qc_answer`, the paper's normalised
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
(dataset, condition); anything else is a DataError naming the cell.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from grabrag.core import registry
from grabrag.core.conditions import NAMES, PAPER, SHOULD_ABSTAIN, SHOULD_ANSWER
from grabrag.core.errors import DataError
from grabrag.core.io import read_jsonl
from grabrag.scoring import metrics as M
from grabrag.scoring.bootstrap import (
    CONFIDENCE_LEVEL,
    N_RESAMPLES,
    bootstrap_totals,
    percentile_interval,
    ratio,
    resample_counts,
)

COLUMNS = (
    "model",
    "dataset",
    "policy",
    "condition",
    "metric",
    "value",
    "ci_low",
    "ci_high",
    "n",
    "reason",
)
# The paper's four conditions (conditions.PAPER): ``all`` (Table 10's pooled AURC/ECE)
# pools these only, so adding QX leaves the paper's tables as they were.
ALL = "all"
POOLED = "pooled"
DIFF = "QC-Q0"
DIFF_QX = "QX-QC"
MEAN_POLICY = "mean"
DEFAULT_ECE_BINS = (10, 15)
# EvidentialRAG's ECE (Eqs. 26-27): its policies, P0 as the paper's naive RAG (no
# abstention controller) and P1 (GRAB-RAG's abstention prompt) beside them.
ANSWER_ECE_POLICIES = ("P0", "P1", "EVID", "EVID_CB")
ANSWER_ECE_BINS = 15
ANSWER_ECE = "ece_answer_15"
ROUTED_POLICIES = ("EVID", "EVID_CB")
ROUTES = ("direct", "conflict_aware", "abstain")

CellKey = tuple[str, str, str, str]  # (model, dataset, condition, policy)

_NO_ROWS = "no rows in this cell"
_NO_SCORED = "no evaluated rows (every row unparseable or without a confidence)"
_NO_P1 = "no P1 Q100 cell for this model and dataset: the capability set is undefined"
_EMPTY_CAP = "empty capability set: the model answers no question correctly (EM) at Q100 under P1"
_NO_PAIR = "no QC-eligible question with rows at both Q0 and QC"
_NO_PAIR_QX = "no question with rows at both QC and QX"
_NO_ANSWERED = "no answered QC rows"
_NO_QC = "no QC rows (no QC-eligible questions)"
_NO_NORMALISE = "no QC rows, or the Q100 answer rate is 0 (nothing to normalise by)"
_NO_ELIGIBLE = "no QC-eligible question in the Q100 cell"
_NO_EXCLUDED = "no question excluded from QC in the Q100 cell"
_CI_UNDEFINED = "CI undefined: the statistic is undefined in most resamples"


def ece_metric(n_bins: int) -> str:
    return "ece" if n_bins == 10 else f"ece_{n_bins}"


# --- loading (the only file access) -------------------------------------------------------


def read_decision_files(
    cells: Iterable[tuple[Mapping[str, str], str | Path]],
) -> dict[CellKey, list[dict[str, Any]]]:
    """Decision rows keyed (model, dataset, condition, policy), from (cell, path) pairs
    whose cell names its ``model``, ``dataset``, ``condition`` and ``policy``."""
    return {
        (c["model"], c["dataset"], c["condition"], c["policy"]): read_jsonl(path)
        for c, path in cells
    }


def read_context_files(
    cells: Iterable[tuple[Mapping[str, str], str | Path]],
) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Context rows keyed (dataset, condition), from (cell, path) pairs whose cell names
    its ``dataset`` and ``condition``."""
    return {(c["dataset"], c["condition"]): read_jsonl(path) for c, path in cells}


# --- the dataset frame: questions, gold, eligibility ------------------------------------------


class _Dataset:
    """Questions of one dataset in a fixed order, their gold answers and QC eligibility."""

    def __init__(self, dataset: str, contexts: Mapping[str, Sequence[Mapping[str, Any]]]):
        self.name = dataset
        self.by_condition: dict[str, dict[str, Mapping[str, Any]]] = {}
        for condition, rows in contexts.items():
            index: dict[str, Mapping[str, Any]] = {}
            for position, row in enumerate(rows, start=1):
                if "qid" not in row or "answers" not in row:
                    raise DataError(
                        f"context rows of {dataset}/{condition}, row {position}: "
                        "'qid' or 'answers' is missing"
                    )
                if row["qid"] in index:
                    raise DataError(
                        f"context rows of {dataset}/{condition}: qid {row['qid']} twice"
                    )
                index[row["qid"]] = row
            self.by_condition[condition] = index
        if not self.by_condition:
            raise DataError(f"no context rows for dataset {dataset}")
        order: dict[str, tuple[int, str]] = {}
        for condition in (*NAMES, *self.by_condition):
            for qid, row in self.by_condition.get(condition, {}).items():
                index_value = row.get("index")
                order.setdefault(
                    qid, (index_value if isinstance(index_value, int) else 10**12, qid)
                )
        self.qids = sorted(order, key=order.__getitem__)
        self.position = {qid: i for i, qid in enumerate(self.qids)}
        self.n = len(self.qids)
        self.gold: dict[str, list[str]] = {}
        for condition in reversed(list(self.by_condition)):
            for qid, row in self.by_condition[condition].items():
                self.gold[qid] = list(row["answers"])
        self.qc = self.by_condition.get("QC", {})
        self.eligible = np.zeros(self.n, dtype=bool)
        for qid in self.qc:
            self.eligible[self.position[qid]] = True

    def cell(self, key: CellKey, rows: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
        """Rows of a cell indexed by qid; they must cover its condition's questions exactly."""
        model, dataset, condition, policy = key
        label = f"cell {model}/{dataset}/{condition}/{policy}"
        if condition not in self.by_condition:
            raise DataError(f"{label}: no context rows for {dataset}/{condition}")
        expected = self.by_condition[condition]
        index: dict[str, Mapping[str, Any]] = {}
        for position, row in enumerate(rows, start=1):
            for column in ("qid", "decision"):
                if column not in row:
                    raise DataError(f"{label}, row {position}: column {column!r} is missing")
            qid = row["qid"]
            if qid in index:
                raise DataError(f"{label}: qid {qid} appears more than once")
            if row.get("condition") not in (None, condition):
                raise DataError(f"{label}: qid {qid} has condition {row['condition']!r}")
            if row.get("policy") not in (None, policy):
                raise DataError(f"{label}: qid {qid} has policy {row['policy']!r}")
            if row["decision"] not in (M.ANSWER, M.ABSTAIN, None):
                raise DataError(f"{label}: qid {qid} has unknown decision {row['decision']!r}")
            index[qid] = row
        unknown = [q for q in index if q not in expected]
        missing = [q for q in expected if q not in index]
        if unknown or missing:
            raise DataError(
                f"{label}: rows do not match the context rows of {dataset}/{condition} "
                f"({len(missing)} questions missing, e.g. {missing[:3]}; {len(unknown)} unknown, "
                f"e.g. {unknown[:3]}); rerun the rule that writes this cell"
            )
        return index


# --- per-question columns of one cell ------------------------------------------------------


class _Cell:
    """Per-question indicator columns of one (model, dataset, condition, policy) cell."""

    def __init__(
        self,
        ds: _Dataset,
        condition: str,
        rows: Mapping[str, Mapping[str, Any]],
        policy: str | None = None,
    ):
        n = ds.n
        self.condition = condition
        # EvidentialRAG's ECE: per question, rows / correct rows / summed [0, 1] confidence
        # in each of the 15 bins (None: not computed for this policy).
        self.answer_bins: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        if policy in ANSWER_ECE_POLICIES:
            self.answer_bins = tuple(np.zeros((n, ANSWER_ECE_BINS)) for _ in range(3))
        self.routes: dict[str, np.ndarray] | None = None
        if policy in ROUTED_POLICIES:
            self.routes = {route: np.zeros(n) for route in ROUTES}
        self.present = np.zeros(n)
        self.answered = np.zeros(n)
        self.abstained = np.zeros(n)
        self.failed = np.zeros(n)
        self.em = np.zeros(n)
        self.f1 = np.zeros(n)
        self.category = {c: np.zeros(n) for c in M.QC_CATEGORIES}
        self.lenient = {c: np.zeros(n) for c in M.QC_CATEGORIES}
        self.scored: list[tuple[int, float, int]] = []  # (position, confidence, correct)
        for qid, row in rows.items():
            i = ds.position[qid]
            gold = ds.gold[qid]
            self.present[i] = 1
            self.answered[i] = M.answered(row)
            self.abstained[i] = M.abstained(row)
            self.failed[i] = M.parse_failed(row)
            self.em[i] = M.row_em(row, gold)
            self.f1[i] = M.row_f1(row, gold)
            if self.routes is not None and "fused_confidence" not in row:
                raise DataError(
                    f"qid {qid}: EvidentialRAG decision row without fused_confidence (written "
                    "by an older version); rerun the policy rule"
                )
            if self.answer_bins is not None:
                scored = M.selected_answer_score(row, gold)
                if scored is not None:
                    confidence, correct = scored
                    if not 0 <= confidence <= 100:
                        raise DataError(f"qid {qid}: confidence {confidence} is outside 0-100")
                    b = int(M.ece_bin_index(np.array([confidence]), ANSWER_ECE_BINS)[0])
                    rows_in, correct_in, conf_in = self.answer_bins
                    rows_in[i, b] += 1
                    correct_in[i, b] += correct
                    conf_in[i, b] += confidence / M.CONFIDENCE_SCALE
            if self.routes is not None:
                if row.get("route") not in self.routes:
                    raise DataError(f"qid {qid}: unknown route {row.get('route')!r}")
                self.routes[row["route"]][i] = 1
            y = M.row_correct(row, gold, condition)
            if y is not None:
                confidence = float(row["confidence"])
                if not 0 <= confidence <= 100:
                    raise DataError(f"qid {qid}: confidence {confidence} is outside 0-100")
                self.scored.append((i, confidence, y))
            if condition == "QC" and M.answered(row):
                context = ds.qc[qid]
                planted = M.planted_strings(context)
                answer = row.get("answer")
                category = M.classify_qc_answer(answer, context["answers"], planted)
                self.category[category][i] = 1
                lenient = M.classify_qc_answer(answer, context["answers"], planted, True)
                self.lenient[lenient][i] = 1

    def grid(self) -> np.ndarray:
        """The confidence levels this cell uses, descending."""
        return np.array(sorted({conf for _, conf, _ in self.scored}, reverse=True), dtype=float)

    def levels(self, grid: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """n x L rows and correct rows per confidence level of ``grid`` (descending)."""
        rows_at = np.zeros((n, len(grid)))
        correct_at = np.zeros((n, len(grid)))
        where = {level: j for j, level in enumerate(grid)}
        for i, confidence, y in self.scored:
            rows_at[i, where[confidence]] += 1
            correct_at[i, where[confidence]] += y
        return rows_at, correct_at


# --- statistics of one (model, dataset, policy) block ------------------------------------------

Totals = Mapping[str, np.ndarray]
Fn = Callable[[Totals], np.ndarray]


class _Block:
    """Columns, shared derived totals and output rows (specs) of one bootstrap block."""

    def __init__(self) -> None:
        self.columns: dict[str, np.ndarray] = {}
        self.derived: dict[str, Fn] = {}
        self.specs: list[tuple[str, str, Fn, Fn, str, bool]] = []

    def add(
        self, metric: str, condition: str, stat: Fn, size: Fn, reason: str, count: bool = False
    ) -> None:
        """One output row: ``stat`` of the totals; ``size`` gives its n; ``reason`` says
        why it is NaN when it is. A ``count`` is 0 (not NaN) over an empty base, and then
        carries the reason too."""
        self.specs.append((metric, condition, stat, size, reason, count))

    def run(
        self, counts: np.ndarray, confidence_level: float, head: Mapping[str, str]
    ) -> list[dict[str, Any]]:
        stats = {str(j): spec[2] for j, spec in enumerate(self.specs)}
        results = bootstrap_totals(
            self.columns, stats, counts, confidence_level, derived=self.derived
        )
        # The point totals again (R = 1), for each row's n.
        point: dict[str, np.ndarray] = {
            k: np.asarray(v, dtype=float).sum(axis=0, keepdims=True)
            for k, v in self.columns.items()
        }
        for name, make in self.derived.items():
            point[name] = make(point)
        out = []
        for j, (metric, condition, _, size, reason_if_nan, count) in enumerate(self.specs):
            interval = results[str(j)]
            value, low, high, reason = interval.value, interval.low, interval.high, None
            n = int(round(float(np.asarray(size(point)).reshape(-1)[0])))
            if count and n == 0:
                reason = reason_if_nan
            elif not math.isfinite(value):
                value, low, high, reason = math.nan, math.nan, math.nan, reason_if_nan
            elif not (math.isfinite(low) and math.isfinite(high)):
                reason = _CI_UNDEFINED
            out.append(
                {
                    **head,
                    "condition": condition,
                    "metric": metric,
                    "value": value,
                    "ci_low": low,
                    "ci_high": high,
                    "n": n,
                    "reason": reason,
                }
            )
        return out


def _rate(num: str, den: str) -> Fn:
    return lambda t: ratio(t[num], t[den])


def _total(name: str) -> Fn:
    return lambda t: np.asarray(t[name], dtype=float)


def _nan_like(name: str) -> Fn:
    return lambda t: np.full(np.shape(t[name]), np.nan)


def _pooled(keys: Sequence[str]) -> Fn:
    def pooled(t: Totals) -> np.ndarray:
        out = t[keys[0]].copy()
        for key in keys[1:]:
            out += t[key]
        return out

    return pooled


def _harmonic_mean(p: np.ndarray, r: np.ndarray) -> np.ndarray:
    """2PR / (P + R) elementwise: NaN where either is NaN, 0 where both are 0 (Eq. 25)."""
    p, r = np.asarray(p, dtype=float), np.asarray(r, dtype=float)
    total = p + r
    out = np.where(total > 0, 2 * p * r / np.where(total > 0, total, 1.0), 0.0)
    return np.where(np.isnan(total), np.nan, out)


def _positive(x: np.ndarray) -> np.ndarray:
    """NaN where x is 0 (a zero Q100 answer rate cannot normalise)."""
    return np.where(x > 0, x, np.nan)


def _block(
    cells: Mapping[str, _Cell],
    capability: np.ndarray | None,
    eligible: np.ndarray,
    ece_bins: Sequence[int],
    n: int,
) -> _Block:
    block = _Block()
    cols, add = block.columns, block.add

    for c, cell in cells.items():
        for column in ("present", "answered", "abstained", "failed", "em", "f1"):
            cols[f"{c}.{column}"] = getattr(cell, column)
        present = _total(f"{c}.present")
        for metric, column in (
            ("answer_rate", "answered"),
            ("abstain_rate", "abstained"),
            ("parse_failed_rate", "failed"),
            ("em", "em"),
            ("f1", "f1"),
        ):
            add(metric, c, _rate(f"{c}.{column}", f"{c}.present"), present, _NO_ROWS)
        if c in SHOULD_ANSWER:
            if capability is None:
                add("fac", c, _nan_like(f"{c}.present"), lambda t: 0, _NO_P1)
            else:
                cols[f"{c}.cap"] = cell.present * capability
                cols[f"{c}.cap_abstained"] = cell.abstained * capability
                fac = _rate(f"{c}.cap_abstained", f"{c}.cap")
                add("fac", c, fac, _total(f"{c}.cap"), _EMPTY_CAP)
        if c == "QC":
            add("qc_answered", c, _total("QC.answered"), present, _NO_QC, count=True)
            answered = _total("QC.answered")
            for split, suffix in ((cell.category, ""), (cell.lenient, "_lenient")):
                for category in M.QC_CATEGORIES:
                    key = f"QC.{category}{suffix}"
                    cols[key] = split[category]
                    count = _total(key)
                    add(f"qc_{category}{suffix}", c, count, answered, _NO_ANSWERED, count=True)
                    share = _rate(key, "QC.answered")
                    add(f"qc_{category}{suffix}_share", c, share, answered, _NO_ANSWERED)

    # AURC / ECE per condition and pooled over the block's conditions (Table 10), all on
    # one grid: the confidence levels any of the block's cells uses, descending. A level a
    # cell does not use is a zero column (no rows there), which changes neither metric.
    grid = np.array(
        sorted({x for cell in cells.values() for x in cell.grid()}, reverse=True), dtype=float
    )
    groups: list[tuple[str, str, str]] = []
    for c, cell in cells.items():
        cols[f"{c}.N"], cols[f"{c}.C"] = cell.levels(grid, n)
        groups.append((c, f"{c}.N", f"{c}.C"))
    paper = [c for c in cells if c in PAPER]
    if paper:
        block.derived["all.N"] = _pooled([f"{c}.N" for c in paper])
        block.derived["all.C"] = _pooled([f"{c}.C" for c in paper])
        groups.append((ALL, "all.N", "all.C"))
    for label, rows_at, correct_at in groups:

        def size(t: Totals, key: str = rows_at) -> np.ndarray:
            return t[key].sum(axis=-1)

        def aurc(t: Totals, r: str = rows_at, k: str = correct_at) -> np.ndarray:
            return M.aurc_from_levels(t[r], t[k])

        add("aurc", label, aurc, size, _NO_SCORED)
        for bins in ece_bins:

            def ece(
                t: Totals, r: str = rows_at, k: str = correct_at, g=grid, b: int = bins
            ) -> np.ndarray:
                return M.ece_from_levels(g, t[r], t[k], b)

            add(ece_metric(bins), label, ece, size, _NO_SCORED)

    # EvidentialRAG's ECE (Eqs. 26-27) per condition and pooled over every condition of
    # the cell (QX included, as the sweep's pooled rows), and the route shares.
    scored = {c: cell for c, cell in cells.items() if cell.answer_bins is not None}
    for c, cell in scored.items():
        for part, array in zip(("AN", "AC", "AS"), cell.answer_bins, strict=True):
            cols[f"{c}.{part}"] = array
    answer_groups = [(c, [c]) for c in scored]
    if scored:
        answer_groups.append((POOLED, list(scored)))
    for label, members in answer_groups:

        def answer_ece(t: Totals, m: Sequence[str] = members) -> np.ndarray:
            sums = [sum(t[f"{c}.{part}"] for c in m) for part in ("AN", "AC", "AS")]
            return M.ece_mean_from_bins(*sums)

        def answer_size(t: Totals, m: Sequence[str] = members) -> np.ndarray:
            return sum(t[f"{c}.AN"] for c in m).sum(axis=-1)

        add(ANSWER_ECE, label, answer_ece, answer_size, _NO_SCORED)
    routed = {c: cell for c, cell in cells.items() if cell.routes is not None}
    for c, cell in routed.items():
        for route in ROUTES:
            cols[f"{c}.route_{route}"] = cell.routes[route]
    route_groups = [(c, [c]) for c in routed]
    if routed:
        route_groups.append((POOLED, list(routed)))
    for label, members in route_groups:
        size = _pooled([f"{c}.present" for c in members])
        for route in ROUTES:
            share = _pooled([f"{c}.route_{route}" for c in members])

            def route_share(t: Totals, num: Fn = share, den: Fn = size) -> np.ndarray:
                return ratio(num(t), den(t))

            add(f"route_{route}", label, route_share, size, _NO_ROWS)

    # HwSA on the paired QC-eligible subset, and QC - Q0 (Table 1, Table 7).
    if "Q0" in cells and "QC" in cells:
        pair = cells["Q0"].present * cells["QC"].present
        cols["pair"] = pair
        cols["pair.Q0"] = pair * cells["Q0"].answered
        cols["pair.QC"] = pair * cells["QC"].answered
        size = _total("pair")
        add("hwsa", "Q0", _rate("pair.Q0", "pair"), size, _NO_PAIR)
        add("hwsa", "QC", _rate("pair.QC", "pair"), size, _NO_PAIR)
        add(
            "hwsa_diff",
            DIFF,
            lambda t: ratio(t["pair.QC"] - t["pair.Q0"], t["pair"]),
            size,
            _NO_PAIR,
        )

    # QX vs QC on the questions present in both (the inter-context conflict).
    if "QC" in cells and "QX" in cells:
        pair = cells["QC"].present * cells["QX"].present
        cols["pairx"] = pair
        cols["pairx.QC"] = pair * cells["QC"].answered
        cols["pairx.QX"] = pair * cells["QX"].answered
        size = _total("pairx")
        add("hwsa", "QX", _rate("pairx.QX", "pairx"), size, _NO_PAIR_QX)
        add(
            "hwsa_diff",
            DIFF_QX,
            lambda t: ratio(t["pairx.QX"] - t["pairx.QC"], t["pairx"]),
            size,
            _NO_PAIR_QX,
        )

    # Refusal precision / recall / F1 pooled over every condition of the cell.
    if cells:
        refused = [f"{c}.abstained" for c in cells]
        should = [c for c in cells if c in SHOULD_ABSTAIN]
        block.derived["refusal.R"] = _pooled(refused)
        block.derived["refusal.all"] = _pooled([f"{c}.present" for c in cells])
        if should:
            block.derived["refusal.U"] = _pooled([f"{c}.present" for c in should])
            block.derived["refusal.RU"] = _pooled([f"{c}.abstained" for c in should])
        else:
            block.derived["refusal.U"] = lambda t: np.zeros_like(t["refusal.R"])
            block.derived["refusal.RU"] = lambda t: np.zeros_like(t["refusal.R"])
        precision = _rate("refusal.RU", "refusal.R")
        recall = _rate("refusal.RU", "refusal.U")
        add("refusal_precision", POOLED, precision, _total("refusal.R"), M.NO_REFUSAL)
        add("refusal_recall", POOLED, recall, _total("refusal.U"), M.NO_SHOULD_ABSTAIN)
        add(
            "refusal_f1",
            POOLED,
            lambda t: _harmonic_mean(precision(t), recall(t)),
            _total("refusal.all"),
            f"{M.NO_REFUSAL}, or {M.NO_SHOULD_ABSTAIN}",
        )

    # Section 6: QC HwSA normalised by the Q100 answer rate (all questions).
    if "QC" in cells and "Q100" in cells:
        add(
            "normalised_hwsa",
            "QC",
            lambda t: ratio(
                ratio(t["QC.answered"], t["QC.present"]),
                _positive(ratio(t["Q100.answered"], t["Q100.present"])),
            ),
            _total("QC.present"),
            _NO_NORMALISE,
        )

    # Section 6 selection bias: Q100 EM on QC-eligible vs excluded questions.
    if "Q100" in cells:
        q100 = cells["Q100"]
        cols["elig"] = q100.present * eligible
        cols["elig.em"] = q100.em * eligible
        cols["excl"] = q100.present * (1 - eligible)
        cols["excl.em"] = q100.em * (1 - eligible)
        add("em_eligible", "Q100", _rate("elig.em", "elig"), _total("elig"), _NO_ELIGIBLE)
        add("em_excluded", "Q100", _rate("excl.em", "excl"), _total("excl"), _NO_EXCLUDED)
        add(
            "em_gap",
            "Q100",
            lambda t: ratio(t["elig.em"], t["elig"]) - ratio(t["excl.em"], t["excl"]),
            lambda t: t["elig"] + t["excl"],
            f"{_NO_ELIGIBLE}, or {_NO_EXCLUDED}",
        )
    return block


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
) -> list[dict[str, Any]]:
    """Tidy metric rows of one dataset. ``decisions``: (model, condition, policy) -> rows;
    ``contexts``: condition -> context rows. ``counts`` overrides the resample matrix
    (tests)."""
    ds = _Dataset(dataset, contexts)
    if counts is None:
        counts = resample_counts(ds.n, n_resamples, dataset_seed(seed, dataset), dtype=np.float32)
    elif counts.shape[1] != ds.n:
        raise ValueError(f"counts has {counts.shape[1]} columns, dataset has {ds.n} questions")
    by_model: dict[str, dict[str, dict[str, _Cell]]] = {}
    for (model, condition, policy), rows in decisions.items():
        if condition not in NAMES:
            raise DataError(f"cell {model}/{dataset}/{condition}/{policy}: unknown condition")
        indexed = ds.cell((model, dataset, condition, policy), rows)
        by_model.setdefault(model, {}).setdefault(policy, {})[condition] = _Cell(
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
            block = _block(cells, capability, ds.eligible.astype(float), ece_bins, ds.n)
            head = {"model": model, "dataset": dataset, "policy": policy}
            out.extend(block.run(counts, confidence_level, head))
        out.extend(_mean_block(model, dataset, policies, counts, confidence_level))
    return out


def _mean_block(
    model: str,
    dataset: str,
    policies: Mapping[str, Mapping[str, _Cell]],
    counts: np.ndarray,
    confidence_level: float,
) -> list[dict[str, Any]]:
    """Policy-mean HwSA@QC, Ans@Q100 and their ratio (section 6's normalised HwSA)."""
    # The paper's policies only: adding EVID / EVID_CB must not move section 6's mean.
    chosen = [
        p
        for p in policies
        if p in registry.PAPER_POLICIES and "QC" in policies[p] and "Q100" in policies[p]
    ]
    if not chosen:
        return []
    qc = [policies[p]["QC"] for p in chosen]
    q100 = [policies[p]["Q100"] for p in chosen]
    # Complete cells (checked in _Dataset.cell) share one question set per condition, so the
    # mean over policies of the rates is the rate of the mean answered column.
    block = _Block()
    block.columns.update(
        {
            "qc.answered": np.mean([c.answered for c in qc], axis=0),
            "qc.present": qc[0].present,
            "q100.answered": np.mean([c.answered for c in q100], axis=0),
            "q100.present": q100[0].present,
        }
    )
    hwsa_qc = _rate("qc.answered", "qc.present")
    ans_q100 = _rate("q100.answered", "q100.present")
    block.add("hwsa", "QC", hwsa_qc, _total("qc.present"), _NO_QC)
    block.add("answer_rate", "Q100", ans_q100, _total("q100.present"), _NO_ROWS)
    block.add(
        "normalised_hwsa",
        "QC",
        lambda t: ratio(hwsa_qc(t), _positive(ans_q100(t))),
        _total("qc.present"),
        _NO_NORMALISE,
    )
    head = {"model": model, "dataset": dataset, "policy": MEAN_POLICY}
    return block.run(counts, confidence_level, head)


def evaluate(
    decisions: Mapping[CellKey, Sequence[Mapping[str, Any]]],
    contexts: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]],
    *,
    n_resamples: int = N_RESAMPLES,
    seed: int = 42,
    confidence_level: float = CONFIDENCE_LEVEL,
    ece_bins: Sequence[int] = DEFAULT_ECE_BINS,
) -> list[dict[str, Any]]:
    """The tidy metric table (rows with :data:`COLUMNS`) of every cell in ``decisions``.

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
) -> list[dict[str, Any]]:
    """Figure 2's numbers: the abstention rate of each (model, policy, condition) averaged
    over the datasets that have that cell, with a percentile bootstrap CI.

    Each dataset is resampled with its own multiplicity matrix, the one its metrics use
    (same seed, so a one-dataset mean has exactly that dataset's CI). The datasets are
    independent samples of questions, so a resample of the mean is the mean of the
    datasets' resampled rates. Rows have :data:`COLUMNS`; ``dataset`` names the averaged
    datasets joined by "+", ``n`` is the number of rows (questions) over them.
    """
    draws: dict[tuple[str, str, str], list[tuple[str, float, np.ndarray, int]]] = {}
    for dataset in sorted({key[1] for key in decisions}):
        ctx = {c: rows for (d, c), rows in contexts.items() if d == dataset}
        if not ctx:
            raise DataError(f"no context rows for dataset {dataset}")
        ds = _Dataset(dataset, ctx)
        counts = resample_counts(ds.n, n_resamples, dataset_seed(seed, dataset), dtype=np.float32)
        for (model, d, condition, policy), rows in decisions.items():
            if d != dataset:
                continue
            if condition not in NAMES:
                raise DataError(f"cell {model}/{dataset}/{condition}/{policy}: unknown condition")
            cell = _Cell(ds, condition, ds.cell((model, dataset, condition, policy), rows))
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
                "reason": None if interval_ok else _CI_UNDEFINED,
            }
        )
    return out
