"""Dempster-Shafer mass functions and EvidentialRAG's fusion rules (EvidentialRAG paper,
sections 3.4 and 5.9): the mass of one evidence vector, the conflict between two sources,
the conflict-preserving lambda rule, classic Dempster, the left-to-right fold and the
evidence-averaging ablation. Pure numpy; the routes and decisions made from the fused
mass are in :mod:`grabrag.evidential.routing`.

Equations (paper numbering):

* Eqs. 2-6 (:func:`from_evidence`): alpha = e + 1, S = sum(alpha), singleton masses
  b_j = e_j / S, frame mass u = M / S, so sum(b) + u = 1 (Eq. 5).
* Eq. 7 (:func:`conflict`): K = sum_{r != s} b_a[r] * b_b[s].
* Eqs. 8-11 (:func:`combine`): n_j = b_a[j] b_b[j] + b_a[j] u_b + u_a b_b[j],
  h = u_a u_b, frame mass h + lambda K, singletons (1 - h - lambda K) n_j / sum(n).
* Eq. 12 (:func:`fuse`): m^(t) = m^(t-1) (x)_lambda m_t, left to right, in the fixed
  order of :func:`grabrag.evidential.evaluator.fold_order` (never the condition's shuffled
  context order); a tie the order cannot break
  (:func:`grabrag.evidential.evaluator.fold_groups`) is combined within itself first.
* Eq. 13: U_global = m^(k)(Theta), the ``u`` that :func:`fuse` returns.
* Eq. 14 (:func:`mean_pairwise_conflict`): mean pairwise K, a diagnostic only.
* Section 5.9's "without conflict-preserving fusion" (:func:`average_evidence`): the
  mean of the evidence vectors, then Eqs. 2-6.

A mass function is a tuple ``(b, u)``: ``b`` is a 1-D array of singleton masses over
the M claims of the frame and ``u`` is the mass on the whole frame (ignorance). Every
operation here returns masses that sum to one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

# Default of the paper (section 4.3, Table 14).
LAMBDA = 0.6

Mass = tuple[np.ndarray, float]

# A total conflict (K = 1 up to rounding) leaves Dempster's rule undefined.
TOTAL_CONFLICT_TOL = 1e-12
# Masses handed in by a caller may carry rounding from earlier operations; anything
# further from a valid mass function than this is a bug upstream.
_MASS_INPUT_TOL = 1e-6


def vacuous(m: int = 0) -> Mass:
    """The vacuous mass over ``m`` claims: everything on the frame (total ignorance)."""
    return np.zeros(m), 1.0


def from_evidence(evidence: Sequence[float] | np.ndarray) -> Mass:
    """Eqs. 2-6: the mass function of one evidence vector over the M claims.

    alpha = e + 1, S = sum(alpha) = sum(e) + M, b = e / S, u = M / S. No evidence at all
    (e = 0) gives u = 1; no claims (M = 0) gives the vacuous mass (empty, 1.0).
    """
    e = np.asarray(evidence, dtype=float)
    if e.ndim != 1:
        raise ValueError(f"evidence must be a 1-D vector, got shape {e.shape}")
    for value in e:
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"evidence must be finite and non-negative, got {value!r}")
    m = e.size
    if m == 0:
        return vacuous(0)
    total = float(e.sum()) + m
    if not math.isfinite(total):
        raise ValueError(f"evidence total {total!r} is not finite")
    return e / total, m / total


def _as_mass(mass: Mass, name: str = "mass") -> Mass:
    """Validate a (b, u) pair and return it as (float array, float)."""
    b = np.asarray(mass[0], dtype=float)
    u = float(mass[1])
    if b.ndim != 1:
        raise ValueError(f"{name}: singleton masses must be 1-D, got shape {b.shape}")
    if not (np.all(np.isfinite(b)) and math.isfinite(u)):
        raise ValueError(f"{name}: masses must be finite, got b={b!r}, u={u!r}")
    if (b.size and b.min() < -_MASS_INPUT_TOL) or not (
        -_MASS_INPUT_TOL <= u <= 1 + _MASS_INPUT_TOL
    ):
        raise ValueError(f"{name}: masses must be non-negative, got b={b!r}, u={u!r}")
    total = float(b.sum()) + u
    if abs(total - 1.0) > _MASS_INPUT_TOL:
        raise ValueError(f"{name}: masses sum to {total!r}, not 1")
    return np.clip(b, 0.0, None), min(max(u, 0.0), 1.0)


def _pair(m_a: Mass, m_b: Mass) -> tuple[np.ndarray, float, np.ndarray, float]:
    b_a, u_a = _as_mass(m_a, "m_a")
    b_b, u_b = _as_mass(m_b, "m_b")
    if b_a.size != b_b.size:
        raise ValueError(f"masses are over different frames: {b_a.size} vs {b_b.size} claims")
    return b_a, u_a, b_b, u_b


def _conflict(b_a: np.ndarray, b_b: np.ndarray) -> float:
    # sum_{r != s} b_a[r] b_b[s] = (sum b_a)(sum b_b) - sum_j b_a[j] b_b[j]; clipped
    # because the subtraction can go a rounding error below zero.
    return max(float(b_a.sum() * b_b.sum() - b_a @ b_b), 0.0)


def _conjunctive(
    b_a: np.ndarray, u_a: float, b_b: np.ndarray, u_b: float
) -> tuple[np.ndarray, float, float]:
    """(n, h, K) of Eqs. 7-9; n + h + K sum to one."""
    n = b_a * b_b + b_a * u_b + u_a * b_b
    return n, u_a * u_b, _conflict(b_a, b_b)


def conflict(m_a: Mass, m_b: Mass) -> float:
    """Eq. 7: K(m_a, m_b) = sum over r != s of m_a({a_r}) m_b({a_s})."""
    b_a, _, b_b, _ = _pair(m_a, m_b)
    return _conflict(b_a, b_b)


def combine(m_a: Mass, m_b: Mass, lam: float) -> Mass:
    """Eqs. 7-11: the conflict-preserving pairwise rule with transfer parameter ``lam``.

    Frame mass h + lam * K; singletons (1 - h - lam * K) n_j / sum(n). lam = 1 is
    Yager-style full transfer (singletons keep exactly n_j), lam = 0 transfers nothing.

    Choice: when sum(n) = 0 (no claim survives the conjunction, e.g. two sources that
    each commit fully to a different claim), Eq. 11 sets every singleton to 0, and with
    lam < 1 the masses would then sum to h + lam * K < 1. We put that remainder on the
    frame, so the result is the vacuous mass: nothing is known about which claim holds,
    and masses always sum to one.
    """
    if not 0.0 <= lam <= 1.0:  # also rejects NaN
        raise ValueError(f"lam must be in [0, 1], got {lam!r}")
    b_a, u_a, b_b, u_b = _pair(m_a, m_b)
    n, h, k = _conjunctive(b_a, u_a, b_b, u_b)
    support = float(n.sum())
    if support <= 0.0:
        return vacuous(b_a.size)
    # h + lam K <= h + K = 1 - sum(n) on paper; clip the rounding error.
    frame = min(max(h + lam * k, 0.0), 1.0)
    return (1.0 - frame) * n / support, frame


def dempster(m_a: Mass, m_b: Mass) -> Mass:
    """Classic normalised Dempster combination: singletons n_j / (1 - K), frame h / (1 - K).

    Choice: under total conflict (K = 1 within 1e-12) Dempster's rule is undefined
    (division by zero); we return the vacuous mass, i.e. total ignorance, rather than
    raise, so the Dempster arm of the lambda sweep still gives a route for every
    question. The divisor is computed as sum(n) + h (equal to 1 - K) so the result
    sums to one to rounding even when K is close to one.
    """
    b_a, u_a, b_b, u_b = _pair(m_a, m_b)
    n, h, k = _conjunctive(b_a, u_a, b_b, u_b)
    kept = float(n.sum()) + h
    if k >= 1.0 - TOTAL_CONFLICT_TOL or kept <= 0.0:
        return vacuous(b_a.size)
    return n / kept, h / kept


def fuse(masses: Sequence[Mass], lam: float | None, groups: Sequence[int] | None = None) -> Mass:
    """Eq. 12: fold the sources left to right, with :func:`combine` at ``lam`` or, for
    ``lam=None``, with :func:`dempster`. The returned ``u`` is U_global (Eq. 13).

    No sources give the vacuous mass over an empty frame. The lambda rule is not
    associative, so the order matters: callers pass passages in
    :func:`grabrag.evidential.evaluator.fold_order`. ``groups``: the sizes of the fold's
    tie groups (:func:`grabrag.evidential.evaluator.fold_groups`) over the first sources,
    in order; the sources after them fold one by one. A group is combined within
    itself first and then folded in as one source, so a pair the order cannot tell apart
    (QX's gold passage and its swapped twin) fuses the same whichever comes first (the
    pairwise rule is commutative). Without ``groups`` every source folds in turn.
    """
    if lam is not None and not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must be None or in [0, 1], got {lam!r}")
    if not masses:
        return vacuous(0)
    sizes = list(groups or ())
    if any(size < 1 for size in sizes) or sum(sizes) > len(masses):
        raise ValueError(f"fold groups {sizes} do not partition {len(masses)} sources")
    sizes += [1] * (len(masses) - sum(sizes))

    def step(m_a: Mass, m_b: Mass) -> Mass:
        return dempster(m_a, m_b) if lam is None else combine(m_a, m_b, lam)

    fused: Mass | None = None
    start = 0
    for size in sizes:
        piece = _as_mass(masses[start], f"masses[{start}]")
        for mass in masses[start + 1 : start + size]:
            piece = step(piece, mass)
        fused = piece if fused is None else step(fused, piece)
        start += size
    assert fused is not None
    return fused


def mean_pairwise_conflict(masses: Sequence[Mass]) -> float:
    """Eq. 14: K-bar, the mean of K(m_r, m_s) over the k(k-1)/2 pairs r < s.

    A diagnostic only (the paper does not add it to U_global); 0.0 with fewer than two
    sources.
    """
    k = len(masses)
    if k < 2:
        return 0.0
    total = sum(conflict(masses[r], masses[s]) for r in range(k) for s in range(r + 1, k))
    return 2.0 * total / (k * (k - 1))


def average_evidence(evidence_vectors: Sequence[Sequence[float] | np.ndarray]) -> Mass:
    """The "without conflict-preserving fusion" ablation (section 5.9, "simple evidence
    averaging"): the element-wise mean of the sources' evidence vectors, then Eqs. 2-6
    (:func:`from_evidence`). Conflict between sources is not seen: two sources with
    evidence 10 on different claims average to evidence 5 on each, and a source without
    evidence only halves the others' evidence (it does not add its own vacuity u = 1, as
    averaging the mass functions would). No sources give the vacuous mass."""
    if len(evidence_vectors) == 0:
        return vacuous(0)
    vectors = [np.asarray(v, dtype=float) for v in evidence_vectors]
    sizes = {v.shape for v in vectors}
    if len(sizes) > 1:
        raise ValueError(f"evidence vectors are over different frames: shapes {sorted(sizes)}")
    return from_evidence(np.mean(vectors, axis=0))
