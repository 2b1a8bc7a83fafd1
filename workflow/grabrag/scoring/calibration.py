"""Confidence metrics (GRAB-RAG Appendix A, EvidentialRAG Eq. 26): AURC with ties
averaged, ECE at bin midpoints (GRAB-RAG) and at the bins' mean confidence (Guo et al.,
EvidentialRAG), their per-confidence-level and per-bin forms that the bootstrap resamples
with one matrix product, and the risk-coverage curve and reliability bins of the figures.

Row conventions (which rows are scored, what is correct): :mod:`grabrag.scoring.answers`.
Confidences are on the 0-100 scale.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from grabrag.scoring.answers import exact_match, parse_failed, row_correct, row_em
from grabrag.scoring.value import Value

CONFIDENCE_SCALE = 100.0

# AURC and ECE are both computed from per-confidence-level counts: for each distinct
# confidence (ordered from highest to lowest), N = rows at that level and C = correct rows
# at that level. That form is exact (below), and it is linear in the rows, which is what
# lets the bootstrap (grabrag.scoring.bootstrap) compute 10,000 resamples with one matrix
# product.
#
# AURC ties: rows with equal confidence have no order of their own, and stable input
# order would let the (arbitrary) file order change the metric. We report the EXPECTED
# AURC over a uniformly random order within each tie group. Within a group of m rows
# (c correct) that starts after a rows (A correct), the expected cumulative correct count
# after t of its rows is A + t*c/m, so
#     sum_{t=1..m} E[S_{a+t}]/(a+t) = c + (A - a*c/m) * (H(a+m) - H(a)),
# with H the harmonic numbers, and AURC = 1 - (1/n) * sum over groups. Without ties this
# is exactly Appendix A's formula; it is invariant to row order.


def _harmonic(upto: int) -> np.ndarray:
    """H(0..upto), H(0) = 0."""
    table = np.zeros(int(upto) + 1)
    if upto > 0:
        table[1:] = np.cumsum(1.0 / np.arange(1, int(upto) + 1))
    return table


def aurc_from_levels(n_at: np.ndarray, correct_at: np.ndarray) -> np.ndarray:
    """Tie-averaged AURC from counts per confidence level, levels along the last axis in
    DESCENDING confidence. Leading axes are independent (e.g. bootstrap resamples).
    Counts are float arrays of integer values. NaN where there are no rows.

    With cumulative counts a + N (rows) and A + C (correct) through a group, the group's
    term c + (A - a*c/m)(H(a+m) - H(a)) is c + (cumC - cumN * C/N) * (H(cumN) - H(cumN - N)).
    """
    n_at = np.asarray(n_at)
    correct_at = np.asarray(correct_at)
    if n_at.dtype.kind != "f":
        n_at = n_at.astype(float)
    if correct_at.dtype.kind != "f":
        correct_at = correct_at.astype(float)
    cum_n = np.cumsum(n_at, axis=-1)
    cum_c = np.cumsum(correct_at, axis=-1)
    if cum_n.shape[-1] == 0:
        return np.full(cum_n.shape[:-1], np.nan)
    total = cum_n[..., -1]
    hi = np.rint(cum_n).astype(np.intp)
    lo = hi - np.rint(n_at).astype(np.intp)
    harmonic = _harmonic(int(hi.max(initial=0))).astype(cum_n.dtype)
    spread = harmonic[hi]
    spread -= harmonic[lo]
    share = correct_at / np.maximum(n_at, 1)  # a level with no rows has no correct rows
    lead = cum_c - cum_n * share
    terms = cum_c[..., -1] + np.einsum("...l,...l->...", lead, spread)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, 1.0 - terms / total, np.nan)


def ece_bin_index(confidence: np.ndarray, n_bins: int) -> np.ndarray:
    """Bin of each 0-100 confidence among ``n_bins`` equal-width bins of [0, 1].

    Bins are left-closed, [k/M, (k+1)/M), so a value on an inner edge goes to the
    upper bin (0.3 -> [0.3, 0.4)); 1.0 goes to the last bin, [(M-1)/M, 1]. The index is
    floor(conf * M / 100) computed on the 0-100 scale, so integer confidences land on
    edges exactly (no 0.7 * 10 = 6.999... rounding).
    """
    confidence = np.asarray(confidence, dtype=float)
    return np.minimum(np.floor(confidence * n_bins / CONFIDENCE_SCALE), n_bins - 1).astype(np.int64)


def ece_from_levels(
    levels: np.ndarray, n_at: np.ndarray, correct_at: np.ndarray, n_bins: int = 10
) -> np.ndarray:
    """Bin-midpoint ECE from counts per confidence level (levels on the 0-100 scale, in
    any order, along the last axis):  sum_m |sum_{i in B_m} (y_i - mid_m)| / n.
    NaN where there are no rows."""
    levels = np.asarray(levels, dtype=float)
    n_at = np.asarray(n_at, dtype=float) if np.asarray(n_at).dtype.kind != "f" else n_at
    correct_at = (
        np.asarray(correct_at, dtype=float)
        if np.asarray(correct_at).dtype.kind != "f"
        else correct_at
    )
    total = n_at.sum(axis=-1)
    if levels.size == 0:
        return np.full(total.shape, np.nan)
    bins = ece_bin_index(levels, n_bins)
    order = np.argsort(bins, kind="stable")
    if np.any(order != np.arange(len(bins))) and np.any(order != np.arange(len(bins))[::-1]):
        n_at, correct_at, bins = n_at[..., order], correct_at[..., order], bins[order]
    # Levels of one bin are now contiguous: sum each run.
    starts = np.flatnonzero(np.r_[True, bins[1:] != bins[:-1]])
    mids = ((bins[starts] + 0.5) / n_bins).astype(n_at.dtype)
    in_bin = np.add.reduceat(n_at, starts, axis=-1)
    correct_in_bin = np.add.reduceat(correct_at, starts, axis=-1)
    gap = np.abs(correct_in_bin - in_bin * mids).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, gap / total, np.nan)


def _check_scores(
    confidence: Sequence[float], correct: Sequence[int | bool]
) -> tuple[np.ndarray, np.ndarray]:
    conf = np.asarray(confidence, dtype=float).reshape(-1)
    y = np.asarray(correct, dtype=float).reshape(-1)
    if conf.shape != y.shape:
        raise ValueError(f"confidence has {conf.size} values but correct has {y.size}")
    if conf.size and (not np.all(np.isfinite(conf)) or conf.min() < 0 or conf.max() > 100):
        raise ValueError("confidence must be finite and on the 0-100 scale")
    if y.size and not np.all((y == 0) | (y == 1)):
        raise ValueError("correct must be 0/1 (or bool)")
    return conf, y


def confidence_levels(
    confidence: Sequence[float], correct: Sequence[int | bool]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(levels in descending order, rows per level, correct rows per level)."""
    conf, y = _check_scores(confidence, correct)
    neg, inverse = np.unique(-conf, return_inverse=True)
    n_levels = len(neg)
    return (
        -neg,
        np.bincount(inverse, minlength=n_levels).astype(float),
        np.bincount(inverse, weights=y, minlength=n_levels),
    )


def aurc(
    confidence: Sequence[float], correct: Sequence[int | bool], *, ties: str = "average"
) -> Value:
    """AURC (Appendix A): rows ranked by confidence (0-100) descending,
    (1/n) sum_k (1 - (1/k) sum_{j<=k} y_sigma(j)).

    ``ties="average"`` (default): the expected AURC over a random order within tie groups
    (see the note above; independent of row order). ``ties="input"``: stable sort, equal
    confidences keep their input order (for comparison only). No rows gives NaN.
    """
    conf, y = _check_scores(confidence, correct)
    if conf.size == 0:
        return Value.undefined("no evaluated rows (none with a parsed decision and confidence)")
    if ties == "input":
        ranked = y[np.argsort(-conf, kind="stable")]
        k = np.arange(1, len(ranked) + 1)
        return Value(float(np.mean(1.0 - np.cumsum(ranked) / k)), conf.size)
    if ties != "average":
        raise ValueError(f"ties must be 'average' or 'input', not {ties!r}")
    _, n_at, correct_at = confidence_levels(conf, y)
    return Value(float(aurc_from_levels(n_at, correct_at)), conf.size)


def ece(confidence: Sequence[float], correct: Sequence[int | bool], n_bins: int = 10) -> Value:
    """ECE (Appendix A), bin-midpoint form: confidence rescaled from 0-100 to [0, 1],
    ``n_bins`` equal-width bins (see :func:`ece_bin_index` for edges),
    sum_m |B_m|/n * |acc(B_m) - mid(B_m)|; empty bins contribute 0. No rows gives NaN.
    This is GRAB-RAG's ECE (metric ``ece``; ``ece_15`` is the same form with 15 bins).
    EvidentialRAG's ECE (Eq. 26, the bin's mean confidence) is :func:`ece_mean`."""
    if n_bins < 1:
        raise ValueError("n_bins must be at least 1")
    conf, y = _check_scores(confidence, correct)
    if conf.size == 0:
        return Value.undefined("no evaluated rows (none with a parsed decision and confidence)")
    levels, n_at, correct_at = confidence_levels(conf, y)
    return Value(float(ece_from_levels(levels, n_at, correct_at, n_bins)), conf.size)


def ece_mean_from_bins(
    n_at: np.ndarray, correct_at: np.ndarray, confidence_at: np.ndarray
) -> np.ndarray:
    """Guo et al.'s ECE from per-bin sums (bins along the last axis; leading axes are
    independent, e.g. bootstrap resamples): rows, correct rows and the sum of the rows'
    confidences on the [0, 1] scale in each bin. With acc(B) = C/N and conf(B) = S/N,
    sum_b N/n * |C/N - S/N| = sum_b |C - S| / n (an empty bin adds 0). NaN without rows."""
    n_at = np.asarray(n_at, dtype=float)
    gap = np.abs(np.asarray(correct_at, dtype=float) - np.asarray(confidence_at, dtype=float))
    total = n_at.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, gap.sum(axis=-1) / total, np.nan)


def ece_bin_sums(
    confidence: Sequence[float], correct: Sequence[int | bool], n_bins: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, correct rows, summed [0, 1] confidence) in each of ``n_bins`` equal-width
    bins (edges as :func:`ece_bin_index`); the input of :func:`ece_mean_from_bins`."""
    conf, y = _check_scores(confidence, correct)
    bins = ece_bin_index(conf, n_bins)
    return (
        np.bincount(bins, minlength=n_bins).astype(float),
        np.bincount(bins, weights=y, minlength=n_bins),
        np.bincount(bins, weights=conf / CONFIDENCE_SCALE, minlength=n_bins),
    )


def ece_mean(
    confidences: Sequence[float], correct: Sequence[int | bool], n_bins: int = 15
) -> Value:
    """Expected calibration error as Guo et al. (2017) and EvidentialRAG Eq. 26 define it:
    ``n_bins`` equal-width bins of [0, 1], each compared at the MEAN confidence of its
    rows (not its midpoint, unlike GRAB-RAG's :func:`ece`):
    sum_b |B_b|/n * |acc(B_b) - conf(B_b)|.

    ``confidences`` on the 0-100 scale, ``correct`` 0/1; returns a fraction in [0, 1]
    (NaN with a reason without rows). Bin edges as :func:`ece_bin_index`. For
    EvidentialRAG the confidence of a row is the fused singleton mass of its selected
    answer (Eq. 27) and ``correct`` says whether that answer is right.
    """
    if n_bins < 1:
        raise ValueError("n_bins must be at least 1")
    conf, y = _check_scores(confidences, correct)
    if conf.size == 0:
        return Value.undefined("no evaluated rows (none with a confidence)")
    return Value(float(ece_mean_from_bins(*ece_bin_sums(conf, y, n_bins))), conf.size)


def selected_answer_score(
    row: Mapping[str, Any], answers: Sequence[str]
) -> tuple[float, int] | None:
    """(confidence 0-100, correct 0/1) of one decision row for :func:`ece_mean`: the
    confidence in the row's selected answer and whether that answer is right (EM).

    EvidentialRAG rows carry ``fused_confidence`` (Eq. 27: 100 x the largest fused
    singleton mass) and ``selected_claim`` (that claim; None without any claim), for every
    route: a routed abstention still has a selected answer and its mass. Other rows
    (naive RAG, P1) use their own confidence and answer: an abstention has no selected
    answer, so it is not correct. None for a row without a confidence (unparseable)."""
    if "fused_confidence" in row:
        claim = row.get("selected_claim")
        return float(row["fused_confidence"]), int(bool(claim) and exact_match(claim, answers) == 1)
    if parse_failed(row) or row.get("confidence") is None:
        return None
    return float(row["confidence"]), int(row_em(row, answers) == 1.0)


def risk_coverage(
    confidence: Sequence[float], correct: Sequence[int | bool]
) -> tuple[np.ndarray, np.ndarray]:
    """The risk-coverage curve whose mean is :func:`aurc`: coverage k/n and expected risk
    1 - E[S_k]/k at every k = 1..n (ties averaged as in :func:`aurc`)."""
    levels, n_at, correct_at = confidence_levels(confidence, correct)
    if n_at.size == 0:
        return np.zeros(0), np.zeros(0)
    group = np.repeat(np.arange(len(levels)), n_at.astype(np.int64))
    before = (np.cumsum(n_at) - n_at)[group]
    k = np.arange(1, len(group) + 1)
    expected = (np.cumsum(correct_at) - correct_at)[group] + (k - before) * (correct_at / n_at)[
        group
    ]
    return k / len(group), 1.0 - expected / k


def reliability_bins(
    confidence: Sequence[float], correct: Sequence[int | bool], n_bins: int = 10
) -> list[dict[str, float]]:
    """Per-bin rows for a reliability diagram: {bin, low, high, mid, n, accuracy,
    mean_confidence} on the [0, 1] scale; accuracy and mean_confidence are NaN in an
    empty bin. The bins are :func:`ece`'s."""
    conf, y = _check_scores(confidence, correct)
    bins = ece_bin_index(conf, n_bins)
    out = []
    for b in range(n_bins):
        mask = bins == b
        count = int(mask.sum())
        out.append(
            {
                "bin": b,
                "low": b / n_bins,
                "high": (b + 1) / n_bins,
                "mid": (b + 0.5) / n_bins,
                "n": count,
                "accuracy": float(y[mask].mean()) if count else float("nan"),
                "mean_confidence": float(conf[mask].mean() / CONFIDENCE_SCALE)
                if count
                else float("nan"),
            }
        )
    return out


def confidence_and_correct(
    rows: Sequence[Mapping[str, Any]], gold: Mapping[str, Sequence[str]], condition: str
) -> tuple[list[float], list[int]]:
    """The (confidence, correct) pairs AURC/ECE use for one cell; unparseable rows and
    rows without a confidence are left out."""
    conf: list[float] = []
    correct: list[int] = []
    for row in rows:
        y = row_correct(row, gold[row["qid"]], condition)
        if y is not None:
            conf.append(float(row["confidence"]))
            correct.append(y)
    return conf, correct
