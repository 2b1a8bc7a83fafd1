"""Paired percentile bootstrap over questions, vectorised (GRAB-RAG Appendix D).

What is resampled: QUESTIONS. One resample draws n question indices with replacement;
every row of a drawn question comes along (all its conditions, policies and models), so
any difference of two statistics computed on the same resample is a paired difference
(e.g. HwSA at QC - HwSA at Q0 on the QC-eligible subset).

How it is vectorised: every metric here is a function of per-question SUMS. A resample
is then a vector of multiplicities w (how often each question was drawn, summing to n),
and the resampled sum of a per-question column x is w @ x. With the B x n multiplicity
matrix W (one per dataset, from a fixed seed) and the n x K matrix X of all columns a
group of statistics needs, ``W @ X`` gives all B x K resampled totals in one matrix
product; means, ratios (FAC on the capability set, HwSA on a subset, shares of answered
rows), differences, and AURC/ECE from per-confidence-level counts
(:func:`grabrag.scoring.calibration.aurc_from_levels`) are then cheap array arithmetic on those
totals. The point estimate is the same statistic on the plain totals (w = 1).

Interval: percentile method, the (1-level)/2 and (1+level)/2 quantiles of the B resampled
statistics with numpy's default linear interpolation (as ``scipy.stats.bootstrap``,
method="percentile"). A ratio whose denominator is empty in a resample (e.g. no
capable question drawn) is undefined there; those resamples are dropped and the interval
is taken over the rest; when fewer than ``min_valid`` (default half) of the resamples
define it, the interval is NaN.

The resample indices come from ``numpy.random.default_rng(seed).integers(0, n, (B, n))``,
the same draw scipy makes, so results are reproducible from (seed, n, B).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

N_RESAMPLES = 10_000
CONFIDENCE_LEVEL = 0.95
MIN_VALID = 0.5
_CHUNK = 1024  # resample rows per bincount batch (bounds memory for large n)

Totals = Mapping[str, np.ndarray]
Statistic = Callable[[Totals], np.ndarray]


@dataclass(frozen=True)
class Interval:
    """A point estimate and its bootstrap interval; ``valid`` is the share of resamples in
    which the statistic was defined (1.0 for a plain mean)."""

    value: float
    low: float
    high: float
    valid: float


def resample_indices(n: int, n_resamples: int = N_RESAMPLES, seed: Any = 0) -> np.ndarray:
    """B x n question indices drawn with replacement from ``default_rng(seed)``."""
    if n < 0 or n_resamples < 1:
        raise ValueError("need n >= 0 and n_resamples >= 1")
    if n == 0:
        return np.zeros((n_resamples, 0), dtype=np.int64)
    return np.random.default_rng(seed).integers(0, n, size=(n_resamples, n))


def counts_from_indices(indices: np.ndarray, n: int, dtype: Any = np.float64) -> np.ndarray:
    """B x n multiplicities (how often each question is drawn) from B x n indices."""
    n_resamples = indices.shape[0]
    out = np.empty((n_resamples, n), dtype=dtype)
    for start in range(0, n_resamples, _CHUNK):
        block = indices[start : start + _CHUNK]
        rows = block.shape[0]
        flat = (block + (np.arange(rows) * n)[:, None]).ravel()
        out[start : start + rows] = np.bincount(flat, minlength=rows * n).reshape(rows, n)
    return out


def resample_counts(
    n: int, n_resamples: int = N_RESAMPLES, seed: Any = 0, dtype: Any = np.float64
) -> np.ndarray:
    """The B x n multiplicity matrix W of :func:`resample_indices` (rows sum to n)."""
    return counts_from_indices(resample_indices(n, n_resamples, seed), n, dtype)


def percentile_interval(
    samples: np.ndarray,
    confidence_level: float = CONFIDENCE_LEVEL,
    min_valid: float = MIN_VALID,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(low, high, valid share) of each column of a B x S array of resampled statistics.
    NaN entries (undefined in that resample) are dropped; a column defined in fewer than
    ``min_valid`` of the resamples gets a NaN interval."""
    if not 0 < confidence_level < 1:
        raise ValueError("confidence_level must be in (0, 1)")
    samples = np.asarray(samples, dtype=float)
    if samples.ndim == 1:
        samples = samples[:, None]
    q = [100 * (1 - confidence_level) / 2, 100 * (1 + confidence_level) / 2]
    finite = np.isfinite(samples)
    valid = finite.mean(axis=0) if samples.shape[0] else np.zeros(samples.shape[1])
    low = np.full(samples.shape[1], np.nan)
    high = np.full(samples.shape[1], np.nan)
    full = finite.all(axis=0)
    if full.any():
        low[full], high[full] = np.percentile(samples[:, full], q, axis=0)
    for j in np.flatnonzero(~full & (valid >= min_valid) & (valid > 0)):
        low[j], high[j] = np.percentile(samples[finite[:, j], j], q)
    return low, high, valid


def ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator, NaN where the denominator is 0 (an empty subset)."""
    numerator = np.asarray(numerator, dtype=float)
    denominator = np.asarray(denominator, dtype=float)
    out = np.full(np.broadcast(numerator, denominator).shape, np.nan)
    np.divide(numerator, denominator, out=out, where=denominator != 0)
    return out


def _stack(columns: Mapping[str, Any], n: int | None) -> tuple[np.ndarray, dict[str, slice]]:
    parts, slices, start = [], {}, 0
    for name, column in columns.items():
        array = np.asarray(column, dtype=float)
        if array.ndim == 1:
            array = array[:, None]
        if array.ndim != 2:
            raise ValueError(f"column {name!r} must be 1-D or 2-D (questions first)")
        if n is not None and array.shape[0] != n:
            raise ValueError(f"column {name!r} has {array.shape[0]} questions, expected {n}")
        n = array.shape[0]
        parts.append(array)
        width = array.shape[1]
        slices[name] = slice(start, start + width) if np.ndim(column) == 2 else start
        start += width
    if not parts:
        return np.zeros((n or 0, 0)), {}
    return np.concatenate(parts, axis=1), slices


def _split(totals: np.ndarray, slices: Mapping[str, Any]) -> dict[str, np.ndarray]:
    # Contiguous copies: the statistics run many passes over each (R, k) block.
    return {name: np.ascontiguousarray(totals[:, where]) for name, where in slices.items()}


def _evaluate(
    totals: dict[str, np.ndarray],
    derived: Mapping[str, Statistic],
    statistics: Mapping[str, Statistic],
) -> list[np.ndarray]:
    for name, make in derived.items():
        totals[name] = make(totals)
    return [np.asarray(f(totals), dtype=float).reshape(-1) for f in statistics.values()]


def bootstrap_totals(
    columns: Mapping[str, Any],
    statistics: Mapping[str, Statistic],
    counts: np.ndarray,
    confidence_level: float = CONFIDENCE_LEVEL,
    min_valid: float = MIN_VALID,
    derived: Mapping[str, Statistic] | None = None,
) -> dict[str, Interval]:
    """Point estimates and percentile intervals of statistics of per-question sums.

    ``columns``: name -> per-question values, shape (n,) or (n, k) (e.g. counts per
    confidence level). ``statistics``: name -> f(totals) where ``totals[name]`` has shape
    (R,) or (R, k) for R independent sets of weights; f returns shape (R,). ``derived``:
    name -> f(totals), computed once, in order, and added to ``totals`` before the
    statistics run (shared intermediate results, e.g. pooled level counts). ``counts``:
    the B x n multiplicity matrix (:func:`resample_counts`). One matrix product computes
    every resampled total; it runs in ``counts.dtype`` (float32 halves the time and is
    exact for counts below 2**24), while point estimates always use float64 sums.
    """
    counts = np.asarray(counts)
    n = counts.shape[1]
    derived = derived or {}
    matrix, slices = _stack(columns, n)
    point = _evaluate(_split(matrix.sum(axis=0, keepdims=True), slices), derived, statistics)
    boot_totals = _split(counts @ matrix.astype(counts.dtype, copy=False), slices)
    names = list(statistics)
    if names:
        samples = np.column_stack(_evaluate(boot_totals, derived, statistics))
    else:
        samples = np.zeros((counts.shape[0], 0))
    low, high, valid = percentile_interval(samples, confidence_level, min_valid)
    out = {}
    for j, name in enumerate(names):
        value = float(point[j][0])
        defined = np.isfinite(value)
        out[name] = Interval(
            value=value,
            low=float(low[j]) if defined else float("nan"),
            high=float(high[j]) if defined else float("nan"),
            valid=float(valid[j]),
        )
    return out


def mean_interval(
    values: Any,
    counts: np.ndarray,
    confidence_level: float = CONFIDENCE_LEVEL,
) -> Interval:
    """The mean of one per-question column with its interval (a convenience)."""
    values = np.asarray(values, dtype=float)
    result = bootstrap_totals(
        {"x": values, "one": np.ones_like(values)},
        {"mean": lambda t: ratio(t["x"], t["one"])},
        counts,
        confidence_level,
    )
    return result["mean"]
