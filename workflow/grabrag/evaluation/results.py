"""The stages' tidy CSVs read with polars: the metric table, the CDD diagnostics and the
per model x dataset sweeps (P3's thresholds, EvidentialRAG's fusion rules).

Each comes back as one frame over its files, labels as text, counts as integers and
numbers as floats (a missing number is null), so a user's analysis and the table and
figure scripts read them the same way::

    from grabrag.evaluation.results import read_metrics
    metrics = read_metrics(glob.glob("results/metrics/*.csv"))
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import polars as pl

from grabrag.report.tabular import read_csvs

# The number columns of the metric table and the diagnostics; every other column is a
# label, read as text.
ESTIMATES = ("value", "ci_low", "ci_high")


def read_metrics(paths: Iterable[str | Path]) -> pl.DataFrame:
    """Metric CSVs (``results/metrics/*.csv``) as one frame."""
    return read_csvs(paths, floats=ESTIMATES, integers=("n",))


def read_diagnostics(paths: Iterable[str | Path]) -> pl.DataFrame:
    """CDD diagnostics CSVs (``results/cdd/<model>/<dataset>/diagnostics.csv``) as one
    frame."""
    return read_csvs(paths, floats=ESTIMATES, integers=("n",))


SWEEP_LABELS = ("policy", "variant", "rule", "condition", "reason")
"""The text columns of the sweep CSVs (a fusion rule is "dempster" or a lambda as text)."""


def read_sweeps(paths: Iterable[str | Path], cells: Iterable[Mapping[str, str]]) -> pl.DataFrame:
    """Per model x dataset sweep CSVs (``P3_sweep.csv``, ``sweep.csv``) as one frame, with
    each file's ``model`` and ``dataset`` (from its cell, as the rule names it)."""
    labels = [{"model": cell["model"], "dataset": cell["dataset"]} for cell in cells]
    return read_csvs(paths, strings=SWEEP_LABELS, labels=labels)
