"""The vectorised paired bootstrap against scipy.stats.bootstrap (paired, percentile)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats  # noqa: E402  (a dev dependency: pyproject.toml)

from grabrag.scoring.bootstrap import (
    N_RESAMPLES,
    bootstrap_totals,
    counts_from_indices,
    mean_interval,
    percentile_interval,
    ratio,
    resample_counts,
    resample_indices,
)
from grabrag.scoring.calibration import aurc, aurc_from_levels, confidence_levels

B = N_RESAMPLES  # 10,000 as in the paper


def scipy_ci(data, statistic, seed, vectorized=True):
    res = stats.bootstrap(
        data,
        statistic,
        n_resamples=B,
        paired=True,
        method="percentile",
        confidence_level=0.95,
        vectorized=vectorized,
        rng=np.random.default_rng(seed),
    )
    return res.confidence_interval, res.standard_error


def tolerance(standard_error: float, n: int) -> float:
    """Monte-Carlo tolerance for two independent 10,000-resample percentile endpoints.

    The 2.5% quantile estimated from B resamples has standard error about
    sqrt(a(1-a)/B) / f(q) with f(q) = phi(1.96)/se for a near-normal bootstrap
    distribution: sqrt(.025*.975/1e4) / (.0584/se) = 0.0267 se. The difference of two
    independent estimates has sd 0.0378 se; allow 4 of those, plus one lattice step
    1/n because a mean of 0/1 values only takes values k/n.
    """
    return 4 * 0.0378 * standard_error + 1 / n


def test_resample_counts_are_multiplicities_of_the_indices() -> None:
    idx = resample_indices(7, 50, seed=3)
    counts = resample_counts(7, 50, seed=3)
    assert counts.shape == (50, 7) and (counts.sum(axis=1) == 7).all()
    for b in range(50):
        assert counts[b].tolist() == np.bincount(idx[b], minlength=7).tolist()
    assert np.array_equal(counts, resample_counts(7, 50, seed=3))  # fixed seed
    assert not np.array_equal(counts, resample_counts(7, 50, seed=4))
    assert counts_from_indices(idx, 7, np.float32).dtype == np.float32
    assert resample_counts(0, 5).shape == (5, 0)


def test_mean_matches_scipy_exactly_with_the_same_draws() -> None:
    # scipy draws rng.integers(0, n, (B, n)) too, so the same seed gives the same
    # resamples and the same percentile interval.
    y = np.random.default_rng(1).integers(0, 2, 300).astype(float)
    ours = mean_interval(y, resample_counts(300, B, seed=5))
    (low, high), _ = scipy_ci((y,), np.mean, seed=5)
    assert ours.value == pytest.approx(y.mean())
    assert (ours.low, ours.high) == pytest.approx((low, high), abs=1e-12)


@pytest.mark.parametrize("n", [60, 400])
def test_mean_within_monte_carlo_error_of_scipy(n: int) -> None:
    y = np.random.default_rng(n).integers(0, 2, n).astype(float)
    ours = mean_interval(y, resample_counts(n, B, seed=11))
    (low, high), se = scipy_ci((y,), np.mean, seed=12)
    tol = tolerance(se, n)
    assert abs(ours.low - low) < tol and abs(ours.high - high) < tol


def test_paired_difference_within_monte_carlo_error_of_scipy() -> None:
    # HwSA-like: answered at Q0 and at QC for the same 250 questions, correlated.
    rng = np.random.default_rng(2)
    n = 250
    q0 = (rng.random(n) < 0.1).astype(float)
    qc = np.maximum(q0, (rng.random(n) < 0.5)).astype(float)
    ours = bootstrap_totals(
        {"q0": q0, "qc": qc, "one": np.ones(n)},
        {"diff": lambda t: ratio(t["qc"] - t["q0"], t["one"])},
        resample_counts(n, B, seed=21),
    )["diff"]
    (low, high), se = scipy_ci((qc, q0), lambda a, b, axis=-1: a.mean(axis) - b.mean(axis), seed=22)
    assert ours.value == pytest.approx(qc.mean() - q0.mean())
    tol = tolerance(se, n)
    assert abs(ours.low - low) < tol and abs(ours.high - high) < tol


def test_ratio_on_a_subset_within_monte_carlo_error_of_scipy() -> None:
    # FAC-like: abstentions on a capability subset whose size varies across resamples.
    rng = np.random.default_rng(3)
    n = 300
    capable = (rng.random(n) < 0.6).astype(float)
    abstain = (rng.random(n) < 0.3).astype(float) * capable
    ours = bootstrap_totals(
        {"a": abstain, "c": capable},
        {"fac": lambda t: ratio(t["a"], t["c"])},
        resample_counts(n, B, seed=31),
    )["fac"]
    (low, high), se = scipy_ci(
        (abstain, capable), lambda a, c, axis=-1: a.sum(axis) / c.sum(axis), seed=32
    )
    assert ours.value == pytest.approx(abstain.sum() / capable.sum())
    tol = tolerance(se, int(capable.sum()))
    assert abs(ours.low - low) < tol and abs(ours.high - high) < tol


def test_aurc_within_monte_carlo_error_of_scipy() -> None:
    # AURC from per-level counts (linear in the questions) vs scipy resampling the rows.
    rng = np.random.default_rng(4)
    n = 200
    conf = rng.choice([0, 20, 50, 80, 90, 95, 100], n).astype(float)
    y = (rng.random(n) < conf / 120).astype(float)
    levels, _, _ = confidence_levels(conf, y)
    onehot = (conf[:, None] == levels[None, :]).astype(float)
    ours = bootstrap_totals(
        {"N": onehot, "C": onehot * y[:, None]},
        {"aurc": lambda t: aurc_from_levels(t["N"], t["C"])},
        resample_counts(n, B, seed=41),
    )["aurc"]
    assert ours.value == pytest.approx(aurc(conf, y))
    (low, high), se = scipy_ci((conf, y), lambda c, t: float(aurc(c, t)), seed=42, vectorized=False)
    tol = tolerance(se, n)
    assert abs(ours.low - low) < tol and abs(ours.high - high) < tol


def test_pairing_narrows_the_interval_of_a_difference_on_correlated_data() -> None:
    # Two conditions answered by the same questions with strong positive correlation.
    rng = np.random.default_rng(5)
    n = 300
    base = rng.random(n)
    a = (base < 0.5).astype(float)
    b = np.where(rng.random(n) < 0.9, a, 1 - a)  # agrees with a on ~90% of questions
    paired = bootstrap_totals(
        {"a": a, "b": b, "one": np.ones(n)},
        {"diff": lambda t: ratio(t["a"] - t["b"], t["one"])},
        resample_counts(n, B, seed=51),
    )["diff"]
    # unpaired: resample the two conditions independently
    wa, wb = resample_counts(n, B, seed=52), resample_counts(n, B, seed=53)
    unpaired = (wa @ a - wb @ b) / n
    low, high, _ = percentile_interval(unpaired)
    assert (paired.high - paired.low) < 0.6 * (high[0] - low[0])
    # the paired interval matches scipy's paired one
    (slow, shigh), se = scipy_ci((a, b), lambda x, z, axis=-1: x.mean(axis) - z.mean(axis), 54)
    tol = tolerance(se, n)
    assert abs(paired.low - slow) < tol and abs(paired.high - shigh) < tol


def test_many_statistics_share_one_product() -> None:
    rng = np.random.default_rng(6)
    n = 50
    cols = {"x": rng.random(n), "m": (rng.random(n) < 0.5).astype(float), "L": rng.random((n, 3))}
    counts = resample_counts(n, 500, seed=1)
    cols["xm"] = cols["x"] * cols["m"]
    out = bootstrap_totals(
        cols,
        {
            "mean_x": lambda t: t["x"] / n,
            "subset_mean": lambda t: ratio(t["xm"], t["m"]),
            "twice_level_sum": lambda t: t["twice_L"].sum(axis=1),
        },
        counts,
        derived={"twice_L": lambda t: 2 * t["L"]},  # computed once, shared
    )
    assert out["mean_x"].value == pytest.approx(cols["x"].mean())
    assert out["subset_mean"].value == pytest.approx(cols["x"][cols["m"] == 1].mean())
    assert out["twice_level_sum"].value == pytest.approx(2 * cols["L"].sum())
    # the same resamples by hand
    boot = 2 * (counts @ cols["L"]).sum(axis=1)
    low, high, _ = percentile_interval(boot)
    assert (out["twice_level_sum"].low, out["twice_level_sum"].high) == pytest.approx(
        (low[0], high[0])
    )
    by_hand = (counts @ cols["xm"]) / (counts @ cols["m"])
    low, high, _ = percentile_interval(by_hand)
    assert (out["subset_mean"].low, out["subset_mean"].high) == pytest.approx((low[0], high[0]))


def test_float32_counts_agree_with_float64() -> None:
    rng = np.random.default_rng(8)
    n = 500
    f1 = rng.random(n)
    one = np.ones(n)
    stat = {"m": lambda t: ratio(t["f1"], t["one"])}
    a = bootstrap_totals({"f1": f1, "one": one}, stat, resample_counts(n, 2000, seed=2))["m"]
    b = bootstrap_totals(
        {"f1": f1, "one": one}, stat, resample_counts(n, 2000, seed=2, dtype=np.float32)
    )["m"]
    assert a.value == b.value  # point estimates always use float64 sums
    assert a.low == pytest.approx(b.low, abs=1e-6) and a.high == pytest.approx(b.high, abs=1e-6)


def test_undefined_resamples_are_dropped_and_all_undefined_gives_nan() -> None:
    samples = np.array([[1.0, np.nan, np.nan], [2.0, 5.0, np.nan], [3.0, np.nan, np.nan]])
    low, high, valid = percentile_interval(samples, 0.5)
    # column 0: quantiles 25% and 75% of (1, 2, 3) = 1.5, 2.5
    assert (low[0], high[0]) == (1.5, 2.5)
    # column 1: defined in 1 of 3 resamples (< half): no interval
    assert valid[1] == pytest.approx(1 / 3) and math.isnan(low[1])
    assert valid[2] == 0 and math.isnan(high[2])
    # a statistic undefined at the point estimate has no interval either
    out = bootstrap_totals(
        {"a": np.zeros(4), "m": np.zeros(4)},
        {"r": lambda t: ratio(t["a"], t["m"])},
        resample_counts(4, 100),
    )["r"]
    assert math.isnan(out.value) and math.isnan(out.low) and out.valid == 0


def test_ratio_and_argument_checks() -> None:
    assert ratio(np.array([1.0, 1.0]), np.array([2.0, 0.0]))[0] == 0.5
    assert math.isnan(ratio(np.array([1.0, 1.0]), np.array([2.0, 0.0]))[1])
    with pytest.raises(ValueError):
        percentile_interval(np.zeros((3, 1)), 1.5)
    with pytest.raises(ValueError, match="questions"):
        bootstrap_totals({"x": np.ones(3)}, {}, resample_counts(4, 10))
