"""The cells of the paper's tables and the metric rows behind them, shared by every table
builder (:mod:`grabrag.report.grabrag_tables`, ``p3_tables``, ``audit_tables``,
``evidential_tables`` and ``cdd_tables``).

Numbers are percentages with one decimal, as in the paper; CIs are "[low, high]". Each
printed number is a :class:`~grabrag.report.tabular.Number` that keeps its estimate, CI
and n for the tidy file. The lookups read the tidy metric table (one row per model x
dataset x policy x condition x metric with its bootstrap CI) as polars reads the CSVs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np
import polars as pl

from grabrag.core import registry
from grabrag.report.tabular import Number, Table, cell_order

NOT_AVAILABLE = Number("n/a", None)  # a number the data cannot give (no rows to rate)


def _nan(value: float | None) -> bool:
    return value is None or math.isnan(value)


def pct(value: float | None, n: int | None = None) -> Number:
    return Number("n/a" if _nan(value) else f"{100 * value:.1f}", value, n=n)


def _whole_percent(fraction: float) -> int:
    """``fraction`` in percent rounded half up to a whole number (0.475 -> 48), as the
    paper prints Table 1's CI bounds; rounded to 6 decimals first so 0.475 * 100 =
    47.49999... still rounds up."""
    return math.floor(round(100 * fraction, 6) + 0.5)


def pct_ci(
    value: float | None,
    low: float | None,
    high: float | None,
    signed: bool = False,
    n: int | None = None,
    whole_bounds: bool = False,
) -> Number:
    """ "12.5 [8.1, 17.0]" in percent; ``signed`` prints a sign on every number;
    ``whole_bounds`` prints the bounds as whole percents without a sign, as the paper's
    Table 1 does ("+55.0 [48, 62]")."""
    if _nan(value):
        return Number("n/a", None, n=n)
    sign = "+" if signed else ""
    if _nan(low) or _nan(high):
        ci = ""
    elif whole_bounds:
        ci = f" [{_whole_percent(low)}, {_whole_percent(high)}]"
    else:
        ci = f" [{100 * low:{sign}.1f}, {100 * high:{sign}.1f}]"
    return Number(f"{100 * value:{sign}.1f}{ci}", value, low, high, n)


def _ci(row: Any, signed: bool = False, whole_bounds: bool = False) -> Number:
    """A metric row as "estimate [low, high]", keeping its n."""
    n = None if row is None else _n(row)
    return pct_ci(*_triple(row), signed=signed, n=n, whole_bounds=whole_bounds)


def _records(frame: pl.DataFrame) -> list[Any]:
    """The frame's rows with attribute access (``row.value``), missing values as None."""
    return [SimpleNamespace(**row) for row in frame.iter_rows(named=True)]


def _lookup(metrics: pl.DataFrame) -> Callable[..., Any]:
    index = {(r.model, r.dataset, r.policy, r.condition, r.metric): r for r in _records(metrics)}

    def get(model: str, dataset: str, policy: str, condition: str, metric: str):
        return index.get((model, dataset, policy, condition, metric))

    return get


def _cells(frame: pl.DataFrame) -> list[tuple[str, str]]:
    """The (model, dataset) cells of a frame, in the config's order (tabular.listed_in)."""
    if not len(frame):
        return []
    return cell_order(zip(frame["model"], frame["dataset"], strict=True))


def policy_table_policies() -> list[str]:
    """The policies the policy tables show (Tables 1, 2, 7, 8, 10...), in registry order."""
    return [name for name, spec in registry.policies().items() if spec.in_policy_tables]


def _policies(metrics: pl.DataFrame) -> list[str]:
    return [p for p in policy_table_policies() if p in set(metrics["policy"])]


def _value(row: Any) -> float:
    return float("nan") if row is None or row.value is None else float(row.value)


def _mean(values: Sequence[float | None]) -> float:
    """The mean of the values that are numbers (None and NaN left out); NaN if none."""
    kept = [float(v) for v in values if not _nan(v)]
    return float(np.mean(kept)) if kept else float("nan")


def with_note(table: Table, note: str) -> Table:
    """Attach the sentence that ``write_table`` prints after the table's caption."""
    table.note = note
    return table


def with_question_limits(table: Table, limits: Mapping[str, int]) -> Table:
    """A table with, after its note, which of its rows' policies ran on each dataset's
    first questions only (``limits``: policy -> N) and what that means for its rows."""
    by_n: dict[int, list[str]] = {}
    for policy in dict.fromkeys(row.get("policy") for row in table.rows):
        if policy in limits:
            by_n.setdefault(limits[policy], []).append(policy)
    if not by_n:
        return table
    parts = "; ".join(
        f"{', '.join(policies)} on each dataset's first {n} question{'s' * (n != 1)}"
        for n, policies in sorted(by_n.items())
    )
    sentence = (
        f"Ours, for a small run: {parts} only (evidential.n_questions, cdd.n_questions), "
        "the other policies on all of them, so a row from the metrics is over its own "
        "policy's questions (its n) and two rows may be over different questions."
    )
    return with_note(table, f"{table.note} {sentence}".strip() if table.note else sentence)


def _triple(row: Any) -> tuple[float, float, float]:
    if row is None:
        return (float("nan"),) * 3
    return tuple(
        float("nan") if v is None else float(v) for v in (row.value, row.ci_low, row.ci_high)
    )


def _pp(value: float) -> Number:
    return Number("n/a" if _nan(value) else f"{100 * value:+.1f}", value)


def _n(row: Any) -> int:
    return int(row.n) if row is not None else 0


def _decimals(value: float | None, digits: int = 3) -> Number:
    return Number("n/a" if _nan(value) else f"{value:.{digits}f}", value)
