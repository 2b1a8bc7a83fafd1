"""A table across construction seeds: each number a table prints, as mean +/- sd over the
seeds' own copies of the table (EvidentialRAG's form, mean +/- sd over seeds; which sd it
uses it does not say: ours is the sample standard deviation, n - 1) and, beside it, the
same number computed over every seed's questions pooled, with its paired-bootstrap CI
where the table gives one.

Both come from tidy frames (:data:`grabrag.report.tabular.TIDY_SCHEMA`): the seeds' tidy
files, and the tidy form of the table built from the pooled metrics. A number is matched
across them by its labels (model, dataset, policy, condition, the row's other labels) and
the column it is printed in.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

import polars as pl

from grabrag.report.tabular import Number, Table

LABELS = ("model", "dataset", "policy", "condition", "row", "quantity")
MEAN_SD = "mean +/- sd"
SEEDS = "seeds"
POOLED = "pooled [95% CI]"


def _key(record: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(record[label] for label in LABELS)


def _present(value: float | None) -> bool:
    return value is not None and not math.isnan(value)


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """The mean and the sample standard deviation (n - 1; NaN for one value)."""
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else math.nan
    return mean, sd


def _mean_sd_cell(values: Sequence[float]) -> Number:
    if not values:
        return Number("n/a", None, n=0)
    mean, sd = mean_sd(values)
    text = f"{mean:.3f}" if math.isnan(sd) else f"{mean:.3f} +/- {sd:.3f}"
    return Number(text, mean, n=len(values))


def _pooled_cell(record: dict[str, Any] | None) -> Number:
    if record is None or not _present(record["estimate"]):
        return Number("n/a", None)
    estimate, low, high = record["estimate"], record["ci_low"], record["ci_high"]
    if _present(low) and _present(high):
        text = f"{estimate:.3f} [{low:.3f}, {high:.3f}]"
    else:
        low = high = None
        text = f"{estimate:.3f}"
    return Number(text, estimate, low, high, record["n"])


def across_seeds(per_seed: Sequence[tuple[int, pl.DataFrame]], pooled: pl.DataFrame) -> Table:
    """One row per number of the table (in the first seed's order, then numbers only
    other seeds have): its labels, mean +/- sd over the seeds that have it, how many did,
    and its pooled estimate [CI] (no such column where ``pooled`` is empty). Label columns
    no number uses are left out."""
    order: dict[tuple[Any, ...], dict[str, Any]] = {}
    values: dict[tuple[Any, ...], list[float]] = {}
    for _, frame in per_seed:
        for record in frame.iter_rows(named=True):
            key = _key(record)
            order.setdefault(key, record)
            if _present(record["estimate"]):
                values.setdefault(key, []).append(record["estimate"])
    pooled_by_key = {_key(record): record for record in pooled.iter_rows(named=True)}
    rows = []
    for key, record in order.items():
        found = values.get(key, [])
        row: dict[str, Any] = {label: record[label] for label in LABELS}
        row[MEAN_SD] = _mean_sd_cell(found)
        row[SEEDS] = len(found)
        if not pooled.is_empty():
            row[POOLED] = _pooled_cell(pooled_by_key.get(key))
        rows.append(row)
    used = [label for label in LABELS if any(row[label] is not None for row in rows)]
    # a table whose inputs exist per seed only (a sweep, diagnostics) has no pooled column
    columns = [*used, MEAN_SD, SEEDS, *([POOLED] if not pooled.is_empty() else [])]
    for row in rows:
        for label in LABELS:
            if label not in used:
                del row[label]
            elif row[label] is None:
                row[label] = ""
    seeds = ", ".join(str(seed) for seed, _ in per_seed)
    note = f"Seeds: {seeds}."
    return Table(rows, columns, note)
