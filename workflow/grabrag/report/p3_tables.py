"""The tables of P3's closed-book gate: Table 12 (the F1-threshold sweep at the confidence
cutoff), Appendix F's confidence-cutoff sweep and the closed-book pass itself.

They read the P3 sweep CSVs (:mod:`grabrag.evaluation.p3_sweep` computes them) and the
stored closed-book generations, apart from the metric table the other GRAB-RAG tables read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from grabrag.core.outputs import CLOSED_BOOK_ROWS, P3_SWEEPS
from grabrag.report.specs import TableSpec
from grabrag.report.table_cells import NOT_AVAILABLE, _decimals, _pp, pct
from grabrag.report.tabular import Table, cell_order, group_means, same_float


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


# --- the tables this module declares (grabrag.report.specs) ---------------------------------

TABLES = (
    TableSpec(
        "table12_p3_sweep",
        lambda s: table_p3_sweep(s.read(P3_SWEEPS), s.setting("p3")["cutoff"]),
        (P3_SWEEPS,),
        ("p3",),
    ),
    # Appendix F: the confidence-cutoff sweep and the closed-book pass.
    TableSpec(
        "table12b_cutoff_sweep",
        lambda s: table_cutoff_sweep(
            s.read(P3_SWEEPS), s.setting("p3")["threshold"], s.setting("p3")["cutoff"]
        ),
        (P3_SWEEPS,),
        ("p3",),
    ),
    TableSpec(
        "closed_book",
        lambda s: table_closed_book(
            {(c["model"], c["dataset"]): rows for c, rows in s.read(CLOSED_BOOK_ROWS)},
            s.setting("p3")["cutoff"],
        ),
        (CLOSED_BOOK_ROWS,),
        ("p3",),
    ),
)
