"""The comparison of two runs as a table (CSV, Markdown, LaTeX, HTML, tidy CSV) and a
figure (each compared cell's B - A with its CI), from
:func:`grabrag.evaluation.run_comparison.compare_sides`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on a cluster node
import matplotlib.pyplot as plt  # noqa: E402

from grabrag.evaluation.run_comparison import DIFFERS, Comparison  # noqa: E402
from grabrag.report.table_cells import pct, pct_ci  # noqa: E402
from grabrag.report.tabular import Number, Table, write_table  # noqa: E402

# How many flipped question ids a table cell lists before it says how many more.
LISTED_FLIPS = 20
METRIC_NAMES = {"answer_rate": "answer rate", "em": "EM"}


def _p(value: float) -> Number:
    return Number("n/a" if math.isnan(value) else f"{value:.3g}", value)


def _flipped(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:LISTED_FLIPS])
    more = len(ids) - LISTED_FLIPS
    return f"{shown} (+{more} more)" if more > 0 else shown


def comparison_table(comparisons: Sequence[Comparison], a: str, b: str, alpha: float) -> Table:
    """One row per compared cell and metric."""
    rows = []
    for c in comparisons:
        model, dataset, condition, policy = c.key
        rows.append(
            {
                "model": model,
                "dataset": dataset,
                "condition": condition,
                "policy": policy,
                "metric": METRIC_NAMES.get(c.metric, c.metric),
                "n": c.n,
                f"A: {a} %": pct(c.a, c.n),
                f"B: {b} %": pct(c.b, c.n),
                "B - A (pp)": pct_ci(c.diff, c.ci_low, c.ci_high, signed=True, n=c.n),
                "McNemar p": _p(c.p_value),
                "Holm p": _p(c.p_adjusted),
                "verdict": c.verdict,
                "decision flips": len(c.flips),
                "flipped questions": _flipped(c.flips),
            }
        )
    differing = sum(c.verdict == DIFFERS for c in comparisons)
    note = (
        f"Ours: {len(comparisons)} comparisons of the cells both runs have, paired by "
        f"question; {differing} differ at Holm-adjusted p < {alpha:g} (McNemar's exact test "
        "per comparison, Holm's step-down correction over all of them), the others are "
        "within noise. B - A: 95% paired-bootstrap CI over the shared questions."
    )
    return Table(rows, note=note)


def comparison_figure(comparisons: Sequence[Comparison], a: str, b: str) -> plt.Figure:
    """Each comparison's B - A (percentage points) with its CI, those that differ in red."""
    shown = [c for c in comparisons if c.n]
    height = max(2.0, 0.22 * len(shown) + 1.0)
    fig, ax = plt.subplots(figsize=(7.0, height))
    for y, c in enumerate(reversed(shown)):
        colour = "tab:red" if c.verdict == DIFFERS else "tab:grey"
        low, high = 100 * (c.diff - c.ci_low), 100 * (c.ci_high - c.diff)
        ax.errorbar(100 * c.diff, y, xerr=[[low], [high]], fmt="o", color=colour, ms=3)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(range(len(shown)))
    labels = ["/".join(c.key) + f" {METRIC_NAMES.get(c.metric, c.metric)}" for c in shown]
    ax.set_yticklabels(list(reversed(labels)), fontsize=6)
    ax.set_xlabel(f"B - A (percentage points): B = {b}, A = {a}")
    ax.set_title("Run comparison, paired by question (red: differs after Holm)", fontsize=9)
    fig.tight_layout()
    return fig


def write_comparison(
    comparisons: Sequence[Comparison], out: Path, a: str, b: str, alpha: float
) -> list[Path]:
    """``<out>/comparison.{csv,md,tex,tidy.csv,html}`` and ``comparison.{pdf,png}``."""
    out.mkdir(parents=True, exist_ok=True)
    caption = f"Run comparison: B ({b}) against A ({a}), every shared decision cell."
    paths = write_table(comparison_table(comparisons, a, b, alpha), out / "comparison", caption)
    fig = comparison_figure(comparisons, a, b)
    for suffix in (".pdf", ".png"):
        fig.savefig(out / f"comparison{suffix}", dpi=150)
        paths.append(out / f"comparison{suffix}")
    plt.close(fig)
    return paths
