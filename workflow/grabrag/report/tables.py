"""The paper's tables from the tidy metric table (one row per model x dataset x policy x
condition x metric with its bootstrap CI), written as CSV + Markdown + LaTeX, and as a
tidy numeric CSV beside them (:mod:`grabrag.report.tabular`).

Numbers are percentages with one decimal, as in the paper; CIs are "[low, high]". The
CSV keeps the same formatted cells, so the three files show one table; each printed
number is a :class:`~grabrag.report.tabular.Number` that keeps its estimate, CI and n for the
tidy file. A table named after one of the paper's has the paper's columns and no others;
what the paper gives in a caption (the questions behind each rate, say) goes into the
table's note (``with_note``), which follows the caption.

The builders take polars frames (the metric CSVs as read) and return a
:class:`~grabrag.report.tabular.Table`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import polars as pl

from grabrag.core import registry
from grabrag.core.conditions import PAPER, SEED_COMPARED, SHOULD_ABSTAIN, SHOULD_ANSWER
from grabrag.core.errors import DataError
from grabrag.core.io import read_json, read_jsonl
from grabrag.core.registry import PAPER_POLICIES, Features
from grabrag.evaluation.evaluate import policy_sort_key
from grabrag.evaluation.results import read_diagnostics, read_metrics, read_sweeps
from grabrag.policies.paper import SWEEP_CUTOFFS, SWEEP_THRESHOLDS, p3_sweep_decisions
from grabrag.report.tabular import (
    NAN,
    Label,
    Number,
    Table,
    cell_order,
    group_means,
    in_order,
    order_key,
    read_csvs,
    rows_csv,
    same_float,
    where,
)
from grabrag.report.tabular import write_table as _write_table
from grabrag.scoring.metrics import audit_hwsa, capability_set, decision_rate

NOT_AVAILABLE = Number("n/a", None)  # a number the data cannot give (no rows to rate)


def _nan(value: float | None) -> bool:
    return value is None or math.isnan(value)


def pct(value: float | None, n: int | None = None) -> Number:
    return Number("n/a" if _nan(value) else f"{100 * value:.1f}", value, n=n)


def _whole_percent(fraction: float) -> int:
    """``fraction`` in percent rounded half up to a whole number (0.475 -> 48), as the
    paper prints Table 1's CI bounds; rounded to 6 decimals first so 0.475 * 100 =
    47.49999... still rounds up."""
    return math.floor(round(100 * fraction, 6) + 0.5)


def pct_ci(
    value: float | None,
    low: float | None,
    high: float | None,
    signed: bool = False,
    n: int | None = None,
    whole_bounds: bool = False,
) -> Number:
    """ "12.5 [8.1, 17.0]" in percent; ``signed`` prints a sign on every number;
    ``whole_bounds`` prints the bounds as whole percents without a sign, as the paper's
    Table 1 does ("+55.0 [48, 62]")."""
    if _nan(value):
        return Number("n/a", None, n=n)
    sign = "+" if signed else ""
    if _nan(low) or _nan(high):
        ci = ""
    elif whole_bounds:
        ci = f" [{_whole_percent(low)}, {_whole_percent(high)}]"
    else:
        ci = f" [{100 * low:{sign}.1f}, {100 * high:{sign}.1f}]"
    return Number(f"{100 * value:{sign}.1f}{ci}", value, low, high, n)


def _ci(row: Any, signed: bool = False, whole_bounds: bool = False) -> Number:
    """A metric row as "estimate [low, high]", keeping its n."""
    n = None if row is None else _n(row)
    return pct_ci(*_triple(row), signed=signed, n=n, whole_bounds=whole_bounds)


def _records(frame: pl.DataFrame) -> list[Any]:
    """The frame's rows with attribute access (``row.value``), missing values as None."""
    return [SimpleNamespace(**row) for row in frame.iter_rows(named=True)]


def _lookup(metrics: pl.DataFrame) -> Callable[..., Any]:
    index = {(r.model, r.dataset, r.policy, r.condition, r.metric): r for r in _records(metrics)}

    def get(model: str, dataset: str, policy: str, condition: str, metric: str):
        return index.get((model, dataset, policy, condition, metric))

    return get


def _cells(frame: pl.DataFrame) -> list[tuple[str, str]]:
    """The (model, dataset) cells of a frame, in the config's order (tabular.listed_in)."""
    if not len(frame):
        return []
    return cell_order(zip(frame["model"], frame["dataset"], strict=True))


def policy_table_policies() -> list[str]:
    """The policies the policy tables show (Tables 1, 2, 7, 8, 10...), in registry order."""
    return [name for name, spec in registry.policies().items() if spec.in_policy_tables]


def _policies(metrics: pl.DataFrame) -> list[str]:
    return [p for p in policy_table_policies() if p in set(metrics["policy"])]


def _value(row: Any) -> float:
    return float("nan") if row is None or row.value is None else float(row.value)


def _mean(values: Sequence[float | None]) -> float:
    """The mean of the values that are numbers (None and NaN left out); NaN if none."""
    kept = [float(v) for v in values if not _nan(v)]
    return float(np.mean(kept)) if kept else float("nan")


def _sum(values: Sequence[float | None]) -> float:
    """The sum of the values that are numbers (0 if none)."""
    return float(np.sum([float(v) for v in values if not _nan(v)]))


def with_note(table: Table, note: str) -> Table:
    """Attach the sentence that ``write_table`` prints after the table's caption."""
    table.note = note
    return table


def decoding_note(batches: Mapping[str, int]) -> str:
    """The sentence that says a table's model calls were decoded several at a time (the
    models' ``batch`` setting); empty when every model decoded one call at a time."""
    batched = {model: batch for model, batch in batches.items() if batch > 1}
    if not batched:
        return ""
    listed = ", ".join(f"{model} {batch}" for model, batch in sorted(batched.items()))
    return (
        f"Model calls decoded in batches (batch size: {listed}); near ties can decode "
        "differently than one call at a time."
    )


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


def _triple(row: Any) -> tuple[float, float, float]:
    if row is None:
        return (float("nan"),) * 3
    return tuple(
        float("nan") if v is None else float(v) for v in (row.value, row.ci_low, row.ci_high)
    )


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


AUDIT_COLUMNS = (
    "dataset",
    "model",
    "policy",
    "n_all",
    "hwsa_qc_all",
    "n_clean",
    "hwsa_qc_clean",
    "shift",
    "hwsa_q0_all",
    "hwsa_q0_clean",
    "delta_all",
    "delta_clean",
    "sign_preserved",
)


def audit_hwsa_rows(
    dataset: str,
    decisions: Mapping[tuple[str, str, str], Sequence[Mapping[str, Any]]],
    ratings: Mapping[str, str],
    qc_qids: Sequence[str],
    audit_file: str | Path = "the audit file",
) -> list[dict[str, Any]]:
    """Table 6's numbers for one dataset, one row per model x policy (tidy; rates as
    fractions): HwSA@QC on every QC-eligible question and on those rated fluent or
    borderline, the shift, and the Q0 -> QC delta on both sets (Q0 paired on the same
    questions), with whether the delta keeps its sign.

    ``decisions`` maps (model, policy, condition) -> decision rows for QC (and Q0 when
    generated). A rated qid that is not QC-eligible here is a DataError: the audit was
    filled for another dataset, seed or sample.
    """
    eligible = set(qc_qids)
    stray = [qid for qid in ratings if qid not in eligible]
    if stray:
        shown = ", ".join(stray[:5]) + (f" and {len(stray) - 5} more" if len(stray) > 5 else "")
        raise DataError(
            f"{audit_file}: {len(stray)} rated qid(s) are not QC-eligible in dataset "
            f"{dataset!r}: {shown}. Fill in this run's qc/{dataset}/audit_sample.csv (the "
            "audit must come from the same dataset and construction seed)"
        )
    clean = [qid for qid, quality in ratings.items() if quality != "broken"]
    rows = []
    qc_cells = {(m, p) for m, p, c in decisions if c == "QC"}
    for model, policy in sorted(qc_cells, key=lambda mp: (order_key("model", mp[0]), mp[1])):
        values = audit_hwsa(
            decisions[(model, policy, "QC")], decisions.get((model, policy, "Q0")), clean
        )
        delta_all, delta_clean = float(values["delta_all"]), float(values["delta_clean"])
        rows.append(
            {
                "dataset": dataset,
                "model": model,
                "policy": policy,
                "n_all": values["qc_all"].n,
                "hwsa_qc_all": float(values["qc_all"]),
                "n_clean": values["qc_clean"].n,
                "hwsa_qc_clean": float(values["qc_clean"]),
                "shift": float(values["shift"]),
                "hwsa_q0_all": float(values["q0_all"]),
                "hwsa_q0_clean": float(values["q0_clean"]),
                "delta_all": delta_all,
                "delta_clean": delta_clean,
                # Signs compare as -1 / 0 / +1: a zero delta is not "the same sign" as +x.
                "sign_preserved": (
                    None
                    if math.isnan(delta_all) or math.isnan(delta_clean)
                    else bool(np.sign(delta_all) == np.sign(delta_clean))
                ),
            }
        )
    rows.sort(key=lambda r: (r["model"], policy_sort_key(r["policy"])))
    return rows


def write_audit_hwsa(path: str | Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """:func:`audit_hwsa_rows` as the CSV Table 6 reads (one per audited dataset)."""
    rows_csv(path, rows, AUDIT_COLUMNS)


def _pp(value: float) -> Number:
    return Number("n/a" if _nan(value) else f"{100 * value:+.1f}", value)


TABLE6_COLUMNS = (
    "Model",
    "Dataset",
    "Policy",
    "n (all)",
    "HwSA@QC (all)",
    "n (F+B)",
    "HwSA@QC (F+B)",
    "Shift (pp)",
)


def _flag(value: Any) -> bool:
    """A True/False cell as read from a CSV (a bool, or its text)."""
    return value if isinstance(value, bool) else str(value).strip().lower() == "true"


def table_audit(audit: pl.DataFrame) -> Table:
    """Table 6 with the paper's columns: HwSA@QC on the full QC set vs the audited
    fluent + borderline subset (F+B) per model, dataset and policy, and the shift in pp;
    then the macro-average row and a last row counting the cells whose Q0 -> QC delta
    keeps its sign on F+B (the paper's "All 30 delta signs preserved."). The deltas per
    cell are in each dataset's audit_hwsa.csv."""
    out = []
    for row in _records(audit):
        out.append(
            {
                "Model": row.model,
                "Dataset": row.dataset,
                "Policy": row.policy,
                "n (all)": int(row.n_all),
                "HwSA@QC (all)": pct(row.hwsa_qc_all),
                "n (F+B)": int(row.n_clean),
                "HwSA@QC (F+B)": pct(row.hwsa_qc_clean),
                "Shift (pp)": _pp(row.shift),
            }
        )
    # The macro row pools the paper's policies (its "30 cells" are 3 models x 2 datasets
    # x P0-P4), so adding EVID or the CDD family does not move it; all policies otherwise.
    paper = audit.filter(pl.col("policy").is_in(PAPER_POLICIES))
    pooled = paper if len(paper) else audit
    label = "Macro avg (P0-P4)" if len(paper) and len(paper) < len(audit) else "Macro avg"
    if len(pooled):
        blank = dict.fromkeys(TABLE6_COLUMNS, "")
        out.append(
            {
                **blank,
                "Model": label,
                "HwSA@QC (all)": pct(_mean(pooled["hwsa_qc_all"].to_list())),
                "HwSA@QC (F+B)": pct(_mean(pooled["hwsa_qc_clean"].to_list())),
                "Shift (pp)": _pp(_mean(pooled["shift"].to_list())),
            }
        )
        known = [_flag(v) for v in pooled["sign_preserved"].to_list() if v is not None]
        kept, cells = sum(known), len(known)
        kept_text = f"All {cells}" if kept == cells else f"{kept} of {cells}"
        out.append({**blank, "Model": f"{kept_text} delta signs preserved."})
    return Table(out, list(TABLE6_COLUMNS))


def p3_sweep_rows(
    p1: Mapping[str, Sequence[dict]],
    cb: Sequence[dict],
    p1_q100_decisions: Sequence[dict],
    gold: Mapping[str, Sequence[str]],
    thresholds: Sequence[float] = SWEEP_THRESHOLDS,
    cutoffs: Sequence[float] = SWEEP_CUTOFFS,
) -> list[dict[str, Any]]:
    """Table 12 inputs for one model x dataset: for every (threshold, cutoff), HwSA at QC,
    FAC at Q100 (on the P1 capability set) and the Q100 answer rate, from stored outputs."""
    capability = capability_set(p1_q100_decisions, gold)
    sweeps = {
        condition: p3_sweep_decisions(rows, cb, thresholds, cutoffs)
        for condition, rows in p1.items()
    }
    out = []
    for threshold in thresholds:
        for cutoff in cutoffs:
            row = {"threshold": threshold, "cutoff": cutoff}
            if "QC" in sweeps:
                row["hwsa_qc"] = float(decision_rate(sweeps["QC"][(threshold, cutoff)], "answer"))
            if "Q100" in sweeps:
                decisions = sweeps["Q100"][(threshold, cutoff)]
                row["ans_q100"] = float(decision_rate(decisions, "answer"))
                row["fac_q100"] = (
                    float(decision_rate(decisions, "abstain", capability))
                    if capability
                    else float("nan")
                )
            out.append(row)
    return out


def table_p3_sweep(sweep: pl.DataFrame, cutoff: float = 50) -> Table:
    """Table 12: macro averages over cells at the configured confidence cutoff (the
    paper's: 50)."""
    chosen = sweep.filter(same_float("cutoff", cutoff))
    grouped = group_means(chosen, "threshold", ("hwsa_qc", "fac_q100", "ans_q100"))
    return Table(
        [
            {
                "F1": threshold,
                "HwSA_QC (lower safer)": pct(values["hwsa_qc"]),
                "FAC_Q100 (lower better)": pct(values["fac_q100"]),
                "Q100 Ans (higher better)": pct(values["ans_q100"]),
            }
            for threshold, values in grouped.items()
        ],
        ["F1", "HwSA_QC (lower safer)", "FAC_Q100 (lower better)", "Q100 Ans (higher better)"],
        keys=("F1",),
    )


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


# --- QX and EvidentialRAG ------------------------------------------------------------


def _n(row: Any) -> int:
    return int(row.n) if row is not None else 0


def table_hwsa_conditions(metrics: pl.DataFrame) -> Table:
    """HwSA (the answer rate over each condition's questions) at Q0, QC and QX with 95% CIs,
    and QX - QC on the questions present at both (paired), per cell and policy."""
    get = _lookup(metrics)
    out = []
    for model, dataset in _cells(metrics):
        for policy in _policies(metrics):
            row: dict[str, Any] = {"model": model, "dataset": dataset, "policy": policy}
            for condition in SHOULD_ABSTAIN:
                rate = get(model, dataset, policy, condition, "answer_rate")
                row[f"n {condition}"] = _n(rate)
                row[f"HwSA({condition}) [95% CI]"] = _ci(rate)
            diff = get(model, dataset, policy, "QX-QC", "hwsa_diff")
            row["n QC&QX"] = _n(diff)
            row["QX - QC [95% CI]"] = _ci(diff, signed=True)
            out.append(row)
    return Table(out)


def _decimals(value: float | None, digits: int = 3) -> Number:
    return Number("n/a" if _nan(value) else f"{value:.{digits}f}", value)


EVID_ECE = "ECE Eq. 26-27 (15 bins)"
GRAB_ECE_15 = "GRAB-RAG ECE-15 (bin midpoints, behaviour)"
ROUTE_COLUMNS = (
    ("route_direct", "direct %"),
    ("route_conflict_aware", "conflict-aware %"),
    ("route_abstain", "abstain route %"),
)


def _routes(get: Callable[..., Any], key: tuple[str, str, str], condition: str) -> dict[str, str]:
    model, dataset, policy = key
    return {
        label: ""
        if (row := get(model, dataset, policy, condition, metric)) is None
        else pct(_value(row))
        for metric, label in ROUTE_COLUMNS
    }


def table_evid_results(metrics: pl.DataFrame) -> Table:
    """Per cell, policy and condition: HwSA at should-abstain conditions, FAC and the answer
    rate at should-answer ones, the route shares (EVID / EVID+CB), EvidentialRAG's ECE
    (Eqs. 26-27: P0 as naive RAG, P1 and EVID / EVID+CB) and, in its own column,
    GRAB-RAG's 15-bin midpoint ECE; then one ``pooled`` row per cell and policy over every
    condition (QX included) with refusal precision / recall / F1 (R = abstained, U = Q0/QC/QX), the
    route shares and EvidentialRAG's pooled ECE."""
    get = _lookup(metrics)
    conditions = [c for c in (*SHOULD_ANSWER, *SHOULD_ABSTAIN) if c in set(metrics["condition"])]
    out = []
    for model, dataset in _cells(metrics):
        for policy in _policies(metrics):
            key = (model, dataset, policy)
            for condition in conditions:
                rate = get(model, dataset, policy, condition, "answer_rate")
                if rate is None:
                    continue
                should_abstain = condition in SHOULD_ABSTAIN
                fac = None if should_abstain else get(model, dataset, policy, condition, "fac")
                evid_ece = get(model, dataset, policy, condition, "ece_answer_15")
                out.append(
                    {
                        "model": model,
                        "dataset": dataset,
                        "policy": policy,
                        "condition": condition,
                        "n": _n(rate),
                        "HwSA [95% CI]": _ci(rate) if should_abstain else "",
                        "FAC [95% CI]": "" if should_abstain else _ci(fac),
                        "Ans [95% CI]": "" if should_abstain else _ci(rate),
                        **_routes(get, key, condition),
                        EVID_ECE: "" if evid_ece is None else _decimals(_value(evid_ece)),
                        GRAB_ECE_15: _decimals(
                            _value(get(model, dataset, policy, condition, "ece_15"))
                        ),
                        "Refusal P": "",
                        "Refusal R": "",
                        "Refusal F1": "",
                    }
                )
            f1 = get(model, dataset, policy, "pooled", "refusal_f1")
            if f1 is None:
                continue
            precision = get(model, dataset, policy, "pooled", "refusal_precision")
            recall = get(model, dataset, policy, "pooled", "refusal_recall")
            evid_ece = get(model, dataset, policy, "pooled", "ece_answer_15")
            out.append(
                {
                    "model": model,
                    "dataset": dataset,
                    "policy": policy,
                    "condition": "pooled",
                    "n": _n(f1),
                    "HwSA [95% CI]": "",
                    "FAC [95% CI]": "",
                    "Ans [95% CI]": "",
                    **_routes(get, key, "pooled"),
                    EVID_ECE: "" if evid_ece is None else _decimals(_value(evid_ece)),
                    GRAB_ECE_15: "",
                    "Refusal P": _ci(precision),
                    "Refusal R": _ci(recall),
                    "Refusal F1": _ci(f1),
                }
            )
    return Table(out)


def table_evid_efficiency(summaries: Sequence[Mapping[str, Any]]) -> Table:
    """Table 11's form per model x dataset: naive RAG (P0), P1, EVID / EVID+CB."""

    def num(value: Any, digits: int, suffix: str = "") -> Number:
        if value is None:
            return Number("n/a", None)
        return Number(f"{float(value):.{digits}f}{suffix}", value)

    rows = []
    for summary in summaries:
        for policy, entry in summary["policies"].items():
            rows.append(
                {
                    "model": summary["model"],
                    "dataset": summary["dataset"],
                    "policy": policy,
                    "queries": entry["queries"],
                    "s/query": num(entry["seconds_per_query"], 3),
                    "evaluator s/query": num(entry["evaluator_seconds_per_query"], 3),
                    "generator s/query": num(entry["generator_seconds_per_query"], 3),
                    "closed-book s/query": num(entry.get("closed_book_seconds_per_query"), 3),
                    "logical LLM decisions": num(entry["logical_decisions"], 1),
                    "executed passes": num(entry["executed_passes"], 1),
                    "peak memory (MB)": num(entry["peak_memory_mb"], 0),
                    "relative cost": num(entry["relative_cost"], 2, "x"),
                }
            )
    return Table(rows)


def _lambda_rules(rules: Sequence[str]) -> list[str]:
    """The sweep's fusion rules in print order: normalised Dempster, then lambda ascending."""
    present = set(rules) - {"average"}
    numbers = sorted((r for r in present if r != "dempster"), key=float)
    return (["dempster"] if "dempster" in present else []) + numbers


def _rule_name(rule: str, default: str | None = None) -> str:
    if rule == "dempster":
        name = "normalised Dempster"
    elif rule == "average":
        name = "averaging"
    else:
        name = f"lambda={rule}"
        if rule == "1":
            name += " (Yager-style)"
    return f"{name} (default)" if default is not None and rule == default else name


def _sweep_summary(chosen: pl.DataFrame) -> dict[str, str]:
    """Macro averages over model x dataset cells of one sweep setting's rows."""

    def mean(condition: str, column: str) -> float:
        return _mean(where(chosen, condition=condition)[column].to_list())

    out = {
        "Ans@Q100": pct(mean("Q100", "answer_rate")),
        "EM@Q100": pct(mean("Q100", "em")),
    }
    for condition in SHOULD_ABSTAIN:
        if condition in set(chosen["condition"]):
            out[f"HwSA@{condition}"] = pct(mean(condition, "answer_rate"))
    out["abstain (all)"] = pct(mean("pooled", "abstain_rate"))
    out["refusal P"] = pct(mean("pooled", "refusal_precision"))
    out["refusal R"] = pct(mean("pooled", "refusal_recall"))
    out["refusal F1"] = pct(mean("pooled", "refusal_f1"))
    for metric, label in ROUTE_COLUMNS:
        out[label] = pct(mean("pooled", metric))
    out[EVID_ECE] = _decimals(mean("pooled", "ece_answer_15"))
    return out


def _cells_of(sweep: pl.DataFrame) -> int:
    return len(_cells(sweep))


def table_evid_lambda_sweep(sweep: pl.DataFrame, lam: float, tau1: float, tau2: float):
    """Table 9's form: the fusion rule (normalised Dempster, lambda 0 ... 1) at the
    configured thresholds, per policy, macro-averaged over model x dataset cells."""
    chosen = where(sweep, variant="evid").filter(same_float("tau1", tau1), same_float("tau2", tau2))
    default = f"{float(lam):g}"
    rows = []
    for policy in sorted(set(chosen["policy"]), key=policy_sort_key):
        for rule in _lambda_rules([str(r) for r in chosen["rule"]]):
            part = where(chosen, policy=policy, rule=rule)
            if not len(part):
                continue
            rows.append(
                {
                    "policy": policy,
                    "rule": _rule_name(rule, default),
                    "cells": _cells_of(part),
                    **_sweep_summary(part),
                }
            )
    return Table(rows)


def table_evid_tau_sweep(sweep: pl.DataFrame, lam: float, tau1: float, tau2: float):
    """Table 10's form: the routing thresholds at the configured lambda."""
    rule = f"{float(lam):g}"
    chosen = where(sweep, variant="evid", rule=rule)
    pairs = sorted(
        {(float(a), float(b)) for a, b in zip(chosen["tau1"], chosen["tau2"], strict=True)}
    )
    rows = []
    for policy in sorted(set(chosen["policy"]), key=policy_sort_key):
        for a, b in pairs:
            part = where(chosen, policy=policy).filter(same_float("tau1", a), same_float("tau2", b))
            label = f"({a:g}, {b:g})" + (" (default)" if (a, b) == (tau1, tau2) else "")
            rows.append(
                {
                    "policy": policy,
                    "(tau1, tau2)": label,
                    "cells": _cells_of(part),
                    **_sweep_summary(part),
                }
            )
    return Table(rows)


def _single_pass_summary(
    metrics: pl.DataFrame, cells: set[tuple[str, str]], policy: str
) -> tuple[dict[str, str], int]:
    """A single-pass policy's numbers in :func:`_sweep_summary`'s columns, macro-averaged
    over the ``cells`` (model, dataset) the sweep covers; also how many cells that is. For
    P0 this is the "without evidential evaluator" row (section 5.9: the system collapses
    to naive RAG, which has no abstention controller)."""
    in_cells = pl.Series(
        [(m, d) in cells for m, d in zip(metrics["model"], metrics["dataset"], strict=True)],
        dtype=pl.Boolean,
    )
    chosen = metrics.filter(in_cells & (metrics["policy"] == policy))
    get = _lookup(chosen)
    per_cell = _cells(chosen)

    def mean(condition: str, metric: str) -> float:
        values = [_value(get(m, d, policy, condition, metric)) for m, d in per_cell]
        values = [v for v in values if not math.isnan(v)]
        return float(np.mean(values)) if values else float("nan")

    def abstain_all(model: str, dataset: str) -> float:
        conditions = (*SHOULD_ANSWER, *SHOULD_ABSTAIN)
        rates = [get(model, dataset, policy, c, "abstain_rate") for c in conditions]
        rates = [r for r in rates if r is not None and not math.isnan(_value(r))]
        n = sum(_n(r) for r in rates)
        return sum(_value(r) * _n(r) for r in rates) / n if n else float("nan")

    abstain = [v for v in (abstain_all(m, d) for m, d in per_cell) if not math.isnan(v)]
    out = {
        "Ans@Q100": pct(mean("Q100", "answer_rate")),
        "EM@Q100": pct(mean("Q100", "em")),
    }
    for condition in SHOULD_ABSTAIN:
        if condition in set(chosen["condition"]):
            out[f"HwSA@{condition}"] = pct(mean(condition, "answer_rate"))
    out["abstain (all)"] = pct(float(np.mean(abstain)) if abstain else float("nan"))
    out["refusal P"] = pct(mean("pooled", "refusal_precision"))
    out["refusal R"] = pct(mean("pooled", "refusal_recall"))
    out["refusal F1"] = pct(mean("pooled", "refusal_f1"))
    for _, label in ROUTE_COLUMNS:
        out[label] = NOT_AVAILABLE
    out[EVID_ECE] = _decimals(mean("pooled", "ece_answer_15"))
    return out, len(per_cell)


def table_evid_ablation(
    sweep: pl.DataFrame,
    lam: float,
    tau1: float,
    tau2: float,
    metrics: pl.DataFrame | None = None,
):
    """Table 12's form: full EVID vs without conflict-preserving fusion (evidence
    averaging) vs without routing (always answers the top claim), from stored evaluations,
    and (with ``metrics``) without the evidential evaluator, which leaves naive RAG: P0 on
    the same model x dataset cells, from the metrics, with P1 in an extra row."""
    rule = f"{float(lam):g}"
    variants = (
        ("full", "evid", rule, True),
        ("without conflict-preserving fusion (evidence averaging)", "no_fusion", "average", True),
        ("without dynamic routing (always answer)", "no_routing", rule, False),
    )
    rows = []
    for policy in sorted(set(sweep["policy"]), key=policy_sort_key):
        for label, variant, rule_value, routed in variants:
            part = where(sweep, policy=policy, variant=variant, rule=rule_value)
            if routed:
                part = part.filter(same_float("tau1", tau1), same_float("tau2", tau2))
            if not len(part):
                continue
            rows.append(
                {
                    "policy": policy,
                    "variant": label,
                    "cells": _cells_of(part),
                    **_sweep_summary(part),
                }
            )
    if metrics is not None and len(sweep):
        cells = set(_cells(sweep))
        for policy, label in SINGLE_PASS_ABLATION_ROWS:
            summary, n_cells = _single_pass_summary(metrics, cells, policy)
            if n_cells:
                rows.append({"policy": policy, "variant": label, "cells": n_cells, **summary})
    return Table(rows)


# The "without evidential evaluator" row is the paper's naive RAG, P0 (no abstention
# controller); P1 (GRAB-RAG's abstention instruction) follows as an extra row of ours.
SINGLE_PASS_ABLATION_ROWS = (
    ("P0", "without evidential evaluator (naive RAG: P0)"),
    ("P1", "P1 beside it (ours: naive RAG with GRAB-RAG's abstention instruction)"),
)


def table_evid_evaluator(reports: Sequence[Mapping[str, Any]]) -> Table:
    """Table 13's form from the evaluate reports, per model x dataset x condition: the
    evaluator passes, the schema-valid rate (parsed as generated), the repaired rate (an
    output cut off by max_tokens, closed), the failed rate (counted as zero evidence) and
    the zero-evidence rate (failed, irrelevant or scored 0: the passage adds no claim)."""
    rows = []

    def report_key(report: Mapping[str, Any]) -> tuple[Any, ...]:
        return (
            order_key("model", report["model"]),
            order_key("dataset", report["dataset"]),
            report["condition"],
        )

    for report in sorted(reports, key=report_key):
        passes = int(report["evaluator_passes"])
        status = report.get("status") or {}

        def share(count: float, base: int = passes) -> str:
            return pct(count / base) if base else NOT_AVAILABLE

        rows.append(
            {
                "model": report["model"],
                "dataset": report["dataset"],
                "condition": report["condition"],
                "evaluator": report.get("evaluator", ""),
                "questions": int(report["questions"]),
                "evaluator passes": passes,
                "schema-valid %": share(status.get("ok", 0)),
                "repaired %": share(status.get("repaired", 0)),
                "failed %": share(status.get("failed", 0)),
                "zero-evidence %": share(passes - int(report["with_evidence"])),
            }
        )
    return Table(rows)


def display_policies(table: Table) -> Table:
    """Policy codes as printed (the registry's ``printed``): EVID_CB becomes "EVID+CB" in
    policy columns and headers."""
    printed = {name: p.printed for name, p in registry.policies().items() if p.printed}
    return table.renamed(printed, printed)


def write_table(table: Table, stem: str | Path, caption: str) -> list[Path]:
    """CSV + Markdown + LaTeX of one table as printed (EVID_CB as "EVID+CB"; the note
    after the caption) and its numbers in ``<stem>.tidy.csv`` (policy codes as the
    decision files and metrics name them); returns the four paths."""
    return _write_table(display_policies(table), stem, caption, tidy=table)


# --- CDD, CDD-alpha and the prompt-only baselines -------------------------------

CDD_POLICIES = ("P1", "CDD", "CDD_ALPHA", "CAI", "SHAM", "REFLECT", "FILTER")
"""The policies of the CDD tables: Standard RAG (P1) for reference, then the CDD family."""
CDD_VARIANTS = {
    "truncated": "truncation",
    "mistake": "mistake injection",
    "full": "full CDD",
    "no_premise": "without premise isolation",
    "no_divergence": "without divergence check",
}
CDD_PAPER_TYPES = ("entity_swap", "temporal_shift", "distractor")
"""The CDD paper's perturbation types with a counterpart here (the adversarial macro)."""
CDD_OTHER_TYPES = ("numeric", "inter_context", "no_answer")
"""GRAB-RAG perturbations without a counterpart in the paper, reported beside the macro."""
CDD_TYPES = ("clean", *CDD_PAPER_TYPES, *CDD_OTHER_TYPES)


def _diag_lookup(diagnostics: pl.DataFrame) -> Callable[..., Any]:
    frame = diagnostics.with_columns(
        pl.col(c).fill_null("") for c in ("variant", "condition", "perturbation_type")
    )
    index = {
        (
            r.model,
            r.dataset,
            r.section,
            r.policy,
            r.variant,
            r.condition,
            r.perturbation_type,
            r.metric,
        ): r
        for r in _records(frame)
    }

    def get(model, dataset, section, metric, policy="CDD", variant="", condition="", kind=""):
        return index.get((model, dataset, section, policy, variant, condition, kind, metric))

    return get


def _conditions_of(frame: pl.DataFrame) -> list[str]:
    present = set(frame["condition"].drop_nulls())
    return [c for c in (*SHOULD_ANSWER, *SHOULD_ABSTAIN) if c in present]


def table_cdd_results(metrics: pl.DataFrame, diagnostics: pl.DataFrame) -> Table:
    """Per model x dataset x policy (P1, then the CDD family): the answer rate per condition
    (HwSA at the should-abstain ones) and EM at Q100 with 95% CIs (from the metric table),
    then the CDD paper's answer accuracy (the final answer matches a gold alias; an
    abstention is not correct; from diagnostics.csv) on clean rows, per paper
    perturbation type and their macro average with a 95% CI, and beside the macro the
    types without a counterpart in the paper (numeric swaps, QX, Q0)."""
    get = _lookup(metrics)
    diag = _diag_lookup(diagnostics)
    conditions = _conditions_of(metrics)
    present = set(metrics["policy"])
    counted = set(diagnostics.filter(pl.col("n") > 0)["perturbation_type"])
    types = [t for t in CDD_TYPES if t in counted]
    rows = []
    for model, dataset in _cells(metrics):
        in_cell = set(where(metrics, model=model, dataset=dataset)["policy"])
        if not in_cell & set(CDD_POLICIES[1:]):
            continue  # CDD did not run on this dataset (cdd.datasets)
        for policy in (p for p in CDD_POLICIES if p in present and p in in_cell):
            row: dict[str, Any] = {"model": model, "dataset": dataset, "policy": policy}
            for condition in conditions:
                rate = get(model, dataset, policy, condition, "answer_rate")
                label = "HwSA" if condition in SHOULD_ABSTAIN else "Ans"
                row[f"{label}@{condition} [95% CI]"] = _ci(rate)
            row["EM@Q100 [95% CI]"] = _ci(get(model, dataset, policy, "Q100", "em"))
            at = (model, dataset, "perturbation_type", "accuracy", policy)
            for kind in (t for t in types if t not in CDD_OTHER_TYPES):
                row[f"Acc {kind}"] = pct(_value(diag(*at, kind=kind)))
            macro = diag(*at, kind="macro_adversarial")
            row["Acc adversarial macro [95% CI]"] = _ci(macro)
            for kind in (t for t in types if t in CDD_OTHER_TYPES):  # beside the macro
                row[f"Acc {kind}"] = pct(_value(diag(*at, kind=kind)))
            rows.append(row)
    return Table(rows)


def table_cdd_sensitivity(diagnostics: pl.DataFrame) -> Table:
    """Causal sensitivity of CDD's trace per model x dataset, perturbation and condition
    (and all conditions pooled): clean and corrupted answer accuracy (the CDD paper's),
    the relative drop with its paired bootstrap CI, and the share of outcomes the
    perturbation changed."""
    diag = _diag_lookup(diagnostics)
    chosen = where(diagnostics, section="sensitivity")
    conditions = [*_conditions_of(chosen), "all"]
    rows = []
    for model, dataset in _cells(chosen):
        for variant in ("truncated", "mistake"):
            for condition in conditions:
                at = {"variant": variant, "condition": condition}
                value = diag(model, dataset, "sensitivity", "sensitivity", **at)
                if value is None:
                    continue
                rows.append(
                    {
                        "model": model,
                        "dataset": dataset,
                        "perturbation": CDD_VARIANTS[variant],
                        "condition": condition,
                        "n": _n(value),
                        "Acc clean": _ci(diag(model, dataset, "sensitivity", "acc_clean", **at)),
                        "Acc corrupted": _ci(
                            diag(model, dataset, "sensitivity", "acc_corrupted", **at)
                        ),
                        "Sensitivity [95% CI]": _ci(value, signed=True),
                        "Changed": pct(
                            _value(diag(model, dataset, "sensitivity", "changed", **at))
                        ),
                        "note": value.reason if isinstance(value.reason, str) else "",
                    }
                )
    return Table(rows)


def table_cdd_ablation(diagnostics: pl.DataFrame) -> Table:
    """CDD per model x dataset x condition (and all pooled): full vs without premise
    isolation vs without the divergence check, with 95% CIs: the paper's answer accuracy
    ("Acc"), then GRAB-RAG's behaviour score ("Behaviour": an EM-correct answer at
    Q100/Q50, an abstention at Q0/QC/QX)."""
    diag = _diag_lookup(diagnostics)
    chosen = where(diagnostics, section="ablation")
    rows = []
    for model, dataset in _cells(chosen):
        for condition in [*_conditions_of(chosen), "all"]:
            full = diag(model, dataset, "ablation", "accuracy", variant="full", condition=condition)
            if full is None:
                continue
            row = {"model": model, "dataset": dataset, "condition": condition, "n": _n(full)}
            for metric, label in (("accuracy", "Acc"), ("behaviour", "Behaviour")):
                for variant in ("full", "no_premise", "no_divergence"):
                    entry = diag(
                        model, dataset, "ablation", metric, variant=variant, condition=condition
                    )
                    row[f"{label} {CDD_VARIANTS[variant]}"] = _ci(entry)
            rows.append(row)
    return Table(rows)


def table_cdd_source_control(diagnostics: pl.DataFrame) -> Table:
    """Which source CDD's answered rows follow, per model x dataset x condition (and all
    pooled): counts and shares of final answers equal to the contextual answer, the
    parametric answer, both (they agree) or neither."""
    diag = _diag_lookup(diagnostics)
    chosen = where(diagnostics, section="source_control")
    rows = []
    for model, dataset in _cells(chosen):
        for condition in [*_conditions_of(chosen), "all"]:
            at = {"variant": "full", "condition": condition}
            first = diag(model, dataset, "source_control", "context", **at)
            if first is None:
                continue
            answered = _n(first)
            row = {"model": model, "dataset": dataset, "condition": condition, "answered": answered}
            for label in ("context", "parametric", "both", "neither"):
                count = int(_value(diag(model, dataset, "source_control", label, **at)))
                share = f" ({pct(count / answered)}%)" if answered else ""
                # The tidy file keeps the share of the answered rows (the count is n x it).
                row[label] = Number(
                    f"{count}{share}", count / answered if answered else None, n=answered
                )
            rows.append(row)
    return Table(rows)


# --- GRAB-RAG outputs beyond the metric table: Tables 4-5, the audit's quality, the
# --- confidence-cutoff sweep, the closed-book pass (Appendix F) and section 6's aggregates

QUALITY_ORDER = ("fluent", "borderline", "broken")


def table_ner_labels(backend: str) -> Table:
    """Table 4: the recogniser's labels and the internal entity types they map to (GLiNER's
    eight prompting labels in the paper; spaCy's OntoNotes labels in the embedded run)."""
    from grabrag.contexts.ner import GLINER_LABELS, SPACY_LABELS

    labels = GLINER_LABELS if backend == "gliner" else SPACY_LABELS
    return Table(
        [{"Backend": backend, "NER label": k, "Internal type": v} for k, v in labels.items()]
    )


def table_swap_examples(
    records: Mapping[str, Sequence[Mapping[str, Any]]],
    ratings: Mapping[str, Mapping[str, str]] | None = None,
    per_group: int = 2,
    width: int = 80,
) -> Table:
    """Table 5: QC swap examples from ``swaps.jsonl`` (dataset -> records), the first
    ``per_group`` accepted swaps (by question position) of each group: the audit's quality
    tiers (fluent, borderline, broken) for a dataset with a filled audit (``ratings``:
    dataset -> qid -> quality), else the swap tiers (1, 1b, 2, 3, 4). The excerpts show
    ``width`` characters around the span in the original and the QC passage."""
    from grabrag.contexts.audit import excerpt
    from grabrag.contexts.swaps import TIERS

    rows = []
    for dataset in in_order("dataset", records):
        accepted = sorted(
            (r for r in records[dataset] if r.get("status") == "accepted"),
            key=lambda r: r["index"],
        )
        rated = (ratings or {}).get(dataset) or {}
        if rated:
            groups = [(q, [r for r in accepted if rated.get(r["qid"]) == q]) for q in QUALITY_ORDER]
        else:
            groups = [(f"tier {t}", [r for r in accepted if r["tier"] == t]) for t in TIERS]
        for label, members in groups:
            for r in members[:per_group]:
                rows.append(
                    {
                        "Dataset": dataset,
                        "Group": label,
                        "Tier": r["tier"],
                        "Swap": f"{r.get('source_type', r['entity_type'])} -> {r['entity_type']}",
                        "Question": r["question"],
                        "Gold": " | ".join(r["answers"]),
                        "Original": excerpt(r["passage"]["text"], r["original_span"], width),
                        "QC": excerpt(r["modified_passage"]["text"], r["replacement"], width),
                    }
                )
    columns = ["Dataset", "Group", "Tier", "Swap", "Question", "Gold", "Original", "QC"]
    return Table(rows, columns)


def _bootstrap_share(flags: np.ndarray, n_resamples: int, level: float, rng) -> tuple:
    """Share of true flags with a percentile bootstrap CI over the rows."""
    if not len(flags):
        return float("nan"), float("nan"), float("nan")
    draws = rng.integers(0, len(flags), size=(n_resamples, len(flags)))
    shares = flags[draws].mean(axis=1)
    tail = (1 - level) / 2
    return (
        float(flags.mean()),
        float(np.quantile(shares, tail)),
        float(np.quantile(shares, 1 - tail)),
    )


def table_audit_quality(
    audits: Mapping[str, pl.DataFrame],
    n_resamples: int = 10_000,
    level: float = 0.95,
    seed: int = 42,
) -> Table:
    """Appendix C's audit: the quality-tier distribution per dataset and in total, and the
    broken rate by entity type, each with a percentile bootstrap CI over the rated swaps
    (``audits``: dataset -> the filled audit CSV with ``entity_type`` and ``quality``)."""
    rng = np.random.default_rng(seed)
    # Each rated swap as (entity type, quality), per dataset and pooled.
    frames = [
        [
            (str(kind), str(quality).strip().lower())
            for kind, quality in zip(frame["entity_type"], frame["quality"], strict=True)
        ]
        for _, frame in sorted(audits.items(), key=lambda kv: order_key("dataset", kv[0]))
    ]
    scopes = [(d, f) for d, f in zip(in_order("dataset", audits), frames, strict=True)]
    if len(frames) > 1:
        scopes.append(("Total", [rated for frame in frames for rated in frame]))
    rows = []

    def share_row(section: str, dataset: str, category: str, flags: np.ndarray) -> None:
        share, low, high = _bootstrap_share(flags, n_resamples, level, rng)
        rows.append(
            {
                "Section": section,
                "Dataset": dataset,
                "Category": category,
                "n": int(flags.sum()),
                "of": len(flags),
                "%": pct(share),
                "95% CI": Number(pct_ci(share, low, high).split(" ", 1)[-1], share, low, high),
            }
        )

    for dataset, frame in scopes:
        for quality in QUALITY_ORDER:
            flags = np.array([q == quality for _, q in frame], dtype=float)
            share_row("quality tier", dataset, quality, flags)
    for dataset, frame in scopes:
        for kind in sorted({k for k, _ in frame}):
            flags = np.array([q == "broken" for k, q in frame if k == kind], dtype=float)
            share_row("broken rate by type", dataset, kind, flags)
    columns = ["Section", "Dataset", "Category", "n", "of", "%", "95% CI"]
    return Table(rows, columns)


def table_cutoff_sweep(sweep: pl.DataFrame, threshold: float = 0.8, reference: float = 50) -> Table:
    """Appendix F: P3 across the closed-book confidence cutoffs at the F1 threshold,
    macro-averaged over model x dataset cells, with each metric's difference from the
    ``reference`` cutoff (pp)."""
    chosen = sweep.filter(same_float("threshold", threshold))
    grouped = group_means(chosen, "cutoff", ("hwsa_qc", "fac_q100", "ans_q100"))
    base = grouped.get(reference)
    rows = []
    for cutoff, values in grouped.items():
        row: dict[str, Any] = {"Cutoff": f"{cutoff:g}"}
        for column, short, label in (
            ("hwsa_qc", "HwSA_QC", "HwSA_QC (lower safer)"),
            ("fac_q100", "FAC_Q100", "FAC_Q100 (lower better)"),
            ("ans_q100", "Q100 Ans", "Q100 Ans (higher better)"),
        ):
            row[label] = pct(values[column])
            diff = float("nan") if base is None else values[column] - base[column]
            row[f"{short} vs cf={reference:g} (pp)"] = _pp(diff)
        rows.append(row)
    return Table(rows)


def table_closed_book(
    cells: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]], cutoff: float = 50
) -> Table:
    """Appendix F: the closed-book (CB) pass per model x dataset: how often it abstains,
    its mean confidence when it answers, and how many answers fall below the P3/P4
    confidence cutoff; then the mean over cells. ``cells``: (model, dataset) -> CB rows."""
    rows = []
    for model, dataset in cell_order(cells):
        cb = cells[(model, dataset)]
        n = len(cb)
        abstained = sum(r.get("decision") == "abstain" for r in cb)
        answers = [r for r in cb if r.get("decision") == "answer"]
        confidences = [float(r["confidence"]) for r in answers if r.get("confidence") is not None]
        below = sum(c < cutoff for c in confidences)
        rows.append(
            {
                "model": model,
                "dataset": dataset,
                "n": n,
                "CB abstain %": pct(abstained / n) if n else NOT_AVAILABLE,
                "CB answered": len(answers),
                "mean confidence (answered)": _decimals(
                    float(np.mean(confidences)) if confidences else None, 1
                ),
                f"answered below cutoff {cutoff:g} %": pct(below / len(answers))
                if answers
                else NOT_AVAILABLE,
                "parse failed %": pct((n - abstained - len(answers)) / n) if n else NOT_AVAILABLE,
                "_abstain": abstained / n if n else float("nan"),
                "_confidence": float(np.mean(confidences)) if confidences else float("nan"),
            }
        )
    if rows:
        rows.append(
            {
                "model": "Mean",
                "dataset": "",
                "n": "",
                "CB abstain %": pct(float(np.nanmean([r["_abstain"] for r in rows]))),
                "CB answered": "",
                "mean confidence (answered)": (
                    _decimals(float(np.nanmean([r["_confidence"] for r in rows])), 1)
                    if any(not math.isnan(r["_confidence"]) for r in rows)
                    else NOT_AVAILABLE
                ),
                f"answered below cutoff {cutoff:g} %": "",
                "parse failed %": "",
                "_abstain": float("nan"),
                "_confidence": float("nan"),
            }
        )
    hidden = ("_abstain", "_confidence")  # the per-cell numbers the mean row averages
    return Table([{k: v for k, v in row.items() if k not in hidden} for row in rows])


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


# --- the tables, declared once -------------------------------------------------------------


class Sources:
    """What the table builders read, each loaded on first use: the tables rule's input
    files by input name, the cell (model, dataset) each per-cell file is about, and the
    settings the rule passes (``fusion``, ``seed_sensitivity``, ``paper_outputs``)."""

    def __init__(
        self,
        files: Mapping[str, Sequence[str]],
        cells: Mapping[str, Sequence[Mapping[str, str]]],
        settings: Mapping[str, Any],
    ) -> None:
        self.files, self.cells, self.settings = files, cells, settings

    def keyed(self, name: str) -> list[tuple[Mapping[str, str], str]]:
        """(cell, path) of each file of input ``name``."""
        return list(zip(self.cells[name], self.files[name], strict=True))

    @cached_property
    def metrics(self) -> pl.DataFrame:
        return read_metrics(self.files["metrics"])

    @cached_property
    def p3_sweeps(self) -> pl.DataFrame:
        return read_sweeps(self.files["p3_sweeps"], self.cells["p3_sweeps"])

    @cached_property
    def evid_sweeps(self) -> pl.DataFrame:
        return read_sweeps(self.files["evid_sweeps"], self.cells["evid_sweeps"])

    @cached_property
    def diagnostics(self) -> pl.DataFrame:
        return read_diagnostics(self.files["cdd_diagnostics"])

    def reports(self, name: str) -> list[Any]:
        return [read_json(path) for path in self.files[name]]

    @property
    def fusion(self) -> tuple[float, float, float]:
        fusion = self.settings["fusion"]
        return fusion["lam"], fusion["tau1"], fusion["tau2"]

    @property
    def paper(self) -> Mapping[str, Any]:
        return self.settings["paper_outputs"]

    @cached_property
    def audits(self) -> dict[str, pl.DataFrame]:
        """The filled audit CSV of each audited dataset, every field as text."""
        return {
            dataset: pl.read_csv(path, infer_schema=False, empty_string_is_null=False)
            for dataset, path in zip(
                self.paper["audited"], self.files["audit_ratings"], strict=True
            )
        }

    def ratings(self) -> dict[str, dict[str, str]]:
        """dataset -> qid -> the audit's quality rating."""
        from grabrag.contexts.audit import read_audit_ratings

        return {
            dataset: read_audit_ratings(path)
            for dataset, path in zip(
                self.paper["audited"], self.files["audit_ratings"], strict=True
            )
        }

    def seed_sensitivity(self) -> Table:
        """Table 13 for each configured seed variant (one, in practice)."""
        tables = []
        for cell, path in self.keyed("seed_metrics"):
            spec = self.settings["seed_sensitivity"][cell["dataset"]]
            tables.append(
                table_seed_sensitivity(
                    self.metrics,
                    read_metrics([path]),
                    spec["model"],
                    spec["dataset"],
                    spec["base_seed"],
                    spec["seed"],
                )
            )
        rows = [row for table in tables for row in table.rows]
        return with_note(Table(rows), " ".join(table.note for table in tables))


@dataclass(frozen=True)
class TableSpec:
    """One table: its name (``results/tables/<name>.*``; its caption is
    ``workflow/report/tables/<name>.rst``), how it is built from the :class:`Sources`,
    and when a config produces it."""

    name: str
    build: Callable[[Sources], Table]
    when: Callable[[Features], bool] = lambda features: True


def _audit_table(sources: Sources) -> Table:
    audits = sources.files["audits"]
    return table_audit(read_csvs(audits, strings=("dataset", "model", "policy", "sign_preserved")))


TABLES = (
    TableSpec("table1_hwsa", lambda s: table_hwsa(s.metrics, with_ci=False)),
    TableSpec("table2_policies", lambda s: table_policy_comparison(s.metrics)),
    TableSpec("table3_qc_sources", lambda s: table_qc_sources(s.metrics, per_cell=False)),
    TableSpec("table7_hwsa_ci", lambda s: table_hwsa(s.metrics, with_ci=True)),
    TableSpec("table8_fac_ci", lambda s: table_fac(s.metrics)),
    TableSpec("table9_qc_sources", lambda s: table_qc_sources(s.metrics, per_cell=True)),
    TableSpec("table10_aurc", lambda s: table_aurc(s.metrics)),
    TableSpec("table11_ece", lambda s: table_ece(s.metrics, "ece")),
    TableSpec(
        "table12_p3_sweep", lambda s: table_p3_sweep(s.p3_sweeps, s.paper["confidence_cutoff"])
    ),
    TableSpec(
        "normalised_hwsa",
        lambda s: table_metric_by_cell(s.metrics, "normalised_hwsa", "QC", "HwSA@QC / Ans@Q100"),
    ),
    TableSpec("selection_bias", lambda s: table_selection_bias(s.metrics)),
    TableSpec("parse_failures", lambda s: table_parse_failures(s.reports("reports"))),
    # The paper's other outputs: Tables 4 and 5 (NER labels, swap examples), the
    # confidence-cutoff sweep and the closed-book pass (Appendix F), section 6's aggregates.
    TableSpec("table4_ner_labels", lambda s: table_ner_labels(s.paper["ner_backend"])),
    TableSpec(
        "table5_swap_examples",
        lambda s: table_swap_examples(
            {cell["dataset"]: read_jsonl(path) for cell, path in s.keyed("swaps")}, s.ratings()
        ),
    ),
    TableSpec(
        "table12b_cutoff_sweep",
        lambda s: table_cutoff_sweep(
            s.p3_sweeps, s.paper["f1_threshold"], s.paper["confidence_cutoff"]
        ),
    ),
    TableSpec(
        "closed_book",
        lambda s: table_closed_book(
            {(c["model"], c["dataset"]): read_jsonl(path) for c, path in s.keyed("closed_book")},
            s.paper["confidence_cutoff"],
        ),
    ),
    TableSpec("section6_aggregates", lambda s: table_section6(s.metrics)),
    TableSpec(
        "hwsa_conditions",
        lambda s: table_hwsa_conditions(s.metrics),
        when=lambda f: "QX" in f.conditions,
    ),
    # 15-bin ECE: EvidentialRAG's calibration measure, for comparing EVID with P0-P4.
    TableSpec("table11b_ece15", lambda s: table_ece(s.metrics, "ece_15"), lambda f: f.evidential),
    TableSpec("evid_results", lambda s: table_evid_results(s.metrics), lambda f: f.evidential),
    TableSpec(
        "evid_efficiency",
        lambda s: table_evid_efficiency(s.reports("evid_efficiency")),
        lambda f: f.evidential,
    ),
    TableSpec(
        "evid_lambda_sweep",
        lambda s: table_evid_lambda_sweep(s.evid_sweeps, *s.fusion),
        lambda f: f.evidential,
    ),
    TableSpec(
        "evid_tau_sweep",
        lambda s: table_evid_tau_sweep(s.evid_sweeps, *s.fusion),
        lambda f: f.evidential,
    ),
    TableSpec(
        "evid_ablation",
        lambda s: table_evid_ablation(s.evid_sweeps, *s.fusion, s.metrics),
        lambda f: f.evidential,
    ),
    TableSpec(
        "evid_evaluator",
        lambda s: table_evid_evaluator(s.reports("evid_evaluate_reports")),
        lambda f: f.evidential,
    ),
    TableSpec(
        "cdd_results",
        lambda s: table_cdd_results(s.metrics, s.diagnostics),
        lambda f: f.cdd_family,
    ),
    TableSpec(
        "cdd_source_control",
        lambda s: table_cdd_source_control(s.diagnostics),
        lambda f: f.cdd_traces,
    ),
    TableSpec(
        "cdd_sensitivity",
        lambda s: table_cdd_sensitivity(s.diagnostics),
        lambda f: f.cdd_diagnostics,
    ),
    TableSpec(
        "cdd_ablation", lambda s: table_cdd_ablation(s.diagnostics), lambda f: f.cdd_diagnostics
    ),
    TableSpec("table6_audit", _audit_table, lambda f: f.audited),
    TableSpec(
        "audit_quality",
        lambda s: table_audit_quality(
            s.audits,
            s.paper["bootstrap"]["n_resamples"],
            s.paper["bootstrap"]["confidence_level"],
            s.paper["seed"],
        ),
        lambda f: f.audited,
    ),
    TableSpec("table13_seed_sensitivity", Sources.seed_sensitivity, lambda f: f.seed_sensitivity),
)
"""Every table, in the order a run lists them."""


def table_names(features: Features) -> list[str]:
    """The tables a config with these features produces."""
    return [spec.name for spec in TABLES if spec.when(features)]


def build_table(name: str, sources: Sources) -> Table:
    by_name = {spec.name: spec for spec in TABLES}
    if name not in by_name:
        raise ValueError(f"unknown table {name!r}; known: {', '.join(by_name)}")
    return by_name[name].build(sources)
