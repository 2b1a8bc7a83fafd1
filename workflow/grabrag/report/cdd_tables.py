"""The tables of CDD, CDD-alpha and the prompt-only baselines: their results beside
Standard RAG (P1), and the diagnostics of CDD's traces (source control, causal
sensitivity, ablations) from the diagnostics CSV.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from grabrag.core import registry
from grabrag.core.conditions import SHOULD_ABSTAIN, SHOULD_ANSWER
from grabrag.core.outputs import CDD_DIAGNOSTICS_TABLE, METRICS
from grabrag.report.specs import TableSpec
from grabrag.report.table_cells import (
    _cells,
    _ci,
    _lookup,
    _n,
    _records,
    _value,
    pct,
    with_question_limits,
)
from grabrag.report.tabular import Number, Table, where

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


def _accuracy(row: Any) -> Any:
    """A diagnostics accuracy in percent, keeping the rows it is over (its n)."""
    return pct(_value(row), None if row is None else _n(row))


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
        if not in_cell & set(registry.names(lambda p: p.family == registry.CDD)):
            continue  # CDD did not run on this dataset (cdd.datasets)
        compared = registry.names(lambda p: p.in_cdd_tables)
        for policy in (p for p in compared if p in present and p in in_cell):
            row: dict[str, Any] = {"model": model, "dataset": dataset, "policy": policy}
            for condition in conditions:
                rate = get(model, dataset, policy, condition, "answer_rate")
                label = "HwSA" if condition in SHOULD_ABSTAIN else "Ans"
                row[f"{label}@{condition} [95% CI]"] = _ci(rate)
            row["EM@Q100 [95% CI]"] = _ci(get(model, dataset, policy, "Q100", "em"))
            at = (model, dataset, "perturbation_type", "accuracy", policy)
            for kind in (t for t in types if t not in CDD_OTHER_TYPES):
                row[f"Acc {kind}"] = _accuracy(diag(*at, kind=kind))
            macro = diag(*at, kind="macro_adversarial")
            row["Acc adversarial macro [95% CI]"] = _ci(macro)
            for kind in (t for t in types if t in CDD_OTHER_TYPES):  # beside the macro
                row[f"Acc {kind}"] = _accuracy(diag(*at, kind=kind))
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


# --- the tables this module declares (grabrag.report.specs) ---------------------------------

_DIAGNOSTICS = (CDD_DIAGNOSTICS_TABLE,)
TABLES = (
    TableSpec(
        "cdd_results",
        lambda s: with_question_limits(
            table_cdd_results(s.read(METRICS), s.read(CDD_DIAGNOSTICS_TABLE)),
            s.setting("question_limits"),
        ),
        (METRICS, CDD_DIAGNOSTICS_TABLE),
        ("question_limits",),
        when=lambda f: f.cdd_family,
    ),
    TableSpec(
        "cdd_source_control",
        lambda s: table_cdd_source_control(s.read(CDD_DIAGNOSTICS_TABLE)),
        _DIAGNOSTICS,
        when=lambda f: f.cdd_traces,
    ),
    TableSpec(
        "cdd_sensitivity",
        lambda s: table_cdd_sensitivity(s.read(CDD_DIAGNOSTICS_TABLE)),
        _DIAGNOSTICS,
        when=lambda f: f.cdd_diagnostics,
    ),
    TableSpec(
        "cdd_ablation",
        lambda s: table_cdd_ablation(s.read(CDD_DIAGNOSTICS_TABLE)),
        _DIAGNOSTICS,
        when=lambda f: f.cdd_diagnostics,
    ),
)
