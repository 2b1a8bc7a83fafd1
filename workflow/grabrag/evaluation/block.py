"""A bootstrap block: the per-question columns, derived totals and output-row specs of one
(model, dataset, policy), or of a piece of it, and the run that turns them into rows of
the tidy metric table.

Columns are keyed by name (a cell's are ``<condition>.<column>``, see :func:`column`); a
statistic is a function of the resampled totals of those names. Every step that builds
metric rows returns its own :class:`Block`, and the steps of one policy are merged
(:meth:`Block.extend`) into one block, so that all its statistics are computed on the
same resamples with one matrix product, and its rows come out in the order they were
added. The small statistic builders (:func:`rate`, :func:`total`, ...) are shared by
those steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from grabrag.evaluation.schema import CI_UNDEFINED
from grabrag.scoring.bootstrap import bootstrap_totals, ratio

Totals = Mapping[str, np.ndarray]
Fn = Callable[[Totals], np.ndarray]


class Spec(NamedTuple):
    """One output row of a block (see :meth:`Block.add`)."""

    metric: str
    condition: str
    stat: Fn
    size: Fn
    reason: str
    count: bool


def column(condition: str, name: str) -> str:
    """The key of a cell's per-question column: ``<condition>.<name>``."""
    return f"{condition}.{name}"


class Block:
    """Columns, shared derived totals and output rows (specs) of one bootstrap block."""

    def __init__(self) -> None:
        self.columns: dict[str, np.ndarray] = {}
        self.derived: dict[str, Fn] = {}
        self.specs: list[Spec] = []

    def add(
        self, metric: str, condition: str, stat: Fn, size: Fn, reason: str, count: bool = False
    ) -> None:
        """One output row: ``stat`` of the totals; ``size`` gives its n; ``reason`` says
        why it is NaN when it is. A ``count`` is 0 (not NaN) over an empty base, and then
        carries the reason too."""
        self.specs.append(Spec(metric, condition, stat, size, reason, count))

    def extend(self, other: Block) -> None:
        """Append another block's columns, derived totals and rows after this one's."""
        self.columns.update(other.columns)
        self.derived.update(other.derived)
        self.specs.extend(other.specs)

    def run(
        self, counts: np.ndarray, confidence_level: float, head: Mapping[str, str]
    ) -> list[dict[str, Any]]:
        stats = {str(j): spec.stat for j, spec in enumerate(self.specs)}
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
                reason = CI_UNDEFINED
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


def rate(num: str, den: str) -> Fn:
    return lambda t: ratio(t[num], t[den])


def total(name: str) -> Fn:
    return lambda t: np.asarray(t[name], dtype=float)


def nan_like(name: str) -> Fn:
    return lambda t: np.full(np.shape(t[name]), np.nan)


def pooled(keys: Sequence[str]) -> Fn:
    def pooled_total(t: Totals) -> np.ndarray:
        out = t[keys[0]].copy()
        for key in keys[1:]:
            out += t[key]
        return out

    return pooled_total


def harmonic_mean(p: np.ndarray, r: np.ndarray) -> np.ndarray:
    """2PR / (P + R) elementwise: NaN where either is NaN, 0 where both are 0 (Eq. 25)."""
    p, r = np.asarray(p, dtype=float), np.asarray(r, dtype=float)
    both = p + r
    out = np.where(both > 0, 2 * p * r / np.where(both > 0, both, 1.0), 0.0)
    return np.where(np.isnan(both), np.nan, out)


def positive(x: np.ndarray) -> np.ndarray:
    """NaN where x is 0 (a zero Q100 answer rate cannot normalise)."""
    return np.where(x > 0, x, np.nan)
