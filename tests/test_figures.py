"""Figures on hand-made frames: the lambda sweep and the QX condition axis."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from grabrag.report import figures as f

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


def _errorbar_sizes(ax) -> list[list[float]]:
    """Each error-bar set's half-lengths (one sd), in drawing order."""
    from matplotlib.container import ErrorbarContainer

    sizes = []
    for container in ax.containers:
        if isinstance(container, ErrorbarContainer):
            (segments,) = container.lines[2]
            sizes.append([round((s[1][1] - s[0][1]) / 2, 6) for s in segments.get_segments()])
    return sizes


def test_abstention_by_dataset_draws_the_sd_over_seeds_as_error_bars() -> None:
    base = _abstain_rows(["nq"])
    other = base.with_columns(value=pl.lit(0.7))
    per_seed = pl.concat(
        [base.with_columns(seed=pl.lit("42")), other.with_columns(seed=pl.lit("7"))]
    )
    fig = f.abstention_by_dataset(base, per_seed)
    (ax,) = fig.axes
    # abstain rates 0.5 and 0.7: sd 0.1414 -> 14.14 points, at each of the five conditions
    sd = round(100 * float(np.std([0.5, 0.7], ddof=1)), 4)
    assert [[round(v, 4) for v in bars] for bars in _errorbar_sizes(ax)] == [[sd] * 5] * 2
    assert "bars: sd over seeds 42, 7" in fig._suptitle.get_text()
    # one seed: no bars, the title as before
    fig = f.abstention_by_dataset(base, base.with_columns(seed=pl.lit("42")))
    assert _errorbar_sizes(fig.axes[0]) == [] and "seeds" not in fig._suptitle.get_text()


def test_qc_breakdown_draws_the_sd_of_each_share_over_seeds() -> None:
    def counts(echo: float, hallucination: float, override: float, seed: str) -> pl.DataFrame:
        parts = (("qc_echo", echo), ("qc_hallucination", hallucination), ("qc_override", override))
        rows = [("m", "d", "P1", "QC", metric, value, seed) for metric, value in parts]
        return frame(rows, ("model", "dataset", "policy", "condition", "metric", "value", "seed"))

    first, second = counts(2, 1, 1, "42"), counts(0, 2, 2, "7")
    fig = f.qc_breakdown_figure(first.drop("seed"), pl.concat([first, second]))
    (ax,) = fig.axes
    # shares (%): echo 50 and 0, hallucination 25 and 50, override 25 and 50
    assert _errorbar_sizes(ax) == [
        [round(float(np.std([50, 0], ddof=1)), 6)],
        [round(float(np.std([25, 50], ddof=1)), 6)],
        [round(float(np.std([25, 50], ddof=1)), 6)],
    ]
    assert "bars: sd over seeds 42, 7" in fig._suptitle.get_text()


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


def _p3_sweep_frame() -> pl.DataFrame:
    # two cells; at cutoff 60 HwSA@QC is 0.1 + threshold / 2 in one cell and twice that
    # in the other; at cutoff 50 a constant 0.9 (never drawn below)
    rows = []
    for model, scale in (("m", 1.0), ("m2", 2.0)):
        for cutoff in (50, 60):
            for threshold in (0.6, 0.7, 0.8):
                hwsa = 0.9 if cutoff == 50 else scale * (0.1 + threshold / 2) / 2
                rows.append((model, "d", threshold, cutoff, hwsa, 0.2, 0.8))
    return frame(rows, ("model", "dataset", "threshold", "cutoff", "hwsa_qc", "fac_q100",
                        "ans_q100"))  # fmt: skip


def test_p3_sweep_figure_draws_the_configured_cutoff_and_threshold() -> None:
    fig = f.p3_sweep_figure(_p3_sweep_frame(), cutoff=60, threshold=0.7)
    (ax,) = fig.axes
    assert ax.get_title() == "P3 threshold sweep (confidence cutoff 60)"
    lines = {line.get_label(): line for line in ax.get_lines()}
    # the mean over the two cells: 1.5 x (0.1 + t / 2) / 2, in percent
    assert list(lines["HwSA@QC"].get_ydata()) == pytest.approx(
        [75 * (0.1 + t / 2) for t in (0.6, 0.7, 0.8)]
    )
    marker = lines["threshold used (0.7)"]
    assert list(marker.get_xdata()) == [0.7, 0.7]


def test_figure_and_table_captions_read_the_config() -> None:
    from grabrag.report.tabular import render_caption, render_rst

    from .conftest import REPO

    config = {
        "policies": {"confidence_cutoff": 60, "f1_threshold": 0.7},
        "evidential": {"lam": 0.4, "tau1": 0.3, "tau2": 0.7},
    }
    tables = REPO / "workflow/report/tables"
    caption = render_caption((tables / "table12_p3_sweep.rst").read_text(), config)
    assert caption == "Table 12: P3 sensitivity to the F1 threshold, confidence cutoff 60 (%)."
    cutoff = render_caption((tables / "table12b_cutoff_sweep.rst").read_text(), config)
    assert "F1 threshold, 0.7 (the paper: 0.8)" in cutoff and "cutoff, 60 (the paper" in cutoff
    lam = render_caption((tables / "evid_lambda_sweep.rst").read_text(), config)
    assert "lambda, 0.4)" in lam and "(tau1 0.3, tau2 0.7)" in lam
    # the figures' captions, as the report renders them
    figures = REPO / "workflow/report/figures"
    for name, expected in (
        ("p3_sweep", "cutoff (60)"),
        ("p3_sweep", "threshold (0.7)"),
        ("lambda_sweep", "(tau1 0.3, tau2 0.7)"),
    ):
        text = render_rst((figures / f"{name}.rst").read_text(), config)
        assert expected in text, (name, text)
    # a caption naming a setting the config lacks fails loudly, not with a blank
    with pytest.raises(Exception, match="confidence_cutoff"):
        render_caption((tables / "table12_p3_sweep.rst").read_text(), {"policies": {}})
