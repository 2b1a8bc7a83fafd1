"""Figures on hand-made frames: the lambda sweep and the QX condition axis."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from grabrag import figures as f

from .test_tables import _sweep, frame


def test_lambda_sweep_figure(tmp_path: Path) -> None:
    sweep = pl.concat([_sweep(), _sweep().with_columns(model=pl.lit("m2"))])
    fig = f.lambda_sweep_figure(sweep, 0.6, 0.35, 0.65)
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == ["m", "m2"]
    assert [t.get_text() for t in axes[0].get_xticklabels()] == [
        "Dempster",
        "0",
        "0.3",
        "0.6",
        "1.0",
    ]
    lines = {
        line.get_label(): line
        for line in axes[0].get_lines()
        if not line.get_label().startswith("_")
    }
    assert set(lines) == {"EVID HwSA@QC", "EVID HwSA@QX", "EVID Ans@Q100"}
    # QC answer rate at the default taus, averaged over the two datasets: (qc + qc + 0.2) / 2
    assert list(lines["EVID HwSA@QC"].get_ydata()) == pytest.approx([90, 70, 50, 30, 20])
    assert lines["EVID HwSA@QC"].get_color() == f.policy_colours()["EVID"]
    f.save(fig, tmp_path / "lambda_sweep")
    assert (tmp_path / "lambda_sweep.pdf").read_bytes()[:4] == b"%PDF"


def _abstain_rows(datasets=("d",)) -> pl.DataFrame:
    rows = [
        ("m", dataset, policy, condition, "abstain_rate", 0.5, 0.4, 0.6)
        for dataset in datasets
        for policy in ("P1", "EVID_CB")
        for condition in ("Q100", "Q50", "Q0", "QC", "QX")
    ]
    return frame(
        rows, ("model", "dataset", "policy", "condition", "metric", "value", "ci_low", "ci_high")
    )


def test_abstention_figure_shades_every_should_abstain_condition() -> None:
    fig = f.abstention_by_condition(_abstain_rows(["nq+hotpotqa"]))
    (ax,) = fig.axes  # one panel per model
    assert [t.get_text() for t in ax.get_xticklabels()] == ["Q100", "Q50", "Q0", "QC", "QX"]
    (span,) = ax.patches[:1]
    assert (span.get_x(), span.get_x() + span.get_width()) == (1.5, 4.5)
    labels = [line.get_label() for line in ax.get_lines()]
    assert "EVID+CB" in labels and "P1 (IDK)" in labels
    assert "mean over hotpotqa, nq" in ax.get_title()
    # CI bands: one filled band per policy
    assert len(ax.collections) == 2
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["should abstain", "P1 (IDK)", "EVID+CB"]


def test_abstention_by_dataset_has_a_panel_per_model_and_dataset() -> None:
    fig = f.abstention_by_dataset(_abstain_rows(["hotpotqa", "nq"]))
    assert [ax.get_title() for ax in fig.axes] == ["m / hotpotqa", "m / nq"]


def test_qc_breakdown_shares_per_model_in_policy_order() -> None:
    rows = []
    for policy, (echo, hallucination, override) in {
        "P3": (0, 1, 1),
        "P1": (2, 1, 1),
        "EVID_CB": (0, 0, 0),
    }.items():
        for metric, value in (
            ("qc_echo", echo),
            ("qc_hallucination", hallucination),
            ("qc_override", override),
        ):
            rows.append(("m", "d", policy, "QC", metric, value))
    metrics = frame(rows, ("model", "dataset", "policy", "condition", "metric", "value"))
    fig = f.qc_breakdown_figure(metrics)
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_xticklabels()] == ["P1 (IDK)", "P3 (conflict)", "EVID+CB"]
    # stacked shares of the answered rows: P1 2/4 echo, 1/4, 1/4; P3 0, 1/2, 1/2; EVID+CB none
    heights = [round(bar.get_height(), 6) for bar in ax.patches]
    assert heights == [50.0, 0.0, 0.0, 25.0, 50.0, 0.0, 25.0, 50.0, 0.0]
    assert [t.get_text() for t in ax.texts] == ["n=4", "n=2", "n=0"]
