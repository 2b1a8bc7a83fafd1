"""Two runs compared cell by cell, paired by question (ours: no paper compares runs).

A *side* is one run's decision cells (``(model, dataset, condition, policy)`` -> rows),
from one results folder, or one model of it. Every cell both sides have is compared on the
questions both answered rows for:

- the **answer rate** (HwSA at Q0 and QC) and, where the context holds the answer (Q100,
  Q50), **EM**: B - A with a 95% paired percentile-bootstrap CI over the shared questions;
- **decision flips**: the questions whose decision (answer, abstain, unparseable) differs,
  with their ids;
- a **verdict**: McNemar's exact test on the questions whose outcome differs (the paired
  test for a 0/1 outcome per question), its p-values adjusted over every comparison made
  with Holm's step-down method; ``differs`` where the adjusted p is below ``alpha``,
  else ``within noise``.

Holm rather than Benjamini-Hochberg: the cells of one run share their questions (every
policy and condition of a dataset is asked on the same sample), so their tests are
dependent in ways nobody can vouch for; Holm controls the chance of calling any
unchanged cell different under every dependence, BH's false-discovery guarantee needs
independence or positive dependence. A "within noise" verdict is then a statement a
reader can rely on for the whole comparison, at the price of power.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from grabrag.core.conditions import SHOULD_ANSWER
from grabrag.scoring.answers import answered, row_em
from grabrag.scoring.bootstrap import percentile_interval, resample_indices

Key = tuple[str, str, str, str]  # (model, dataset, condition, policy)
Rows = Sequence[Mapping[str, Any]]
ALPHA = 0.05
WITHIN_NOISE, DIFFERS = "within noise", "differs"


@dataclass
class Comparison:
    """One cell's metric, A against B on their shared questions."""

    key: Key
    metric: str
    n: int
    a: float
    b: float
    diff: float
    ci_low: float
    ci_high: float
    p_value: float
    flips: list[str] = field(default_factory=list)
    p_adjusted: float = math.nan
    verdict: str = ""


def mcnemar_exact(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided exact McNemar p-value of paired 0/1 outcomes: a binomial test (p = 1/2) on
    the discordant pairs; 1 when no pair is discordant."""
    up = int(np.sum((a == 0) & (b == 1)))
    down = int(np.sum((a == 1) & (b == 0)))
    n = up + down
    if n == 0:
        return 1.0
    k = min(up, down)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input's order."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def _decision(row: Mapping[str, Any]) -> str:
    return str(row.get("decision"))


def compare_cell(
    key: Key,
    a_rows: Rows,
    b_rows: Rows,
    gold: Mapping[str, Sequence[str]],
    n_resamples: int,
    seed: int,
    confidence_level: float,
) -> list[Comparison]:
    """The comparisons of one shared cell (answer rate; EM where the context holds the
    answer), on the questions both sides have rows for, in A's order."""
    by_qid = {row["qid"]: row for row in b_rows}
    pairs = [(row, by_qid[row["qid"]]) for row in a_rows if row["qid"] in by_qid]
    flips = [a["qid"] for a, b in pairs if _decision(a) != _decision(b)]
    outcomes = {"answer_rate": lambda row, qid: float(answered(row))}
    if key[2] in SHOULD_ANSWER:
        outcomes["em"] = lambda row, qid: row_em(row, gold.get(qid, []))
    n = len(pairs)
    # a cell's own resamples (seeded by the config seed and the cell), the same on rerun
    cell_seed = (seed, zlib.crc32("/".join(key).encode("utf-8")))
    indices = resample_indices(n, n_resamples, cell_seed)
    out = []
    for metric, score in outcomes.items():
        a = np.array([score(x, x["qid"]) for x, _ in pairs])
        b = np.array([score(y, y["qid"]) for _, y in pairs])
        if n == 0:
            out.append(Comparison(key, metric, 0, *(math.nan,) * 5, 1.0, flips))
            continue
        d = b - a
        low, high, _ = percentile_interval(d[indices].mean(axis=1), confidence_level)
        out.append(
            Comparison(
                key,
                metric,
                n,
                float(a.mean()),
                float(b.mean()),
                float(d.mean()),
                float(low[0]),
                float(high[0]),
                mcnemar_exact(a, b),
                flips,
            )
        )
    return out


def compare_sides(
    a: Mapping[Key, Rows],
    b: Mapping[Key, Rows],
    gold: Mapping[tuple[str, str], Mapping[str, Sequence[str]]],
    *,
    n_resamples: int = 10_000,
    seed: int = 42,
    confidence_level: float = 0.95,
    alpha: float = ALPHA,
) -> list[Comparison]:
    """Every cell both sides have, compared, with Holm-adjusted verdicts over all of them.
    ``gold``: (dataset, condition) -> qid -> gold answers."""
    shared = [key for key in a if key in b]
    found: list[Comparison] = []
    for key in shared:
        cell_gold = gold.get((key[1], key[2]), {})
        found += compare_cell(key, a[key], b[key], cell_gold, n_resamples, seed, confidence_level)
    for comparison, adjusted in zip(found, holm([c.p_value for c in found]), strict=True):
        comparison.p_adjusted = adjusted
        comparison.verdict = DIFFERS if adjusted < alpha else WITHIN_NOISE
    return found


def model_side(cells: Mapping[Key, Rows], model: str, as_model: str) -> dict[Key, Rows]:
    """One model's cells of a run, keyed as if made by ``as_model`` (two models of one run
    are compared cell by cell as two sides)."""
    return {(as_model, *key[1:]): rows for key, rows in cells.items() if key[0] == model}
