"""The paper's figures (PDF + PNG): one colour per policy everywhere, labelled axes."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display on a cluster node
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from grabrag.core import registry  # noqa: E402
from grabrag.core.conditions import NAMES as CONDITIONS  # noqa: E402
from grabrag.core.conditions import SHOULD_ABSTAIN  # noqa: E402
from grabrag.core.io import atomic_write  # noqa: E402
from grabrag.core.outputs import (  # noqa: E402
    CONTEXT_ROWS,
    DECISION_ROWS,
    EVID_SWEEPS,
    METRICS,
    METRICS_OVER_DATASETS,
    METRICS_PER_SEED,
    P3_SWEEPS,
)
from grabrag.report.specs import FigureSpec, Sources  # noqa: E402
from grabrag.report.tabular import group_means, in_order, same_float, where  # noqa: E402
from grabrag.scoring.calibration import confidence_and_correct, reliability_bins, risk_coverage  # noqa: E402

# Colours of registered policies that name none, in registration order.
SPARE_COLOURS = ("#000000", "#a6761d", "#6a3d9a", "#b15928", "#1f78b4", "#fb9a99")


def policy_colours() -> dict[str, str]:
    """Colour of every policy the figures draw (the registry's ``in_figures``), in
    registration order: one colour per policy in every figure."""
    shown = [p for p in registry.policies().values() if p.in_figures]
    spare = iter(SPARE_COLOURS * len(shown))
    return {p.name: p.colour or next(spare) for p in shown}


def policy_names() -> dict[str, str]:
    """Legend label of every policy the figures draw (the registry's ``label``)."""
    return {p.name: p.label or p.name for p in registry.policies().values() if p.in_figures}


# The lambda sweep's x axis: normalised Dempster as its own tick, then lambda values.
LAMBDA_TICKS = (("dempster", "Dempster"), ("0", "0"), ("0.3", "0.3"), ("0.6", "0.6"), ("1", "1.0"))


def lambda_ticks(rules: Any) -> list[tuple[str, str]]:
    """(rule, label) of the sweep's fusion rules: Dempster first, then lambda ascending
    (the grid is configurable: evidential.lambda_grid)."""
    present = {str(r) for r in rules} - {"average"}
    numbers = sorted((r for r in present if r != "dempster"), key=float)
    ticks = [("dempster", "Dempster")] if "dempster" in present else []
    return ticks + [(r, f"{float(r):g}" if r != "1" else "1.0") for r in numbers]


def save(fig: Any, stem: str | Path) -> None:
    """Write stem.pdf and stem.png atomically."""
    stem = Path(stem)
    for suffix in (".pdf", ".png"):
        with atomic_write(stem.with_suffix(suffix), "wb") as handle:
            # No creation date in the PDF: two runs give byte-identical files.
            metadata = {"CreationDate": None} if suffix == ".pdf" else None
            fig.savefig(handle, format=suffix[1:], dpi=150, bbox_inches="tight", metadata=metadata)
    plt.close(fig)


def _grid(cells: Sequence[tuple[str, str]], width: float = 3.6, height: float = 3.0):
    models = in_order("model", (m for m, _ in cells))
    datasets = in_order("dataset", (d for _, d in cells))
    fig, axes = plt.subplots(
        len(datasets),
        len(models),
        figsize=(width * len(models), height * len(datasets)),
        squeeze=False,
        sharey=True,
    )
    return fig, axes, models, datasets


def _floats(values: Sequence[float | None]) -> np.ndarray:
    """Numbers to plot, a missing one (None) as NaN: matplotlib leaves a gap there."""
    return np.array([np.nan if v is None else float(v) for v in values], dtype=float)


def _by(frame: pl.DataFrame, key: str, keys: Sequence[Any], column: str) -> np.ndarray:
    """``column`` at each of ``keys`` of the ``key`` column (NaN where a key is absent)."""
    found = dict(zip(frame[key], frame[column], strict=True))
    return _floats([found.get(k) for k in keys])


def seeds_of(per_seed: pl.DataFrame | None) -> list[str]:
    """The construction seeds a per-seed metric frame holds (none without one)."""
    if per_seed is None or per_seed.is_empty():
        return []
    return list(dict.fromkeys(per_seed["seed"]))


def seed_sd(per_seed: pl.DataFrame | None, metric: str) -> dict[tuple[str, ...], float]:
    """The sample sd over the seeds of ``metric`` per (model, dataset, policy, condition),
    where at least two seeds have it; nothing with one seed."""
    if len(seeds_of(per_seed)) < 2:
        return {}
    values: dict[tuple[str, ...], list[float]] = {}
    for row in where(per_seed, metric=metric).iter_rows(named=True):
        if row["value"] is not None and not math.isnan(row["value"]):
            key = (row["model"], row["dataset"], row["policy"], row["condition"])
            values.setdefault(key, []).append(float(row["value"]))
    return {key: float(np.std(v, ddof=1)) for key, v in values.items() if len(v) > 1}


def _abstention_panel(
    ax: Any,
    rates: pl.DataFrame,
    conditions: Sequence[str],
    spread: Mapping[tuple[str, str], float] | None = None,
) -> None:
    """One panel: abstention rate (%) per condition, a line per policy with its 95% CI
    band, the should-abstain conditions shaded; with ``spread`` ((policy, condition) ->
    sd over the construction seeds), error bars of one sd."""
    shaded = [k for k, c in enumerate(conditions) if c in SHOULD_ABSTAIN]
    if shaded:
        ax.axvspan(
            min(shaded) - 0.5, max(shaded) + 0.5, color="0.92", zorder=0, label="should abstain"
        )
    x = range(len(conditions))
    names = policy_names()
    for policy, colour in policy_colours().items():
        rows = where(rates, policy=policy)
        value = _by(rows, "condition", conditions, "value")
        if np.isnan(value).all():
            continue
        ax.plot(x, 100 * value, marker="o", color=colour, label=names[policy])
        ax.fill_between(
            x,
            100 * _by(rows, "condition", conditions, "ci_low"),
            100 * _by(rows, "condition", conditions, "ci_high"),
            color=colour,
            alpha=0.15,
        )
        sd = _floats([(spread or {}).get((policy, c)) for c in conditions])
        if not np.isnan(sd).all():
            ax.errorbar(x, 100 * value, yerr=100 * sd, fmt="none", ecolor=colour, capsize=2, lw=1)
    ax.set_xticks(list(x), conditions)
    ax.set_xlim(-0.5, len(conditions) - 0.5)
    ax.set_ylim(-2, 102)
    ax.set_xlabel("context condition")


def _legend_below(fig: Any, ncol: int = 7) -> None:
    """One legend for every panel, under them (inside a panel it would hide lines); a
    policy that only some panels show is still listed once."""
    entries: dict[str, Any] = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    order = ["should abstain", *policy_names().values()]
    labels = sorted(entries, key=lambda x: order.index(x) if x in order else len(order))
    if entries:
        fig.legend(
            [entries[label] for label in labels],
            labels,
            loc="upper center",
            ncol=min(ncol, len(entries)),
            fontsize=8,
            bbox_to_anchor=(0.5, 0.0),
            frameon=False,
        )


def _abstain_rates(frame: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    rates = where(frame, metric="abstain_rate").filter(pl.col("condition").is_in(CONDITIONS))
    return rates, [c for c in CONDITIONS if c in set(rates["condition"])]


def abstention_by_condition(means: pl.DataFrame) -> Any:
    """Figure 2: abstention rate by condition averaged over the datasets, one panel per
    model, one line per policy with 95% bootstrap CI bands, should-abstain conditions
    shaded. ``means``: rows of :func:`grabrag.evaluation.evaluate.abstention_over_datasets`."""
    rates, conditions = _abstain_rates(means)
    models = in_order("model", rates["model"]) or [""]
    fig, axes = plt.subplots(
        1, len(models), figsize=(4.2 * len(models), 3.6), squeeze=False, sharey=True
    )
    for ax, model in zip(axes[0], models, strict=True):
        cell = where(rates, model=model)
        _abstention_panel(ax, cell, conditions)
        named = (d for names in cell["dataset"] for d in str(names).split("+"))
        averaged = in_order("dataset", named)
        ax.set_title(f"{model}\n(mean over {', '.join(averaged)})", fontsize=9)
    axes[0][0].set_ylabel("abstention rate (%)")
    fig.suptitle("Abstention rate by context condition (95% bootstrap CI)", fontsize=10)
    fig.tight_layout()
    _legend_below(fig, ncol=min(7, 3 + len(models)))
    return fig


def abstention_by_dataset(metrics: pl.DataFrame, per_seed: pl.DataFrame | None = None) -> Any:
    """Figure 2 per dataset: one panel per model (columns) and dataset (rows). With
    ``per_seed`` (the metrics of every construction seed's build, a ``seed`` column) from
    two seeds or more, each point also has an error bar of one sd over the seeds."""
    rates, conditions = _abstain_rates(metrics)
    sds = seed_sd(per_seed, "abstain_rate")
    cells = sorted(set(zip(rates["model"], rates["dataset"], strict=True)))
    fig, axes, models, datasets = _grid(cells, width=4.2, height=3.4)
    for i, dataset in enumerate(datasets):
        for j, model in enumerate(models):
            ax = axes[i][j]
            cell = where(rates, model=model, dataset=dataset)
            spread = {(p, c): sd for (m, d, p, c), sd in sds.items() if (m, d) == (model, dataset)}
            _abstention_panel(ax, cell, conditions, spread)
            ax.set_title(f"{model} / {dataset}", fontsize=9)
            if j == 0:
                ax.set_ylabel("abstention rate (%)")
    title = "Abstention rate by context condition and dataset (95% bootstrap CI"
    if sds:
        title += f"; bars: sd over seeds {', '.join(seeds_of(per_seed))}"
    fig.suptitle(title + ")", fontsize=10)
    fig.tight_layout()
    _legend_below(fig, ncol=min(7, 3 + len(models)))
    return fig


def _means(frame: pl.DataFrame, by: str, column: str) -> tuple[list[Any], np.ndarray]:
    """(sorted values of ``by``, the mean of ``column`` at each)."""
    means = group_means(frame, by, [column])
    return list(means), _floats([values[column] for values in means.values()])


def p3_sweep_figure(sweep: pl.DataFrame, cutoff: float = 50, threshold: float = 0.8) -> Any:
    """P3's HwSA@QC, FAC@Q100 and Ans@Q100 against the F1 threshold (macro average) at the
    configured confidence ``cutoff``, the configured ``threshold`` marked."""
    chosen = sweep.filter(same_float("cutoff", cutoff))
    fig, ax = plt.subplots(figsize=(5, 3.4))
    for column, label, style in (
        ("hwsa_qc", "HwSA@QC", "-o"),
        ("fac_q100", "FAC@Q100", "-s"),
        ("ans_q100", "Ans@Q100", "-^"),
    ):
        if column in chosen.columns:
            thresholds, means = _means(chosen, "threshold", column)
            ax.plot(thresholds, 100 * means, style, label=label)
    ax.axvline(threshold, color="0.6", linestyle=":", label=f"threshold used ({threshold:g})")
    ax.set_xlabel("P3 F1 agreement threshold")
    ax.set_ylabel("rate (%)")
    ax.set_ylim(-2, 102)
    ax.set_title(f"P3 threshold sweep (confidence cutoff {cutoff:g})", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def risk_coverage_figure(
    curves: Mapping[tuple[str, str, str], tuple[Sequence[float], Sequence[float]]],
) -> Any:
    """Risk-coverage curves per model x dataset, one line per policy (all conditions)."""
    cells = sorted({(m, d) for m, d, _ in curves})
    fig, axes, models, datasets = _grid(cells)
    colours, names = policy_colours(), policy_names()
    order = list(colours)
    shown = {key: curve for key, curve in curves.items() if key[2] in colours}
    for (model, dataset, policy), (coverage, risk) in sorted(
        shown.items(), key=lambda item: order.index(item[0][2])
    ):
        ax = axes[datasets.index(dataset)][models.index(model)]
        if len(coverage):
            ax.plot(coverage, risk, color=colours[policy], label=names[policy])
    for i, dataset in enumerate(datasets):
        for j, model in enumerate(models):
            ax = axes[i][j]
            ax.set_title(f"{model} / {dataset}", fontsize=9)
            ax.set_xlabel("coverage")
            ax.set_xlim(0, 1)
            ax.set_ylim(-0.02, 1.02)
            if j == 0:
                ax.set_ylabel("risk (1 - accuracy)")
    fig.suptitle("Risk-coverage (area under the curve = AURC)", fontsize=10)
    fig.tight_layout()
    _legend_below(fig, ncol=4)
    return fig


def reliability_figure(bins: Mapping[str, Sequence[Mapping[str, float]]]) -> Any:
    """Reliability diagrams: accuracy per confidence bin, one panel per policy."""
    colours, names = policy_colours(), policy_names()
    policies = [p for p in colours if p in bins]
    # At most 7 panels a row (13 policies with the CDD family make two rows).
    ncols = max(1, min(7, len(policies)))
    nrows = max(1, math.ceil(len(policies) / ncols))
    fig, axes = plt.subplots(
        nrows,
        ncols,
        figsize=(3 * ncols, 3.2 * nrows),
        squeeze=False,
        sharey=True,
    )
    for ax in axes.flat[len(policies) :]:
        ax.set_visible(False)
    for ax, policy in zip(axes.flat, policies, strict=False):
        rows = [b for b in bins[policy] if b["n"] and not math.isnan(b["accuracy"])]
        ax.plot([0, 1], [0, 1], color="0.6", linestyle=":", label="perfect calibration")
        ax.bar(
            [b["mid"] for b in rows],
            [b["accuracy"] for b in rows],
            width=0.09,
            color=colours[policy],
            alpha=0.8,
            edgecolor="0.2",
            linewidth=0.6,
            label="accuracy",
        )
        # Rows per bin, so a bin with accuracy 0 is told apart from an empty one.
        for b in rows:
            ax.annotate(
                f"n={b['n']}",
                (b["mid"], b["accuracy"]),
                xytext=(0, 2),
                textcoords="offset points",
                ha="center",
                fontsize=6,
            )
        ax.set_title(names[policy], fontsize=9)
        ax.set_xlabel("confidence (bin midpoint)")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.02)
    for row in axes:
        row[0].set_ylabel("fraction correct")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("Reliability (10 bins, all models, datasets and conditions)", fontsize=10)
    fig.tight_layout()
    return fig


QC_PARTS = (
    ("qc_echo", "echo (planted answer)", "#c44e52"),
    ("qc_hallucination", "hallucination", "#8c8c8c"),
    ("qc_override", "correct override", "#55a868"),
)


def _qc_sums(metrics: pl.DataFrame) -> dict[tuple[str, str], dict[str, float]]:
    """(model, policy) -> each QC source's count (and qc_answered), summed over datasets."""
    counts = where(metrics, condition="QC").filter(
        pl.col("policy").is_in(list(policy_colours())),
        pl.col("metric").is_in([c for c, _, _ in QC_PARTS] + ["qc_answered"]),
    )
    table: dict[tuple[str, str], dict[str, float]] = {}
    for row in counts.iter_rows(named=True):
        if row["value"] is None or math.isnan(row["value"]):
            continue
        sums = table.setdefault((row["model"], row["policy"]), {})
        sums[row["metric"]] = sums.get(row["metric"], 0.0) + float(row["value"])
    return table


def _qc_shares(sums: Mapping[str, float]) -> dict[str, float]:
    """Each QC source's share (%) of the answered rows."""
    answered = sum(sums.get(c, 0.0) for c, _, _ in QC_PARTS)
    return {c: 100 * sums.get(c, 0.0) / answered if answered else 0.0 for c, _, _ in QC_PARTS}


def _qc_share_sd(per_seed: pl.DataFrame | None) -> dict[tuple[str, str, str], float]:
    """(model, policy, source) -> the sd over the seeds of its share, where two seeds or
    more answered a QC row."""
    seeds = seeds_of(per_seed)
    if len(seeds) < 2:
        return {}
    shares: dict[tuple[str, str, str], list[float]] = {}
    for seed in seeds:
        for (model, policy), sums in _qc_sums(where(per_seed, seed=seed)).items():
            if sum(sums.get(c, 0.0) for c, _, _ in QC_PARTS):
                for column, share in _qc_shares(sums).items():
                    shares.setdefault((model, policy, column), []).append(share)
    return {k: float(np.std(v, ddof=1)) for k, v in shares.items() if len(v) > 1}


def qc_breakdown_figure(metrics: pl.DataFrame, per_seed: pl.DataFrame | None = None) -> Any:
    """Answered QC rows split into echo / hallucination / correct override (Table 3's
    sources), one panel per model, one bar per policy (datasets pooled): the share of the
    answered rows (%), with the number answered over each bar. With ``per_seed`` from two
    construction seeds or more, each share has an error bar of one sd over the seeds."""
    colours, names = policy_colours(), policy_names()
    table = _qc_sums(metrics)
    sds = _qc_share_sd(per_seed)
    models = in_order("model", (m for m, _ in table)) or [""]
    order = list(colours)
    width = max(len([p for m, p in table if m == model]) for model in models) if table else 1
    fig, axes = plt.subplots(
        1,
        len(models),
        figsize=(max(4.0, 0.55 * width + 1.5) * len(models), 3.8),
        squeeze=False,
        sharey=True,
    )
    for ax, model in zip(axes[0], models, strict=True):
        policies = sorted((p for m, p in table if m == model), key=lambda p: order.index(p))
        x = list(range(len(policies)))
        bottom = [0.0] * len(policies)
        answered = [sum(table[(model, p)].get(c, 0.0) for c, _, _ in QC_PARTS) for p in policies]
        for column, label, colour in QC_PARTS:
            shares = [
                100 * table[(model, p)].get(column, 0.0) / a if a else 0.0
                for p, a in zip(policies, answered, strict=True)
            ]
            ax.bar(x, shares, bottom=bottom, label=label, color=colour)
            bottom = [b + v for b, v in zip(bottom, shares, strict=True)]
            sd = _floats([sds.get((model, p, column)) for p in policies])
            if not np.isnan(sd).all():
                ax.errorbar(x, bottom, yerr=sd, fmt="none", ecolor="0.2", capsize=2, lw=1)
        for k, a in enumerate(answered):
            ax.annotate(
                f"n={int(a)}",
                (k, 100 if a else 0),
                xytext=(0, 2),
                textcoords="offset points",
                ha="center",
                fontsize=7,
            )
        ax.set_xticks(x, [names[p] for p in policies], rotation=45, ha="right", fontsize=7)
        ax.set_ylim(0, 110)
        ax.set_title(model, fontsize=9)
    axes[0][0].set_ylabel("share of answered QC rows (%)")
    title = "What models say when they answer under misleading context (QC)"
    if sds:
        title += f" (bars: sd over seeds {', '.join(seeds_of(per_seed))})"
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    _legend_below(fig, ncol=3)
    return fig


def lambda_sweep_figure(sweep: pl.DataFrame, lam: float, tau1: float, tau2: float) -> Any:
    """EvidentialRAG's fusion-rule sweep at the configured thresholds: answer rate at QC and
    QX (should abstain: lower is safer) and Ans@Q100 against lambda, normalised Dempster as
    its own tick; one panel per model (datasets averaged), one colour per policy."""
    chosen = where(sweep, variant="evid").filter(same_float("tau1", tau1), same_float("tau2", tau2))
    models = in_order("model", chosen["model"]) or [""]
    colours, names = policy_colours(), policy_names()
    fig, axes = plt.subplots(
        1, len(models), figsize=(4.2 * len(models), 3.4), squeeze=False, sharey=True
    )
    ticks_named = lambda_ticks(chosen["rule"]) if len(chosen) else list(LAMBDA_TICKS)
    x = list(range(len(ticks_named)))
    styles = (("QC", "-o", "HwSA@QC"), ("QX", "--s", "HwSA@QX"), ("Q100", ":^", "Ans@Q100"))
    default = f"{float(lam):g}"
    for ax, model in zip(axes[0], models, strict=True):
        cell = where(chosen, model=model)
        for policy, colour in colours.items():
            rows = where(cell, policy=policy)
            if not len(rows):
                continue
            for condition, style, label in styles:
                rules, means = _means(where(rows, condition=condition), "rule", "answer_rate")
                means = _floats(
                    [dict(zip(rules, means, strict=True)).get(r) for r, _ in ticks_named]
                )
                if np.isnan(means).all():
                    continue
                ax.plot(
                    x,
                    100 * means,
                    style,
                    color=colour,
                    label=f"{names[policy]} {label}",
                )
        ticks = [rule for rule, _ in ticks_named]
        if default in ticks:
            ax.axvline(ticks.index(default), color="0.6", linestyle=":", zorder=0)
        ax.set_xticks(x, [name for _, name in ticks_named])
        ax.set_xlabel("fusion rule (lambda; dotted: configured)")
        ax.set_ylim(-2, 102)
        ax.set_title(model, fontsize=9)
    axes[0][0].set_ylabel("rate (%)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(
            handles, labels, loc="lower center", ncol=3, fontsize=7, bbox_to_anchor=(0.5, -0.12)
        )
    fig.suptitle(
        f"EvidentialRAG lambda sweep (tau1={tau1:g}, tau2={tau2:g}; datasets averaged)",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


# --- the figures this module declares (grabrag.report.specs) -------------------------------


def scored(s: Sources) -> dict[tuple[str, str, str], tuple[list[float], list[bool]]]:
    """(model, dataset, policy) -> pooled (confidence, correct) over the conditions."""
    gold = {
        (cell["dataset"], cell["condition"]): {r["qid"]: r["answers"] for r in rows}
        for cell, rows in s.read(CONTEXT_ROWS)
    }
    pooled: dict[tuple[str, str, str], tuple[list[float], list[bool]]] = {}
    for cell, rows in s.read(DECISION_ROWS):
        dataset, condition = cell["dataset"], cell["condition"]
        conf, correct = confidence_and_correct(rows, gold[(dataset, condition)], condition)
        key = (cell["model"], dataset, cell["policy"])
        pooled.setdefault(key, ([], []))
        pooled[key][0].extend(conf)
        pooled[key][1].extend(correct)
    return pooled


def _risk_coverage(s: Sources) -> Any:
    return risk_coverage_figure({key: risk_coverage(*pair) for key, pair in scored(s).items()})


def _reliability(s: Sources) -> Any:
    by_policy: dict[str, tuple[list[float], list[bool]]] = {}
    for (_, _, policy), (conf, correct) in scored(s).items():
        by_policy.setdefault(policy, ([], []))
        by_policy[policy][0].extend(conf)
        by_policy[policy][1].extend(correct)
    return reliability_figure({p: reliability_bins(*pair) for p, pair in by_policy.items()})


def _p3_sweep(s: Sources) -> Any:
    p3 = s.setting("p3")
    return p3_sweep_figure(s.read(P3_SWEEPS), p3["cutoff"], p3["threshold"])


def _lambda_sweep(s: Sources) -> Any:
    fusion = s.setting("fusion")
    return lambda_sweep_figure(s.read(EVID_SWEEPS), fusion["lam"], fusion["tau1"], fusion["tau2"])


_SCORED = (DECISION_ROWS, CONTEXT_ROWS)
FIGURES = (
    # Figure 2 averages the datasets, with CIs from the metrics' resamples.
    FigureSpec(
        "abstention_by_condition",
        lambda s: abstention_by_condition(s.read(METRICS_OVER_DATASETS)),
        (METRICS_OVER_DATASETS,),
    ),
    FigureSpec(
        "abstention_by_dataset",
        lambda s: abstention_by_dataset(s.read(METRICS), s.read(METRICS_PER_SEED)),
        (METRICS, METRICS_PER_SEED),
    ),
    FigureSpec("p3_sweep", _p3_sweep, (P3_SWEEPS,), ("p3",)),
    FigureSpec("risk_coverage", _risk_coverage, _SCORED),
    FigureSpec("reliability", _reliability, _SCORED),
    FigureSpec(
        "qc_breakdown",
        lambda s: qc_breakdown_figure(s.read(METRICS), s.read(METRICS_PER_SEED)),
        (METRICS, METRICS_PER_SEED),
    ),
    FigureSpec("lambda_sweep", _lambda_sweep, (EVID_SWEEPS,), ("fusion",), lambda f: f.evidential),
)
"""Every figure of the paper, in the order a run lists them."""
