"""GRAB-RAG's own tables from the tidy metric table: Tables 1-3 and 7-11 (HwSA, the policy
comparison, QC answer sources, FAC, AURC, ECE), normalised HwSA, selection bias, the parse
failures, Table 13's seed sensitivity and section 6's aggregates.

Each builder takes polars frames (the metric CSVs as read) and returns a
:class:`~grabrag.report.tabular.Table` whose cells come from
:mod:`grabrag.report.table_cells`; :mod:`grabrag.report.tables` declares when each is built.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from grabrag.core import registry
from grabrag.core.conditions import PAPER, SEED_COMPARED
from grabrag.core.outputs import GENERATION_REPORTS, METRICS, SEED_METRICS, read_metrics
from grabrag.core.registry import PAPER_POLICIES
from grabrag.evaluation.evaluate import policy_sort_key
from grabrag.report.specs import Sources, TableSpec
from grabrag.report.table_cells import (
    NOT_AVAILABLE,
    _cells,
    _ci,
    _lookup,
    _mean,
    _nan,
    _policies,
    _pp,
    _value,
    pct,
    policy_table_policies,
    with_note,
)
from grabrag.report.tabular import NAN, Label, Number, Table, in_order, order_key, where


def _sum(values: Sequence[float | None]) -> float:
    """The sum of the values that are numbers (0 if none)."""
    return float(np.sum([float(v) for v in values if not _nan(v)]))


def _sizes_note(label: str, sizes: Mapping[str, set[int]]) -> str:
    """ "<label>: 202 (nq), 330 (hotpotqa)." from the sizes seen per group; a group whose
    cells differ shows its range."""
    parts = []
    for group, values in sizes.items():
        low, high = min(values), max(values)
        parts.append(f"{low} ({group})" if low == high else f"{low}-{high} ({group})")
    return f"{label}: {', '.join(parts)}." if parts else ""


def table_hwsa(metrics: pl.DataFrame, with_ci: bool) -> Table:
    """Table 1 (with_ci False) and Table 7: HwSA at Q0 vs QC on paired QC-eligible questions."""
    get = _lookup(metrics)
    out = []
    sizes: dict[str, set[int]] = {}
    for model, dataset in _cells(metrics):
        for policy in _policies(metrics):
            q0, qc = (
                get(model, dataset, policy, "Q0", "hwsa"),
                get(model, dataset, policy, "QC", "hwsa"),
            )
            diff = get(model, dataset, policy, "QC-Q0", "hwsa_diff")
            row = {"model": model, "dataset": dataset, "policy": policy}
            n = int(qc.n) if qc is not None else 0
            sizes.setdefault(dataset, set()).add(n)
            if with_ci:
                # Table 7 has the n column (the paper prints it once per dataset block).
                row["n"] = n
                row["HwSA(Q0) [95% CI]"] = _ci(q0)
                row["HwSA(QC) [95% CI]"] = _ci(qc)
            else:
                row["HwSA_Q0"], row["HwSA_QC"] = pct(_value(q0)), pct(_value(qc))
            # Table 7 prints the bounds to a decimal with signs, Table 1 as whole percents.
            row["Delta [95% CI]"] = _ci(diff, signed=True, whole_bounds=not with_ci)
            out.append(row)
    table = Table(out)
    return table if with_ci else with_note(table, _sizes_note("n = QC-eligible questions", sizes))


def _pivot(
    frame: pl.DataFrame, index: Sequence[str], column: str, how: str = "mean"
) -> dict[tuple[Any, ...], dict[str, float]]:
    """``frame``'s values as {index key: {column value: mean or sum}}, keys sorted (models
    and datasets in the config's order), as a pivot table gives them: missing values left
    out, a row or column with none dropped."""
    groups: dict[tuple[Any, ...], dict[str, list[float]]] = {}
    for row in frame.iter_rows(named=True):
        value = row["value"]
        if _nan(value):
            continue
        key = tuple(row[k] for k in index)
        groups.setdefault(key, {}).setdefault(row[column], []).append(float(value))
    reduce = (lambda v: float(np.sum(v))) if how == "sum" else (lambda v: float(np.mean(v)))
    return {
        key: {c: reduce(values) for c, values in sorted(by_column.items())}
        for key, by_column in sorted(groups.items(), key=lambda kv: _index_key(index, kv[0]))
    }


def _index_key(index: Sequence[str], key: tuple[Any, ...]) -> tuple[Any, ...]:
    """Sort key of a pivot row: models and datasets in the config's order, the rest by value."""
    return tuple(
        order_key(name, value) if name in ("model", "dataset") else (0, value)
        for name, value in zip(index, key, strict=True)
    )


def _macro(metrics: pl.DataFrame, policy: str, condition: str, metric: str) -> float:
    """Mean over model x dataset cells (the paper's macro average), NaN cells left out."""
    chosen = where(metrics, policy=policy, condition=condition, metric=metric)
    return _mean(chosen["value"].to_list())


def table_policy_comparison(metrics: pl.DataFrame) -> Table:
    """Table 2: policies macro-averaged over the model x dataset cells."""
    rows = []
    for policy in _policies(metrics):
        rows.append(
            {
                "Policy": Label(registry.policy(policy).described, policy),
                "HwSA_QC (lower safer)": pct(_macro(metrics, policy, "QC", "hwsa")),
                "FAC_Q100 (lower better)": pct(_macro(metrics, policy, "Q100", "fac")),
                "Ans_Q100 (higher better)": pct(_macro(metrics, policy, "Q100", "answer_rate")),
                "FAC_Q50 (lower better)": pct(_macro(metrics, policy, "Q50", "fac")),
                "Ans_Q50 (higher better)": pct(_macro(metrics, policy, "Q50", "answer_rate")),
            }
        )
    return Table(rows)


def table_fac(metrics: pl.DataFrame) -> Table:
    """Table 8: FAC and answer rates per cell with CIs."""
    get = _lookup(metrics)
    rows = []
    sizes: dict[str, set[int]] = {}
    for model, dataset in _cells(metrics):
        for policy in _policies(metrics):
            fac = get(model, dataset, policy, "Q100", "fac")
            sizes.setdefault(f"{model}, {dataset}", set()).add(int(fac.n) if fac else 0)
            rows.append(
                {
                    "model": model,
                    "dataset": dataset,
                    "policy": policy,
                    "FAC(Q100)": _ci(fac),
                    "FAC(Q50)": _ci(get(model, dataset, policy, "Q50", "fac")),
                    "Ans(Q100)": _ci(get(model, dataset, policy, "Q100", "answer_rate")),
                    "Ans(Q50)": _ci(get(model, dataset, policy, "Q50", "answer_rate")),
                }
            )
    # FAC's denominator, the P1-anchored capable set, is one size per model x dataset.
    return with_note(Table(rows), _sizes_note("Capable-set sizes (FAC at Q100)", sizes))


def table_qc_sources(metrics: pl.DataFrame, per_cell: bool) -> Table:
    """Table 9 (per cell) and Table 3 (per model, pooled over datasets and the paper's
    policies P0-P4)."""
    qc = where(metrics, condition="QC")
    if not per_cell:
        qc = qc.filter(pl.col("policy").is_in(PAPER_POLICIES))
    counts = qc.filter(
        pl.col("metric").is_in(["qc_answered", "qc_echo", "qc_override", "qc_hallucination"])
    )
    keys = ["model", "dataset", "policy"] if per_cell else ["model"]
    pooled = _pivot(counts, keys, "metric", how="sum")
    get = _lookup(metrics)
    rows = []
    groups = list(pooled.items())
    if not per_cell and groups:
        total: dict[str, float] = {}
        for sums in pooled.values():
            for metric, value in sums.items():
                total[metric] = total.get(metric, 0.0) + value
        groups.append((("All",), total))
    for key, sums in groups:
        answered = float(sums.get("qc_answered", 0.0))
        row = dict(zip(keys if key[0] != "All" else ["model"], key, strict=False))
        if per_cell:
            hwsa = get(*key, "QC", "answer_rate")
            row["n"] = int(hwsa.n) if hwsa is not None else 0
            row["Ans %"] = pct(_value(hwsa))
        else:
            row["Ans."] = int(answered)
        # The paper's orders and names: Table 9 "Correct %, Echoed %, Halluc %",
        # Table 3 "Echo, Halluc., Correct" (both percentages of the answered rows).
        labels = (
            (
                ("Correct %", "qc_override"),
                ("Echoed %", "qc_echo"),
                ("Halluc %", "qc_hallucination"),
            )
            if per_cell
            else (("Echo", "qc_echo"), ("Halluc.", "qc_hallucination"), ("Correct", "qc_override"))
        )
        for label, metric in labels:
            row[label] = pct(float(sums.get(metric, 0.0)) / answered) if answered else NOT_AVAILABLE
        rows.append(row)
    return Table(rows)


def table_aurc(metrics: pl.DataFrame) -> Table:
    """Table 10: AURC over all conditions per cell and policy, with the mean row."""
    wide = _pivot(where(metrics, metric="aurc", condition="all"), ["model", "dataset"], "policy")
    present = {p for values in wide.values() for p in values}
    policies = [p for p in policy_table_policies() if p in present]
    rows = [
        {"model": model, "dataset": dataset, **{p: values.get(p, NAN) for p in policies}}
        for (model, dataset), values in wide.items()
    ]
    if rows:
        rows.append(
            {"model": "Mean", "dataset": "", **{p: _mean([r[p] for r in rows]) for p in policies}}
        )
    return Table(_rounded(rows, policies), ["model", "dataset", *policies])


def _rounded(rows: list[dict[str, Any]], columns: Sequence[str], digits: int = 3) -> list[dict]:
    """``columns`` rounded half to even at ``digits`` decimals, as numpy rounds."""
    return [
        {k: float(np.round(v, digits)) if k in columns else v for k, v in row.items()}
        for row in rows
    ]


def table_ece(metrics: pl.DataFrame, metric: str = "ece") -> Table:
    """Table 11: ECE averaged across models and datasets, by policy and condition."""
    chosen = where(metrics, metric=metric).filter(pl.col("condition").is_in(PAPER))
    wide = _pivot(chosen, ["policy"], "condition")
    present = {c for values in wide.values() for c in values}
    conditions = [c for c in PAPER if c in present]
    rows = [
        {"policy": policy, **{c: values.get(c, NAN) for c in conditions}}
        for (policy,), values in sorted(wide.items(), key=lambda kv: policy_sort_key(kv[0][0]))
    ]
    return Table(_rounded(rows, conditions), ["policy", *conditions])


def table_metric_by_cell(metrics: pl.DataFrame, metric: str, condition: str, label: str) -> Table:
    get = _lookup(metrics)
    rows = []
    for model, dataset in _cells(metrics):
        for policy in [*_policies(metrics), "mean"]:
            row = get(model, dataset, policy, condition, metric)
            if row is None:
                continue
            rows.append(
                {
                    "model": model,
                    "dataset": dataset,
                    "policy": policy,
                    label: _ci(row),
                    "n": int(row.n),
                    "note": row.reason if isinstance(row.reason, str) else "",
                }
            )
    return Table(rows)


def table_selection_bias(metrics: pl.DataFrame) -> Table:
    """Section 6: Q100 EM on QC-eligible vs excluded questions, per cell and policy."""
    get = _lookup(metrics)
    rows = []
    for model, dataset in _cells(metrics):
        for policy in _policies(metrics):
            eligible = get(model, dataset, policy, "Q100", "em_eligible")
            excluded = get(model, dataset, policy, "Q100", "em_excluded")
            gap = get(model, dataset, policy, "Q100", "em_gap")
            rows.append(
                {
                    "model": model,
                    "dataset": dataset,
                    "policy": policy,
                    "EM eligible": _ci(eligible),
                    "EM excluded": _ci(excluded),
                    "gap": _ci(gap, signed=True),
                }
            )
    return Table(rows)


def table_seed_sensitivity(
    base: pl.DataFrame,
    variant: pl.DataFrame,
    model: str,
    dataset: str,
    base_seed: int,
    variant_seed: int,
) -> Table:
    """Table 13: HwSA at Q0 and QC per policy under two construction seeds, and |delta|,
    with two decimals as in the paper.

    As in the paper (Appendix G), each rate is the answer rate over that seed's own cell:
    Q0 over every question, QC over the questions QC-eligible under that seed (so the QC
    denominators may differ); |delta| is in percentage points. The model, the dataset and
    the denominators go into the note, as the paper gives them in its text.
    """
    get_base, get_variant = _lookup(base), _lookup(variant)
    variant_name = str(variant["dataset"][0]) if len(variant) else dataset
    out = []
    sizes: dict[tuple[int, str], set[int]] = {}
    for policy in _policies(variant):
        for condition in SEED_COMPARED:
            first = get_base(model, dataset, policy, condition, "answer_rate")
            second = get_variant(model, variant_name, policy, condition, "answer_rate")
            for seed, row in ((base_seed, first), (variant_seed, second)):
                sizes.setdefault((seed, condition), set()).add(int(row.n) if row else 0)
            a, b = _value(first), _value(second)
            out.append(
                {
                    "policy": policy,
                    "condition": condition,
                    f"seed {base_seed}": _pct2(a),
                    f"seed {variant_seed}": _pct2(b),
                    "|delta| (pp)": _pct2(abs(a - b)),
                }
            )
    counts = "; ".join(
        f"seed {seed}: "
        + ", ".join(
            f"{condition} {'-'.join(map(str, sorted({min(ns), max(ns)})))}"
            for (s, condition), ns in sizes.items()
            if s == seed
        )
        for seed in (base_seed, variant_seed)
    )
    return with_note(Table(out), f"{model} on {dataset}; questions per cell, {counts}.")


def _pct2(value: float) -> Number:
    return Number("n/a" if _nan(value) else f"{100 * value:.2f}", value)


def table_parse_failures(reports: Sequence[Mapping[str, Any]]) -> Table:
    rows = []
    for report in reports:
        for cell, stats in report["cells"].items():
            rows.append(
                {
                    "model": report["model"],
                    "dataset": report["dataset"],
                    "cell": cell,
                    "rows": stats["rows"],
                    **stats["parse_status"],
                }
            )
    return Table(rows)


def table_section6(metrics: pl.DataFrame) -> Table:
    """Section 6's aggregates over the paper's policies P0-P4, as (quantity, model,
    dataset, value) rows: the mean QC abstention rate per dataset and per model x dataset
    (with each dataset's difference from the first), the echo share of answered QC rows
    per model x dataset, the Q100 answer rate per model (macro over policies and
    datasets), the normalised HwSA@QC per model (mean over datasets), the Q100 EM gap of
    QC-eligible vs excluded questions per dataset (mean over models, P0: the
    no-abstention baseline) and the mean Q0 -> QC HwSA delta under P1 and P2."""
    paper = metrics.filter(pl.col("policy").is_in(PAPER_POLICIES))

    def mean(frame: pl.DataFrame, condition: str, metric: str) -> float:
        return _mean(where(frame, condition=condition, metric=metric)["value"].to_list())

    rows: list[dict[str, Any]] = []

    def add(quantity: str, model: str, dataset: str, value: float, signed: bool = False) -> None:
        shown = _pp(value) if signed else pct(value)
        rows.append({"Quantity": quantity, "Model": model, "Dataset": dataset, "Value": shown})

    datasets = in_order("dataset", paper["dataset"])
    models = in_order("model", paper["model"])
    quantity = "QC abstention rate (%), mean over models and P0-P4"
    for dataset in datasets:
        add(quantity, "all", dataset, mean(where(paper, dataset=dataset), "QC", "abstain_rate"))
    quantity = "QC abstention rate (%), mean over P0-P4"
    for model in models:
        per = {
            d: mean(where(paper, model=model, dataset=d), "QC", "abstain_rate") for d in datasets
        }
        for dataset in datasets:
            add(quantity, model, dataset, per[dataset])
        for dataset in datasets[1:]:
            diff = per[dataset] - per[datasets[0]]
            add(f"QC abstention difference (pp), {dataset} - {datasets[0]}", model, "", diff, True)
    qc = where(paper, condition="QC")
    for model in models:
        for dataset in datasets:
            cell = where(qc, model=model, dataset=dataset)
            echo = _sum(where(cell, metric="qc_echo")["value"].to_list())
            answered = _sum(where(cell, metric="qc_answered")["value"].to_list())
            share = echo / answered if answered else float("nan")
            add("echo share of answered QC rows (%), P0-P4 pooled", model, dataset, share)
    for model in models:
        add(
            "Q100 answer rate (%), macro over P0-P4 and datasets",
            model,
            "",
            mean(where(paper, model=model), "Q100", "answer_rate"),
        )
    normalised = where(metrics, policy="mean", metric="normalised_hwsa")
    for model in models:
        add(
            "normalised HwSA@QC (%), mean over datasets",
            model,
            "",
            _mean(where(normalised, model=model)["value"].to_list()),
        )
    p0 = where(paper, policy="P0")
    for dataset in datasets:
        add(
            "Q100 EM gap, QC-eligible - excluded (pp), P0, mean over models",
            "all",
            dataset,
            mean(where(p0, dataset=dataset), "Q100", "em_gap"),
            True,
        )
    both = paper.filter(pl.col("policy").is_in(["P1", "P2"]))
    add(
        "QC - Q0 HwSA delta (pp), mean over P1 and P2",
        "all",
        "all",
        mean(both, "QC-Q0", "hwsa_diff"),
        True,
    )
    return Table(rows, ["Quantity", "Model", "Dataset", "Value"])


# --- the tables this module declares (grabrag.report.specs) ---------------------------------


def seed_sensitivity_table(s: Sources) -> Table:
    """Table 13 for each configured sensitivity variant (one, in practice)."""
    tables = []
    for cell, path in s.read(SEED_METRICS):
        spec = s.setting("seed_sensitivity")[cell["dataset"]]
        tables.append(
            table_seed_sensitivity(
                s.read(METRICS),
                read_metrics([path]),
                spec["model"],
                spec["dataset"],
                spec["base_seed"],
                spec["seed"],
            )
        )
    rows = [row for table in tables for row in table.rows]
    return with_note(Table(rows), " ".join(table.note for table in tables))


_M = (METRICS,)
TABLES = (
    TableSpec("table1_hwsa", lambda s: table_hwsa(s.read(METRICS), with_ci=False), _M),
    TableSpec("table2_policies", lambda s: table_policy_comparison(s.read(METRICS)), _M),
    TableSpec("table3_qc_sources", lambda s: table_qc_sources(s.read(METRICS), per_cell=False), _M),
    TableSpec("table7_hwsa_ci", lambda s: table_hwsa(s.read(METRICS), with_ci=True), _M),
    TableSpec("table8_fac_ci", lambda s: table_fac(s.read(METRICS)), _M),
    TableSpec("table9_qc_sources", lambda s: table_qc_sources(s.read(METRICS), per_cell=True), _M),
    TableSpec("table10_aurc", lambda s: table_aurc(s.read(METRICS)), _M),
    TableSpec("table11_ece", lambda s: table_ece(s.read(METRICS), "ece"), _M),
    TableSpec(
        "normalised_hwsa",
        lambda s: table_metric_by_cell(
            s.read(METRICS), "normalised_hwsa", "QC", "HwSA@QC / Ans@Q100"
        ),
        _M,
    ),
    TableSpec("selection_bias", lambda s: table_selection_bias(s.read(METRICS)), _M),
    TableSpec(
        "parse_failures",
        lambda s: table_parse_failures([report for _, report in s.read(GENERATION_REPORTS)]),
        (GENERATION_REPORTS,),
    ),
    TableSpec("section6_aggregates", lambda s: table_section6(s.read(METRICS)), _M),
    # 15-bin ECE: EvidentialRAG's calibration measure, for comparing EVID with P0-P4.
    TableSpec(
        "table11b_ece15",
        lambda s: table_ece(s.read(METRICS), "ece_15"),
        _M,
        when=lambda f: f.evidential,
    ),
    TableSpec(
        "table13_seed_sensitivity",
        seed_sensitivity_table,
        (METRICS, SEED_METRICS),
        ("seed_sensitivity",),
        lambda f: f.seed_sensitivity,
    ),
)
