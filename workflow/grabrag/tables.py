"""The paper's tables from the tidy metric table (one row per model x dataset x policy x
condition x metric with its bootstrap CI), written as CSV + Markdown + LaTeX.

Numbers are percentages with one decimal, as in the paper; CIs are "[low, high]". The
CSV keeps the same formatted cells, so the three files show one table. A table named after
one of the paper's has the paper's columns and no others; what the paper gives in a
caption (the questions behind each rate, say) goes into the table's note
(``with_note``), which follows the caption.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from . import registry
from .errors import DataError
from .evaluate import policy_sort_key
from .io import atomic_write
from .metrics import audit_hwsa, capability_set, decision_rate
from .policies import SWEEP_CUTOFFS, SWEEP_THRESHOLDS, p3_sweep_decisions

PAPER_POLICIES = ("P0", "P1", "P2", "P3", "P4")
SHOULD_ANSWER = ("Q100", "Q50")
SHOULD_ABSTAIN = ("Q0", "QC", "QX")


def pct(value: float) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{100 * value:.1f}"


def pct_ci(value: float, low: float, high: float, signed: bool = False) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    sign = "+" if signed else ""
    ci = (
        ""
        if math.isnan(low) or math.isnan(high)
        else (f" [{100 * low:{sign}.1f}, {100 * high:{sign}.1f}]")
    )
    return f"{100 * value:{sign}.1f}{ci}"


def _lookup(metrics: pd.DataFrame) -> Callable[..., pd.Series | None]:
    index = {
        (r.model, r.dataset, r.policy, r.condition, r.metric): r
        for r in metrics.itertuples(index=False)
    }

    def get(model: str, dataset: str, policy: str, condition: str, metric: str):
        return index.get((model, dataset, policy, condition, metric))

    return get


def _cells(metrics: pd.DataFrame) -> list[tuple[str, str]]:
    pairs = metrics[["model", "dataset"]].drop_duplicates()
    return sorted(map(tuple, pairs.to_numpy()))


def policy_table_policies() -> list[str]:
    """The policies the policy tables show (Tables 1, 2, 7, 8, 10...), in registry order."""
    return [name for name, spec in registry.policies().items() if spec.in_policy_tables]


def _policies(metrics: pd.DataFrame) -> list[str]:
    return [p for p in policy_table_policies() if p in set(metrics["policy"])]


def _value(row: Any) -> float:
    return float("nan") if row is None else float(row.value)


def with_note(table: pd.DataFrame, note: str) -> pd.DataFrame:
    """Attach the sentence that ``write_table`` prints after the table's caption."""
    table.attrs["note"] = note
    return table


def _sizes_note(label: str, sizes: Mapping[str, set[int]]) -> str:
    """ "<label>: 202 (nq), 330 (hotpotqa)." from the sizes seen per group; a group whose
    cells differ shows its range."""
    parts = []
    for group, values in sizes.items():
        low, high = min(values), max(values)
        parts.append(f"{low} ({group})" if low == high else f"{low}-{high} ({group})")
    return f"{label}: {', '.join(parts)}." if parts else ""


def table_hwsa(metrics: pd.DataFrame, with_ci: bool) -> pd.DataFrame:
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
                row["HwSA(Q0) [95% CI]"] = pct_ci(*_triple(q0))
                row["HwSA(QC) [95% CI]"] = pct_ci(*_triple(qc))
            else:
                row["HwSA_Q0"], row["HwSA_QC"] = pct(_value(q0)), pct(_value(qc))
            row["Delta [95% CI]"] = pct_ci(*_triple(diff), signed=True)
            out.append(row)
    table = pd.DataFrame(out)
    return table if with_ci else with_note(table, _sizes_note("n = QC-eligible questions", sizes))


def _triple(row: Any) -> tuple[float, float, float]:
    if row is None:
        return (float("nan"),) * 3
    return float(row.value), float(row.ci_low), float(row.ci_high)


def _macro(metrics: pd.DataFrame, policy: str, condition: str, metric: str) -> float:
    """Mean over model x dataset cells (the paper's macro average), NaN cells left out."""
    chosen = metrics[
        (metrics.policy == policy) & (metrics.condition == condition) & (metrics.metric == metric)
    ]["value"].astype(float)
    chosen = chosen[~chosen.isna()]
    return float(chosen.mean()) if len(chosen) else float("nan")


def table_policy_comparison(metrics: pd.DataFrame) -> pd.DataFrame:
    """Table 2: policies macro-averaged over the model x dataset cells."""
    rows = []
    for policy in _policies(metrics):
        rows.append(
            {
                "Policy": registry.policy(policy).described,
                "HwSA_QC (lower safer)": pct(_macro(metrics, policy, "QC", "hwsa")),
                "FAC_Q100 (lower better)": pct(_macro(metrics, policy, "Q100", "fac")),
                "Ans_Q100 (higher better)": pct(_macro(metrics, policy, "Q100", "answer_rate")),
                "FAC_Q50 (lower better)": pct(_macro(metrics, policy, "Q50", "fac")),
                "Ans_Q50 (higher better)": pct(_macro(metrics, policy, "Q50", "answer_rate")),
            }
        )
    return pd.DataFrame(rows)


def table_fac(metrics: pd.DataFrame) -> pd.DataFrame:
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
                    "FAC(Q100)": pct_ci(*_triple(fac)),
                    "FAC(Q50)": pct_ci(*_triple(get(model, dataset, policy, "Q50", "fac"))),
                    "Ans(Q100)": pct_ci(
                        *_triple(get(model, dataset, policy, "Q100", "answer_rate"))
                    ),
                    "Ans(Q50)": pct_ci(*_triple(get(model, dataset, policy, "Q50", "answer_rate"))),
                }
            )
    # FAC's denominator, the P1-anchored capable set, is one size per model x dataset.
    return with_note(pd.DataFrame(rows), _sizes_note("Capable-set sizes (FAC at Q100)", sizes))


def table_qc_sources(metrics: pd.DataFrame, per_cell: bool) -> pd.DataFrame:
    """Table 9 (per cell) and Table 3 (per model, pooled over datasets and the paper's
    policies P0-P4)."""
    qc = metrics[metrics.condition == "QC"]
    if not per_cell:
        qc = qc[qc.policy.isin(PAPER_POLICIES)]
    counts = qc[qc.metric.isin(["qc_answered", "qc_echo", "qc_override", "qc_hallucination"])]
    keys = ["model", "dataset", "policy"] if per_cell else ["model"]
    pooled = counts.pivot_table(index=keys, columns="metric", values="value", aggfunc="sum")
    get = _lookup(metrics)
    rows = []
    groups = list(pooled.iterrows())
    if not per_cell and groups:
        groups.append((("All",), pooled.sum()))
    for key, sums in groups:
        key = key if isinstance(key, tuple) else (key,)
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
            row[label] = pct(float(sums.get(metric, 0.0)) / answered) if answered else "n/a"
        rows.append(row)
    return pd.DataFrame(rows)


def table_aurc(metrics: pd.DataFrame) -> pd.DataFrame:
    """Table 10: AURC over all conditions per cell and policy, with the mean row."""
    chosen = metrics[(metrics.metric == "aurc") & (metrics.condition == "all")]
    wide = chosen.pivot_table(index=["model", "dataset"], columns="policy", values="value")
    wide = wide[[p for p in policy_table_policies() if p in wide.columns]]
    wide.loc[("Mean", ""), :] = wide.mean()
    return wide.round(3).reset_index()


def table_ece(metrics: pd.DataFrame, metric: str = "ece") -> pd.DataFrame:
    """Table 11: ECE averaged across models and datasets, by policy and condition."""
    chosen = metrics[
        (metrics.metric == metric) & metrics.condition.isin(["Q100", "Q50", "Q0", "QC"])
    ]
    wide = chosen.pivot_table(index="policy", columns="condition", values="value", aggfunc="mean")
    wide = wide[[c for c in ("Q100", "Q50", "Q0", "QC") if c in wide.columns]]
    wide = wide.loc[sorted(wide.index, key=policy_sort_key)]
    return wide.round(3).reset_index()


def table_metric_by_cell(
    metrics: pd.DataFrame, metric: str, condition: str, label: str
) -> pd.DataFrame:
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
                    label: pct_ci(*_triple(row)),
                    "n": int(row.n),
                    "note": row.reason if isinstance(row.reason, str) else "",
                }
            )
    return pd.DataFrame(rows)


def table_selection_bias(metrics: pd.DataFrame) -> pd.DataFrame:
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
                    "EM eligible": pct_ci(*_triple(eligible)),
                    "EM excluded": pct_ci(*_triple(excluded)),
                    "gap": pct_ci(*_triple(gap), signed=True),
                }
            )
    return pd.DataFrame(rows)


def table_seed_sensitivity(
    base: pd.DataFrame,
    variant: pd.DataFrame,
    model: str,
    dataset: str,
    base_seed: int,
    variant_seed: int,
) -> pd.DataFrame:
    """Table 13: HwSA at Q0 and QC per policy under two construction seeds, and |delta|,
    with two decimals as in the paper.

    As in the paper (Appendix G), each rate is the answer rate over that seed's own cell:
    Q0 over every question, QC over the questions QC-eligible under that seed (so the QC
    denominators may differ); |delta| is in percentage points. The model, the dataset and
    the denominators go into the note, as the paper gives them in its text.
    """
    get_base, get_variant = _lookup(base), _lookup(variant)
    variant_name = str(variant["dataset"].iloc[0]) if len(variant) else dataset
    out = []
    sizes: dict[tuple[int, str], set[int]] = {}
    for policy in _policies(variant):
        for condition in ("Q0", "QC"):
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
                    "|delta| (pp)": "n/a" if math.isnan(a - b) else f"{100 * abs(a - b):.2f}",
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
    return with_note(pd.DataFrame(out), f"{model} on {dataset}; questions per cell, {counts}.")


def _pct2(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{100 * value:.2f}"


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
) -> pd.DataFrame:
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
    for model, policy in sorted({(m, p) for m, p, c in decisions if c == "QC"}):
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
    return pd.DataFrame(rows, columns=list(AUDIT_COLUMNS))


def _pp(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{100 * value:+.1f}"


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


def table_audit(audit: pd.DataFrame) -> pd.DataFrame:
    """Table 6 with the paper's columns: HwSA@QC on the full QC set vs the audited
    fluent + borderline subset (F+B) per model, dataset and policy, and the shift in pp;
    then the macro-average row and a last row counting the cells whose Q0 -> QC delta
    keeps its sign on F+B (the paper's "All 30 delta signs preserved."). The deltas per
    cell are in each dataset's audit_hwsa.csv."""
    out = []
    for row in audit.itertuples(index=False):
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
    paper = audit[audit["policy"].isin(PAPER_POLICIES)]
    pooled = paper if len(paper) else audit
    label = "Macro avg (P0-P4)" if len(paper) and len(paper) < len(audit) else "Macro avg"
    if len(pooled):
        blank = dict.fromkeys(TABLE6_COLUMNS, "")
        out.append(
            {
                **blank,
                "Model": label,
                "HwSA@QC (all)": pct(pooled["hwsa_qc_all"].mean()),
                "HwSA@QC (F+B)": pct(pooled["hwsa_qc_clean"].mean()),
                "Shift (pp)": _pp(pooled["shift"].mean()),
            }
        )
        known = pooled["sign_preserved"].dropna().astype(bool)
        kept, cells = int(known.sum()), len(known)
        kept_text = f"All {cells}" if kept == cells else f"{kept} of {cells}"
        out.append({**blank, "Model": f"{kept_text} delta signs preserved."})
    return pd.DataFrame(out, columns=list(TABLE6_COLUMNS))


def p3_sweep_rows(
    p1: Mapping[str, Sequence[dict]],
    cb: Sequence[dict],
    p1_q100_decisions: Sequence[dict],
    gold: Mapping[str, Sequence[str]],
) -> list[dict[str, Any]]:
    """Table 12 inputs for one model x dataset: for every (threshold, cutoff), HwSA at QC,
    FAC at Q100 (on the P1 capability set) and the Q100 answer rate, from stored outputs."""
    capability = capability_set(p1_q100_decisions, gold)
    sweeps = {condition: p3_sweep_decisions(rows, cb) for condition, rows in p1.items()}
    out = []
    for threshold in SWEEP_THRESHOLDS:
        for cutoff in SWEEP_CUTOFFS:
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


def table_p3_sweep(sweep: pd.DataFrame, cutoff: float = 50) -> pd.DataFrame:
    """Table 12: macro averages over cells at the paper's cutoff."""
    chosen = sweep[sweep.cutoff == cutoff].reindex(
        columns=["threshold", "cutoff", "hwsa_qc", "fac_q100", "ans_q100"]
    )  # no QC condition: no hwsa_qc column, shown as NaN
    grouped = chosen.groupby("threshold")[["hwsa_qc", "fac_q100", "ans_q100"]].mean()
    return pd.DataFrame(
        {
            "F1": grouped.index,
            "HwSA_QC (lower safer)": [pct(v) for v in grouped["hwsa_qc"]],
            "FAC_Q100 (lower better)": [pct(v) for v in grouped["fac_q100"]],
            "Q100 Ans (higher better)": [pct(v) for v in grouped["ans_q100"]],
        }
    )


def table_parse_failures(reports: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
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
    return pd.DataFrame(rows)


# --- QX and EvidentialRAG ------------------------------------------------------------


def _n(row: Any) -> int:
    return int(row.n) if row is not None else 0


def table_hwsa_conditions(metrics: pd.DataFrame) -> pd.DataFrame:
    """HwSA (the answer rate over each condition's questions) at Q0, QC and QX with 95% CIs,
    and QX - QC on the questions present at both (paired), per cell and policy."""
    get = _lookup(metrics)
    out = []
    for model, dataset in _cells(metrics):
        for policy in _policies(metrics):
            row: dict[str, Any] = {"model": model, "dataset": dataset, "policy": policy}
            for condition in ("Q0", "QC", "QX"):
                rate = get(model, dataset, policy, condition, "answer_rate")
                row[f"n {condition}"] = _n(rate)
                row[f"HwSA({condition}) [95% CI]"] = pct_ci(*_triple(rate))
            diff = get(model, dataset, policy, "QX-QC", "hwsa_diff")
            row["n QC&QX"] = _n(diff)
            row["QX - QC [95% CI]"] = pct_ci(*_triple(diff), signed=True)
            out.append(row)
    return pd.DataFrame(out)


def _decimals(value: float, digits: int = 3) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.{digits}f}"


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


def table_evid_results(metrics: pd.DataFrame) -> pd.DataFrame:
    """Per cell, policy and condition: HwSA at should-abstain conditions, FAC and the answer
    rate at should-answer ones, the route shares (EVID / EVID+CB), EvidentialRAG's ECE
    (Eqs. 26-27: P1 and EVID / EVID+CB) and, in its own column, GRAB-RAG's 15-bin
    midpoint ECE; then one ``pooled`` row per cell and policy over every condition (QX
    included) with refusal precision / recall / F1 (R = abstained, U = Q0/QC/QX), the
    route shares and EvidentialRAG's pooled ECE."""
    get = _lookup(metrics)
    conditions = [c for c in (*SHOULD_ANSWER, *SHOULD_ABSTAIN) if c in set(metrics.condition)]
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
                        "HwSA [95% CI]": pct_ci(*_triple(rate)) if should_abstain else "",
                        "FAC [95% CI]": "" if should_abstain else pct_ci(*_triple(fac)),
                        "Ans [95% CI]": "" if should_abstain else pct_ci(*_triple(rate)),
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
                    "Refusal P": pct_ci(*_triple(precision)),
                    "Refusal R": pct_ci(*_triple(recall)),
                    "Refusal F1": pct_ci(*_triple(f1)),
                }
            )
    return pd.DataFrame(out)


def table_evid_efficiency(summaries: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Table 11's form per model x dataset: P1 vs EVID / EVID+CB."""

    def num(value: Any, digits: int) -> str:
        return "n/a" if value is None else f"{float(value):.{digits}f}"

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
                    "relative cost": "n/a"
                    if entry["relative_cost"] is None
                    else f"{float(entry['relative_cost']):.2f}x",
                }
            )
    return pd.DataFrame(rows)


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


def _sweep_summary(chosen: pd.DataFrame) -> dict[str, str]:
    """Macro averages over model x dataset cells of one sweep setting's rows."""

    def mean(condition: str, column: str) -> float:
        values = chosen[chosen.condition == condition][column].astype(float)
        values = values[~values.isna()]
        return float(values.mean()) if len(values) else float("nan")

    out = {
        "Ans@Q100": pct(mean("Q100", "answer_rate")),
        "EM@Q100": pct(mean("Q100", "em")),
    }
    for condition in SHOULD_ABSTAIN:
        if (chosen.condition == condition).any():
            out[f"HwSA@{condition}"] = pct(mean(condition, "answer_rate"))
    out["abstain (all)"] = pct(mean("pooled", "abstain_rate"))
    out["refusal P"] = pct(mean("pooled", "refusal_precision"))
    out["refusal R"] = pct(mean("pooled", "refusal_recall"))
    out["refusal F1"] = pct(mean("pooled", "refusal_f1"))
    for metric, label in ROUTE_COLUMNS:
        out[label] = pct(mean("pooled", metric))
    out[EVID_ECE] = _decimals(mean("pooled", "ece_answer_15"))
    return out


def _cells_of(sweep: pd.DataFrame) -> int:
    return len(sweep[["model", "dataset"]].drop_duplicates()) if len(sweep) else 0


def _same(column: pd.Series, value: float) -> pd.Series:
    return (column.astype(float) - float(value)).abs() < 1e-9


def table_evid_lambda_sweep(sweep: pd.DataFrame, lam: float, tau1: float, tau2: float):
    """Table 9's form: the fusion rule (normalised Dempster, lambda 0 ... 1) at the
    configured thresholds, per policy, macro-averaged over model x dataset cells."""
    chosen = sweep[(sweep.variant == "evid") & _same(sweep.tau1, tau1) & _same(sweep.tau2, tau2)]
    default = f"{float(lam):g}"
    rows = []
    for policy in sorted(set(chosen.policy), key=policy_sort_key):
        for rule in _lambda_rules(chosen.rule.astype(str)):
            part = chosen[(chosen.policy == policy) & (chosen.rule == rule)]
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
    return pd.DataFrame(rows)


def table_evid_tau_sweep(sweep: pd.DataFrame, lam: float, tau1: float, tau2: float):
    """Table 10's form: the routing thresholds at the configured lambda."""
    rule = f"{float(lam):g}"
    chosen = sweep[(sweep.variant == "evid") & (sweep.rule == rule)]
    pairs = sorted({(float(a), float(b)) for a, b in zip(chosen.tau1, chosen.tau2, strict=True)})
    rows = []
    for policy in sorted(set(chosen.policy), key=policy_sort_key):
        for a, b in pairs:
            part = chosen[(chosen.policy == policy) & _same(chosen.tau1, a) & _same(chosen.tau2, b)]
            label = f"({a:g}, {b:g})" + (" (default)" if (a, b) == (tau1, tau2) else "")
            rows.append(
                {
                    "policy": policy,
                    "(tau1, tau2)": label,
                    "cells": _cells_of(part),
                    **_sweep_summary(part),
                }
            )
    return pd.DataFrame(rows)


def _naive_rag_summary(
    metrics: pd.DataFrame, cells: set[tuple[str, str]]
) -> tuple[dict[str, str], int]:
    """The "without evidential evaluator" row (section 5.9: the system collapses to naive
    RAG): P1's numbers in :func:`_sweep_summary`'s columns, macro-averaged over the
    ``cells`` (model, dataset) the sweep covers; also how many cells that is."""
    in_cells = np.array(
        [(m, d) in cells for m, d in zip(metrics.model, metrics.dataset, strict=True)], dtype=bool
    )
    chosen = metrics[(metrics.policy == "P1").to_numpy() & in_cells]
    get = _lookup(chosen)
    per_cell = sorted({(m, d) for m, d in zip(chosen.model, chosen.dataset, strict=True)})

    def mean(condition: str, metric: str) -> float:
        values = [_value(get(m, d, "P1", condition, metric)) for m, d in per_cell]
        values = [v for v in values if not math.isnan(v)]
        return float(np.mean(values)) if values else float("nan")

    def abstain_all(model: str, dataset: str) -> float:
        rates = [
            get(model, dataset, "P1", c, "abstain_rate") for c in (*SHOULD_ANSWER, *SHOULD_ABSTAIN)
        ]
        rates = [r for r in rates if r is not None and not math.isnan(_value(r))]
        n = sum(_n(r) for r in rates)
        return sum(_value(r) * _n(r) for r in rates) / n if n else float("nan")

    abstain = [v for v in (abstain_all(m, d) for m, d in per_cell) if not math.isnan(v)]
    out = {
        "Ans@Q100": pct(mean("Q100", "answer_rate")),
        "EM@Q100": pct(mean("Q100", "em")),
    }
    for condition in SHOULD_ABSTAIN:
        if (chosen.condition == condition).any():
            out[f"HwSA@{condition}"] = pct(mean(condition, "answer_rate"))
    out["abstain (all)"] = pct(float(np.mean(abstain)) if abstain else float("nan"))
    out["refusal P"] = pct(mean("pooled", "refusal_precision"))
    out["refusal R"] = pct(mean("pooled", "refusal_recall"))
    out["refusal F1"] = pct(mean("pooled", "refusal_f1"))
    for _, label in ROUTE_COLUMNS:
        out[label] = "n/a"
    out[EVID_ECE] = _decimals(mean("pooled", "ece_answer_15"))
    return out, len(per_cell)


def table_evid_ablation(
    sweep: pd.DataFrame,
    lam: float,
    tau1: float,
    tau2: float,
    metrics: pd.DataFrame | None = None,
):
    """Table 12's form: full EVID vs without conflict-preserving fusion (evidence
    averaging) vs without routing (always answers the top claim), from stored evaluations,
    and (with ``metrics``) without the evidential evaluator, which leaves naive RAG: P1 on
    the same model x dataset cells, from the metrics."""
    rule = f"{float(lam):g}"
    variants = (
        ("full", "evid", rule, True),
        ("without conflict-preserving fusion (evidence averaging)", "no_fusion", "average", True),
        ("without dynamic routing (always answer)", "no_routing", rule, False),
    )
    rows = []
    for policy in sorted(set(sweep.policy), key=policy_sort_key):
        for label, variant, rule_value, routed in variants:
            part = sweep[
                (sweep.policy == policy) & (sweep.variant == variant) & (sweep.rule == rule_value)
            ]
            if routed:
                part = part[_same(part.tau1, tau1) & _same(part.tau2, tau2)]
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
        cells = set(zip(sweep.model, sweep.dataset, strict=True))
        summary, n_cells = _naive_rag_summary(metrics, cells)
        if n_cells:
            rows.append(
                {
                    "policy": "P1",
                    "variant": "without evidential evaluator (naive RAG: P1)",
                    "cells": n_cells,
                    **summary,
                }
            )
    return pd.DataFrame(rows)


def table_evid_evaluator(reports: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Table 13's form from the evaluate reports, per model x dataset x condition: the
    evaluator passes, the schema-valid rate (parsed as generated), the repaired rate (an
    output cut off by max_tokens, closed), the failed rate (counted as zero evidence) and
    the zero-evidence rate (failed, irrelevant or scored 0: the passage adds no claim)."""
    rows = []
    for report in sorted(reports, key=lambda r: (r["model"], r["dataset"], r["condition"])):
        passes = int(report["evaluator_passes"])
        status = report.get("status") or {}

        def share(count: float, base: int = passes) -> str:
            return pct(count / base) if base else "n/a"

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
    return pd.DataFrame(rows)


def display_policies(table: pd.DataFrame) -> pd.DataFrame:
    """Policy codes as printed (the registry's ``printed``): EVID_CB becomes "EVID+CB" in
    policy columns and headers."""
    printed = {name: p.printed for name, p in registry.policies().items() if p.printed}
    table = table.rename(columns=printed)
    for column in ("policy", "Policy"):
        if column in table.columns:
            table[column] = table[column].replace(printed)
    return table


def write_table(table: pd.DataFrame, stem: str | Path, caption: str) -> list[Path]:
    """CSV + Markdown + LaTeX of one table; returns the three paths. EVID_CB is printed
    as "EVID+CB". The table's note (``with_note``) follows the caption."""
    note = table.attrs.get("note")
    caption = f"{caption} {note}" if note else caption
    table = display_policies(table)
    stem = Path(stem)
    paths = [stem.with_suffix(".csv"), stem.with_suffix(".md"), stem.with_suffix(".tex")]
    with atomic_write(paths[0]) as handle:
        table.to_csv(handle, index=False)
    with atomic_write(paths[1]) as handle:
        body = table.to_markdown(index=False, disable_numparse=True) if len(table) else "(no rows)"
        handle.write(f"{caption}\n\n{body}\n")
    with atomic_write(paths[2]) as handle:
        handle.write(table.to_latex(index=False, caption=caption, escape=True))
    return paths


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


def _diag_lookup(diagnostics: pd.DataFrame) -> Callable[..., Any]:
    frame = diagnostics.fillna({"variant": "", "condition": "", "perturbation_type": ""})
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
        for r in frame.itertuples(index=False)
    }

    def get(model, dataset, section, metric, policy="CDD", variant="", condition="", kind=""):
        return index.get((model, dataset, section, policy, variant, condition, kind, metric))

    return get


def _diag_cells(diagnostics: pd.DataFrame) -> list[tuple[str, str]]:
    return sorted(map(tuple, diagnostics[["model", "dataset"]].drop_duplicates().to_numpy()))


def _conditions_of(frame: pd.DataFrame) -> list[str]:
    present = set(frame["condition"].dropna())
    return [c for c in (*SHOULD_ANSWER, *SHOULD_ABSTAIN) if c in present]


def table_cdd_results(metrics: pd.DataFrame, diagnostics: pd.DataFrame) -> pd.DataFrame:
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
    types = [
        t for t in CDD_TYPES if ((diagnostics.perturbation_type == t) & (diagnostics.n > 0)).any()
    ]
    rows = []
    for model, dataset in _cells(metrics):
        in_cell = set(metrics.policy[(metrics.model == model) & (metrics.dataset == dataset)])
        if not in_cell & set(CDD_POLICIES[1:]):
            continue  # CDD did not run on this dataset (cdd.datasets)
        for policy in (p for p in CDD_POLICIES if p in present and p in in_cell):
            row: dict[str, Any] = {"model": model, "dataset": dataset, "policy": policy}
            for condition in conditions:
                rate = get(model, dataset, policy, condition, "answer_rate")
                label = "HwSA" if condition in SHOULD_ABSTAIN else "Ans"
                row[f"{label}@{condition} [95% CI]"] = pct_ci(*_triple(rate))
            row["EM@Q100 [95% CI]"] = pct_ci(*_triple(get(model, dataset, policy, "Q100", "em")))
            at = (model, dataset, "perturbation_type", "accuracy", policy)
            for kind in (t for t in types if t not in CDD_OTHER_TYPES):
                row[f"Acc {kind}"] = pct(_value(diag(*at, kind=kind)))
            macro = diag(*at, kind="macro_adversarial")
            row["Acc adversarial macro [95% CI]"] = pct_ci(*_triple(macro))
            for kind in (t for t in types if t in CDD_OTHER_TYPES):  # beside the macro
                row[f"Acc {kind}"] = pct(_value(diag(*at, kind=kind)))
            rows.append(row)
    return pd.DataFrame(rows)


def table_cdd_sensitivity(diagnostics: pd.DataFrame) -> pd.DataFrame:
    """Causal sensitivity of CDD's trace per model x dataset, perturbation and condition
    (and all conditions pooled): clean and corrupted answer accuracy (the CDD paper's),
    the relative drop with its paired bootstrap CI, and the share of outcomes the
    perturbation changed."""
    diag = _diag_lookup(diagnostics)
    chosen = diagnostics[diagnostics.section == "sensitivity"]
    conditions = [*_conditions_of(chosen), "all"]
    rows = []
    for model, dataset in _diag_cells(chosen):
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
                        "Acc clean": pct_ci(
                            *_triple(diag(model, dataset, "sensitivity", "acc_clean", **at))
                        ),
                        "Acc corrupted": pct_ci(
                            *_triple(diag(model, dataset, "sensitivity", "acc_corrupted", **at))
                        ),
                        "Sensitivity [95% CI]": pct_ci(*_triple(value), signed=True),
                        "Changed": pct(
                            _value(diag(model, dataset, "sensitivity", "changed", **at))
                        ),
                        "note": value.reason if isinstance(value.reason, str) else "",
                    }
                )
    return pd.DataFrame(rows)


def table_cdd_ablation(diagnostics: pd.DataFrame) -> pd.DataFrame:
    """CDD per model x dataset x condition (and all pooled): full vs without premise
    isolation vs without the divergence check, with 95% CIs: the paper's answer accuracy
    ("Acc"), then GRAB-RAG's behaviour score ("Behaviour": an EM-correct answer at
    Q100/Q50, an abstention at Q0/QC/QX)."""
    diag = _diag_lookup(diagnostics)
    chosen = diagnostics[diagnostics.section == "ablation"]
    rows = []
    for model, dataset in _diag_cells(chosen):
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
                    row[f"{label} {CDD_VARIANTS[variant]}"] = pct_ci(*_triple(entry))
            rows.append(row)
    return pd.DataFrame(rows)


def table_cdd_source_control(diagnostics: pd.DataFrame) -> pd.DataFrame:
    """Which source CDD's answered rows follow, per model x dataset x condition (and all
    pooled): counts and shares of final answers equal to the contextual answer, the
    parametric answer, both (they agree) or neither."""
    diag = _diag_lookup(diagnostics)
    chosen = diagnostics[diagnostics.section == "source_control"]
    rows = []
    for model, dataset in _diag_cells(chosen):
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
                row[label] = f"{count}{share}"
            rows.append(row)
    return pd.DataFrame(rows)


# --- GRAB-RAG outputs beyond the metric table: Tables 4-5, the audit's quality, the
# --- confidence-cutoff sweep, the closed-book pass (Appendix F) and section 6's aggregates

QUALITY_ORDER = ("fluent", "borderline", "broken")


def table_ner_labels(backend: str) -> pd.DataFrame:
    """Table 4: the recogniser's labels and the internal entity types they map to (GLiNER's
    eight prompting labels in the paper; spaCy's OntoNotes labels in the embedded run)."""
    from .ner import GLINER_LABELS, SPACY_LABELS

    labels = GLINER_LABELS if backend == "gliner" else SPACY_LABELS
    return pd.DataFrame(
        [{"Backend": backend, "NER label": k, "Internal type": v} for k, v in labels.items()]
    )


def table_swap_examples(
    records: Mapping[str, Sequence[Mapping[str, Any]]],
    ratings: Mapping[str, Mapping[str, str]] | None = None,
    per_group: int = 2,
    width: int = 80,
) -> pd.DataFrame:
    """Table 5: QC swap examples from ``swaps.jsonl`` (dataset -> records), the first
    ``per_group`` accepted swaps (by question position) of each group: the audit's quality
    tiers (fluent, borderline, broken) for a dataset with a filled audit (``ratings``:
    dataset -> qid -> quality), else the swap tiers (1, 1b, 2, 3, 4). The excerpts show
    ``width`` characters around the span in the original and the QC passage."""
    from .swap_audit import excerpt
    from .swaps import TIERS

    rows = []
    for dataset in sorted(records):
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
    return pd.DataFrame(rows, columns=columns)


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
    audits: Mapping[str, pd.DataFrame],
    n_resamples: int = 10_000,
    level: float = 0.95,
    seed: int = 42,
) -> pd.DataFrame:
    """Appendix C's audit: the quality-tier distribution per dataset and in total, and the
    broken rate by entity type, each with a percentile bootstrap CI over the rated swaps
    (``audits``: dataset -> the filled audit CSV with ``entity_type`` and ``quality``)."""
    rng = np.random.default_rng(seed)
    frames = []
    for dataset, frame in sorted(audits.items()):
        frame = frame.copy()
        frame["dataset"] = dataset
        frame["quality"] = frame["quality"].astype(str).str.strip().str.lower()
        frames.append(frame)
    pooled = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    scopes = [(d, f) for d, f in zip(sorted(audits), frames, strict=True)]
    if len(frames) > 1:
        scopes.append(("Total", pooled))
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
                "95% CI": pct_ci(share, low, high).split(" ", 1)[-1],
            }
        )

    for dataset, frame in scopes:
        for quality in QUALITY_ORDER:
            flags = (frame["quality"] == quality).to_numpy(dtype=float)
            share_row("quality tier", dataset, quality, flags)
    for dataset, frame in scopes:
        for kind in sorted(set(frame["entity_type"].astype(str))):
            part = frame[frame["entity_type"].astype(str) == kind]
            flags = (part["quality"] == "broken").to_numpy(dtype=float)
            share_row("broken rate by type", dataset, kind, flags)
    columns = ["Section", "Dataset", "Category", "n", "of", "%", "95% CI"]
    return pd.DataFrame(rows, columns=columns)


def table_cutoff_sweep(
    sweep: pd.DataFrame, threshold: float = 0.8, reference: float = 50
) -> pd.DataFrame:
    """Appendix F: P3 across the closed-book confidence cutoffs at the F1 threshold,
    macro-averaged over model x dataset cells, with each metric's difference from the
    ``reference`` cutoff (pp)."""
    chosen = sweep[(sweep.threshold.astype(float) - threshold).abs() < 1e-9].copy()
    for column in ("hwsa_qc", "fac_q100", "ans_q100"):
        if column not in chosen.columns:  # a cell without that condition
            chosen[column] = float("nan")
    grouped = chosen.groupby("cutoff")[["hwsa_qc", "fac_q100", "ans_q100"]].mean()
    base = grouped.loc[reference] if reference in grouped.index else None
    rows = []
    for cutoff, values in grouped.iterrows():
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
    return pd.DataFrame(rows)


def table_closed_book(
    cells: Mapping[tuple[str, str], Sequence[Mapping[str, Any]]], cutoff: float = 50
) -> pd.DataFrame:
    """Appendix F: the closed-book (CB) pass per model x dataset: how often it abstains,
    its mean confidence when it answers, and how many answers fall below the P3/P4
    confidence cutoff; then the mean over cells. ``cells``: (model, dataset) -> CB rows."""
    rows = []
    for (model, dataset), cb in sorted(cells.items()):
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
                "CB abstain %": pct(abstained / n) if n else "n/a",
                "CB answered": len(answers),
                "mean confidence (answered)": f"{np.mean(confidences):.1f}"
                if confidences
                else "n/a",
                f"answered below cutoff {cutoff:g} %": pct(below / len(answers))
                if answers
                else "n/a",
                "parse failed %": pct((n - abstained - len(answers)) / n) if n else "n/a",
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
                    f"{np.nanmean([r['_confidence'] for r in rows]):.1f}"
                    if any(not math.isnan(r["_confidence"]) for r in rows)
                    else "n/a"
                ),
                f"answered below cutoff {cutoff:g} %": "",
                "parse failed %": "",
                "_abstain": float("nan"),
                "_confidence": float("nan"),
            }
        )
    return pd.DataFrame(rows).drop(columns=["_abstain", "_confidence"], errors="ignore")


def table_section6(metrics: pd.DataFrame) -> pd.DataFrame:
    """Section 6's aggregates over the paper's policies P0-P4, as (quantity, model,
    dataset, value) rows: the mean QC abstention rate per dataset and per model x dataset
    (with each dataset's difference from the first), the echo share of answered QC rows
    per model x dataset, the Q100 answer rate per model (macro over policies and
    datasets), the normalised HwSA@QC per model (mean over datasets), the Q100 EM gap of
    QC-eligible vs excluded questions per dataset (mean over models, P0: the
    no-abstention baseline) and the mean Q0 -> QC HwSA delta under P1 and P2."""
    paper = metrics[metrics.policy.isin(PAPER_POLICIES)]

    def mean(frame: pd.DataFrame, condition: str, metric: str) -> float:
        values = frame[(frame.condition == condition) & (frame.metric == metric)]["value"]
        values = values.astype(float)
        values = values[~values.isna()]
        return float(values.mean()) if len(values) else float("nan")

    rows: list[dict[str, Any]] = []

    def add(quantity: str, model: str, dataset: str, value: float, signed: bool = False) -> None:
        shown = _pp(value) if signed else pct(value)
        rows.append({"Quantity": quantity, "Model": model, "Dataset": dataset, "Value": shown})

    datasets = sorted(set(paper.dataset))
    models = sorted(set(paper.model))
    quantity = "QC abstention rate (%), mean over models and P0-P4"
    for dataset in datasets:
        add(quantity, "all", dataset, mean(paper[paper.dataset == dataset], "QC", "abstain_rate"))
    quantity = "QC abstention rate (%), mean over P0-P4"
    for model in models:
        per = {
            d: mean(paper[(paper.model == model) & (paper.dataset == d)], "QC", "abstain_rate")
            for d in datasets
        }
        for dataset in datasets:
            add(quantity, model, dataset, per[dataset])
        for dataset in datasets[1:]:
            diff = per[dataset] - per[datasets[0]]
            add(f"QC abstention difference (pp), {dataset} - {datasets[0]}", model, "", diff, True)
    qc = paper[paper.condition == "QC"]
    for model in models:
        for dataset in datasets:
            cell = qc[(qc.model == model) & (qc.dataset == dataset)]
            echo = cell[cell.metric == "qc_echo"]["value"].astype(float).sum()
            answered = cell[cell.metric == "qc_answered"]["value"].astype(float).sum()
            share = echo / answered if answered else float("nan")
            add("echo share of answered QC rows (%), P0-P4 pooled", model, dataset, share)
    for model in models:
        add(
            "Q100 answer rate (%), macro over P0-P4 and datasets",
            model,
            "",
            mean(paper[paper.model == model], "Q100", "answer_rate"),
        )
    normalised = metrics[(metrics.policy == "mean") & (metrics.metric == "normalised_hwsa")]
    for model in models:
        values = normalised[normalised.model == model]["value"].astype(float).dropna()
        add(
            "normalised HwSA@QC (%), mean over datasets",
            model,
            "",
            float(values.mean()) if len(values) else float("nan"),
        )
    p0 = paper[paper.policy == "P0"]
    for dataset in datasets:
        add(
            "Q100 EM gap, QC-eligible - excluded (pp), P0, mean over models",
            "all",
            dataset,
            mean(p0[p0.dataset == dataset], "Q100", "em_gap"),
            True,
        )
    both = paper[paper.policy.isin(["P1", "P2"])]
    add(
        "QC - Q0 HwSA delta (pp), mean over P1 and P2",
        "all",
        "all",
        mean(both, "QC-Q0", "hwsa_diff"),
        True,
    )
    return pd.DataFrame(rows, columns=["Quantity", "Model", "Dataset", "Value"])
