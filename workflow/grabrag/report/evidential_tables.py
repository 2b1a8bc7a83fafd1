"""The tables of the QX condition and EvidentialRAG (EVID, EVID+CB): HwSA at Q0, QC and QX,
EvidentialRAG's results, efficiency, fusion-rule and threshold sweeps, ablations and
evaluator validity, in the forms of the EvidentialRAG paper's tables.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from grabrag.core.conditions import SHOULD_ABSTAIN, SHOULD_ANSWER
from grabrag.core.outputs import EVID_EFFICIENCY, EVID_EVALUATE_REPORTS, EVID_SWEEPS, METRICS
from grabrag.core.registry import Features
from grabrag.evaluation.evaluate import policy_sort_key
from grabrag.report.specs import Sources, TableSpec
from grabrag.report.table_cells import (
    NOT_AVAILABLE,
    _cells,
    _ci,
    _decimals,
    _lookup,
    _mean,
    _n,
    _policies,
    _value,
    pct,
    with_question_limits,
)
from grabrag.report.tabular import Number, Table, order_key, same_float, where


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


# --- the tables this module declares (grabrag.report.specs) ---------------------------------


def _fusion(s: Sources) -> tuple[float, float, float]:
    fusion = s.setting("fusion")
    return fusion["lam"], fusion["tau1"], fusion["tau2"]


def _evidential(features: Features) -> bool:
    return features.evidential


_SWEEPS = (EVID_SWEEPS,)
TABLES = (
    TableSpec(
        "hwsa_conditions",
        lambda s: table_hwsa_conditions(s.read(METRICS)),
        (METRICS,),
        when=lambda f: "QX" in f.conditions,
    ),
    TableSpec(
        "evid_results",
        lambda s: with_question_limits(
            table_evid_results(s.read(METRICS)), s.setting("question_limits")
        ),
        (METRICS,),
        ("question_limits",),
        _evidential,
    ),
    TableSpec(
        "evid_efficiency",
        lambda s: table_evid_efficiency([r for _, r in s.read(EVID_EFFICIENCY)]),
        (EVID_EFFICIENCY,),
        (),
        _evidential,
    ),
    TableSpec(
        "evid_lambda_sweep",
        lambda s: table_evid_lambda_sweep(s.read(EVID_SWEEPS), *_fusion(s)),
        _SWEEPS,
        ("fusion",),
        _evidential,
    ),
    TableSpec(
        "evid_tau_sweep",
        lambda s: table_evid_tau_sweep(s.read(EVID_SWEEPS), *_fusion(s)),
        _SWEEPS,
        ("fusion",),
        _evidential,
    ),
    TableSpec(
        "evid_ablation",
        lambda s: table_evid_ablation(s.read(EVID_SWEEPS), *_fusion(s), s.read(METRICS)),
        (EVID_SWEEPS, METRICS),
        ("fusion",),
        _evidential,
    ),
    TableSpec(
        "evid_evaluator",
        lambda s: table_evid_evaluator([r for _, r in s.read(EVID_EVALUATE_REPORTS)]),
        (EVID_EVALUATE_REPORTS,),
        (),
        _evidential,
    ),
)
