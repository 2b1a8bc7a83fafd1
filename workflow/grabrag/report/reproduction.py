"""Did this run reproduce the papers? The papers' published numbers, held against this run's
tables, one row per published number, and the papers' headline findings as checkable
claims.

The published numbers are data (``published/<paper>.csv``: the table, the cell, the
quantity as our tidy table names it, the number, its CI where the paper prints one, its
standard deviation over seeds where the paper prints mean +/- sd, and where it stands in
the paper). A number's counterpart is the same quantity of the same cell (model, dataset,
policy, condition and the row's other labels) in this run's tidy table
(``results/tables/<table>.tidy.csv``). A number about one model x dataset needs that model
and dataset in the run (the models by their names in ``config/paper.yaml``); a macro or
pooled number (no model named, or "All", "all", "Mean") needs every model and dataset the
paper averages over. A table whose rows do not name their cell (Table 13 names it in its
note) gets the cell from the run (:attr:`RunScope.cells_in_note`). The verdicts:

- ``within published CI``: our estimate lies in the paper's CI;
- ``within ours``: the published number lies in our CI (the paper gives none, or ours is
  wider);
- ``outside``: neither;
- ``no estimate``: the run has the cell but no number for it (an empty base);
- ``not run``: the run has no counterpart (another model or dataset, a table it did not
  make);
- ``not comparable``: a macro or pooled number over models or datasets the run does not
  all have.

A number is compared as printed: ours rounded to the published number's decimals (26.7,
82.67, 0.451), so a published number is matched by any estimate that rounds to it too. A
published sd is shown beside the number but is no interval: a mean +/- sd over three
seeds says how the paper's runs spread, not where its estimate lies.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from grabrag.report.tabular import Table

PUBLISHED_DIR = Path(__file__).resolve().parent / "published"
KEY = ("table", "model", "dataset", "policy", "condition", "row", "quantity")
MACRO = ("", "All", "all", "Mean")  # a model or dataset axis averaged over, not named
SEED_SENSITIVITY_TABLE = "table13_seed_sensitivity"
_NOTE_TABLES = (SEED_SENSITIVITY_TABLE,)  # tables whose rows do not name their cell
WITHIN_PUBLISHED, WITHIN_OURS, OUTSIDE = "within published CI", "within ours", "outside"
NO_ESTIMATE, NOT_RUN, NOT_COMPARABLE = "no estimate", "not run", "not comparable"
REPRODUCED, NOT_REPRODUCED = "reproduced", "not reproduced"


def published_numbers(directory: Path = PUBLISHED_DIR) -> list[dict[str, str]]:
    """Every published number of every paper's file, in file order."""
    rows = []
    for path in sorted(directory.glob("*.csv")):
        with path.open(encoding="utf-8", newline="") as handle:
            rows += list(csv.DictReader(handle))
    return rows


def _float(text: str) -> float:
    return float(text) if text not in ("", None) else math.nan


def _scale(row: Mapping[str, str]) -> float:
    """Published numbers are percents (shares in our tidy tables) or counts."""
    return 100.0 if row["unit"] == "percent" else 1.0


def _decimals(text: str) -> int:
    """How many decimals a number is printed with ("26.7": 1, "0.451": 3, "202": 0)."""
    return len(text.partition(".")[2])


def our_numbers(
    tidy: pl.DataFrame, cells_in_note: Mapping[str, tuple[str, str]] | None = None
) -> dict[tuple[str, ...], dict[str, Any]]:
    """Our tidy tables' numbers by :data:`KEY` (empty strings for axes a row lacks; the
    model and dataset of a table in ``cells_in_note`` from there)."""
    cells_in_note = cells_in_note or {}
    out = {}
    for row in tidy.iter_rows(named=True):
        values = {k: "" if row.get(k) is None else str(row[k]) for k in KEY}
        if values["table"] in cells_in_note and not values["model"]:
            values["model"], values["dataset"] = cells_in_note[values["table"]]
        out[tuple(values[k] for k in KEY)] = row
    return out


def verdict(
    published: float,
    low: float,
    high: float,
    ours: Mapping[str, Any] | None,
    decimals: int = 1,
) -> str:
    """The verdict on one published number against our counterpart (in one scale), ours
    rounded to the ``decimals`` the published number is printed with."""
    if ours is None:
        return NOT_RUN
    estimate = ours.get("estimate")
    if estimate is None or not math.isfinite(estimate):
        return NO_ESTIMATE
    shown = round(estimate, decimals)
    if math.isfinite(low) and math.isfinite(high) and low <= shown <= high:
        return WITHIN_PUBLISHED
    our_low, our_high = ours.get("ci_low"), ours.get("ci_high")
    if our_low is not None and our_high is not None and math.isfinite(our_low):
        if round(our_low, decimals) <= published <= round(our_high, decimals):
            return WITHIN_OURS
    if shown == published:
        return WITHIN_OURS
    return OUTSIDE


@dataclass(frozen=True)
class RunScope:
    """What the run ran: its models and datasets (by their config names), and the cell of
    each table whose rows do not name it (Table 13: the seed-sensitivity model x dataset)."""

    models: frozenset[str]
    datasets: frozenset[str]
    cells_in_note: Mapping[str, tuple[str, str]] = field(default_factory=dict)


def cells_in_note(seed_sensitivity: Mapping[str, Any] | None) -> dict[str, tuple[str, str]]:
    """The cell of each table whose rows do not name it, from the run's config: Table 13
    is about the seed-sensitivity model x dataset (none when the run has no Table 13)."""
    if not seed_sensitivity:
        return {}
    return {SEED_SENSITIVITY_TABLE: (seed_sensitivity["model"], seed_sensitivity["dataset"])}


def _scope_verdict(row: Mapping[str, str], scope: RunScope, paper_cells: RunScope) -> str:
    """``not run`` for a number of a model or dataset the run lacks, ``not comparable`` for
    a macro or pooled number over models or datasets the run does not all have, else ""."""
    named_model, named_dataset = row["model"] not in MACRO, row["dataset"] not in MACRO
    if (named_model and row["model"] not in scope.models) or (
        named_dataset and row["dataset"] not in scope.datasets
    ):
        return NOT_RUN
    cell = scope.cells_in_note.get(row["table"])
    if row["table"] in _NOTE_TABLES and cell != (row["model"], row["dataset"]):
        return NOT_RUN  # the run's table is about another cell, or the run has none
    models = {row["model"]} if named_model else paper_cells.models
    datasets = {row["dataset"]} if named_dataset else paper_cells.datasets
    if not (models <= scope.models and datasets <= scope.datasets):
        return NOT_COMPARABLE
    return ""


def _cells_of(rows: Sequence[Mapping[str, str]], paper: str) -> RunScope:
    """The models and datasets a paper's per-cell numbers name (what its macros average)."""
    mine = [r for r in rows if r["paper"] == paper]
    return RunScope(
        frozenset(r["model"] for r in mine if r["model"] not in MACRO),
        frozenset(r["dataset"] for r in mine if r["dataset"] not in MACRO),
    )


def _shown(value: float, low: float, high: float, scale: float, decimals: int) -> str:
    if not math.isfinite(value):
        return "n/a"
    text = f"{value * scale:.{decimals}f}"
    if math.isfinite(low) and math.isfinite(high):
        text += f" [{low * scale:.{decimals}f}, {high * scale:.{decimals}f}]"
    return text


def _published_shown(row: Mapping[str, str]) -> str:
    text = row["published"]
    if row["ci_low"]:
        text += f" [{row['ci_low']}, {row['ci_high']}]"
    if row.get("sd"):
        text += f" ± {row['sd']} (sd)"
    return text


def reproduction_rows(
    published: Sequence[Mapping[str, str]], tidy: pl.DataFrame, scope: RunScope
) -> list[dict[str, Any]]:
    """One row per published number: where it stands, the paper's number, ours and the
    verdict."""
    ours = our_numbers(tidy, scope.cells_in_note)
    paper_cells = {paper: _cells_of(published, paper) for paper in {r["paper"] for r in published}}
    out = []
    for row in published:
        scale = _scale(row)
        value = _float(row["published"])
        low, high = _float(row["ci_low"]), _float(row["ci_high"])
        decimals = _decimals(row["published"])
        key = tuple(row.get(k, "") for k in KEY)
        out_of_scope = _scope_verdict(row, scope, paper_cells[row["paper"]])
        found = None if out_of_scope else ours.get(key)
        # our estimate and CI as numbers (NaN where missing), in the published scale
        mine = {
            name: math.nan if found is None or found.get(name) is None else found[name]
            for name in ("estimate", "ci_low", "ci_high")
        }
        if out_of_scope:
            result = out_of_scope
        else:
            scaled = None if found is None else {**found, **{k: v * scale for k, v in mine.items()}}
            result = verdict(value, low, high, scaled, decimals)
        out.append(
            {
                "Paper": row["paper"],
                "Source": row["source"],
                "Quantity": row["quantity"],
                "Published": _published_shown(row),
                "Ours": "" if found is None else _shown(*mine.values(), scale, decimals),
                "n": "" if found is None or found.get("n") is None else found["n"],
                "Verdict": result,
            }
        )
    return out


# --- the papers' headline findings, as claims --------------------------------------------

Claim = tuple[str, str, Callable[[pl.DataFrame], tuple[str, str]]]


def _table(tidy: pl.DataFrame, name: str) -> pl.DataFrame:
    return tidy.filter(pl.col("table") == name)


def _value(frame: pl.DataFrame, policy: str, quantity: str) -> float:
    found = frame.filter((pl.col("policy") == policy) & (pl.col("quantity") == quantity))
    if found.is_empty() or found["estimate"][0] is None:
        return math.nan
    return float(found["estimate"][0])


def _every_delta_excludes_zero(tidy: pl.DataFrame) -> tuple[str, str]:
    deltas = _table(tidy, "table1_hwsa").filter(
        (pl.col("quantity") == "Delta [95% CI]") & pl.col("estimate").is_not_null()
    )
    if deltas.is_empty():
        return NOT_RUN, "no Q0 -> QC delta has an estimate"
    positive = int((deltas["estimate"] > 0).sum())
    excluded = int((deltas["ci_low"].fill_null(-1.0) > 0).sum())
    n = deltas.height
    holds = positive == n and excluded == n
    return (
        REPRODUCED if holds else NOT_REPRODUCED,
        f"{positive} of {n} deltas positive, {excluded} of {n} CIs above zero",
    )


def _macro_below(policies: Sequence[str], reference: str, quantity: str) -> Callable:
    def check(tidy: pl.DataFrame) -> tuple[str, str]:
        frame = _table(tidy, "table2_policies")
        base = _value(frame, reference, quantity)
        values = {p: _value(frame, p, quantity) for p in policies}
        if not math.isfinite(base) or not all(map(math.isfinite, values.values())):
            return NOT_RUN, f"{quantity} of {reference} or {', '.join(policies)} not estimated"
        shown = ", ".join(f"{p} {100 * v:.1f}" for p, v in values.items())
        holds = all(v < base for v in values.values())
        return (
            REPRODUCED if holds else NOT_REPRODUCED,
            f"{shown} against {reference} {100 * base:.1f}",
        )

    return check


def _p3_costs_utility(tidy: pl.DataFrame) -> tuple[str, str]:
    frame = _table(tidy, "table2_policies")
    p3, p1 = (_value(frame, p, "FAC_Q100 (lower better)") for p in ("P3", "P1"))
    if not (math.isfinite(p3) and math.isfinite(p1)):
        return NOT_RUN, "FAC_Q100 of P3 or P1 not estimated"
    holds = p3 > p1
    return REPRODUCED if holds else NOT_REPRODUCED, f"P3 {100 * p3:.1f} against P1 {100 * p1:.1f}"


def _echo_dominates(tidy: pl.DataFrame) -> tuple[str, str]:
    frame = _table(tidy, "table3_qc_sources").filter(pl.col("model") == "All")
    shares = {
        q: _value(frame.with_columns(pl.lit("").alias("policy")), "", q)
        for q in ("Echo", "Halluc.", "Correct")
    }
    if not all(map(math.isfinite, shares.values())):
        return NOT_RUN, "no answered QC row"
    holds = shares["Echo"] > max(shares["Halluc."], shares["Correct"])
    shown = ", ".join(f"{q} {100 * v:.1f}" for q, v in shares.items())
    return REPRODUCED if holds else NOT_REPRODUCED, shown


def _pairs_in_cells(
    table: str,
    quantity: str,
    first: str,
    second: str,
    higher: bool,
    condition: str | None = None,
    row: str | None = None,
    scale: float = 100.0,
) -> Callable:
    """A claim that policy ``first`` scores above (``higher``) or below policy ``second``
    on ``quantity`` in every model x dataset cell of ``table`` where both are estimated
    over the same number of rows (a method run on a dataset's first questions only is not
    compared with a policy over all of them)."""

    def check(tidy: pl.DataFrame) -> tuple[str, str]:
        rows_of_table = _table(tidy, table)
        frame = rows_of_table.filter(pl.col("quantity") == quantity)
        if condition is not None:
            frame = frame.filter(pl.col("condition") == condition)
        if row is not None:
            frame = frame.filter(pl.col("row") == row)
        values: dict[tuple[str, str], dict[str, float]] = {}
        sizes: dict[tuple[str, str], dict[str, int | None]] = {}
        for r in frame.filter(pl.col("estimate").is_not_null()).iter_rows(named=True):
            cell = (r["model"] or "", r["dataset"] or "")
            values.setdefault(cell, {})[r["policy"]] = float(r["estimate"])
            size = r["n"] if r["n"] is not None else _largest_n(rows_of_table, r)
            sizes.setdefault(cell, {})[r["policy"]] = size
        both = {c: v for c, v in values.items() if first in v and second in v}
        compared = {c: v for c, v in both.items() if sizes[c][first] == sizes[c][second]}
        apart = "; ".join(
            f"{'/'.join(x for x in cell if x) or 'all'}: {first} over n={sizes[cell][first]},"
            f" {second} over n={sizes[cell][second]}"
            for cell in both
            if cell not in compared
        )
        if both and not compared:
            return NOT_COMPARABLE, f"{quantity} over different questions ({apart})"
        if not compared:
            return NOT_RUN, f"no cell estimates {quantity} for both {first} and {second}"
        holds = all(
            (v[first] > v[second]) if higher else (v[first] < v[second]) for v in compared.values()
        )
        shown = "; ".join(
            f"{'/'.join(x for x in cell if x) or 'all'}: {first} {scale * v[first]:.{_d(scale)}f}"
            f" vs {second} {scale * v[second]:.{_d(scale)}f}"
            for cell, v in compared.items()
        )
        if apart:  # cells set aside are named, never dropped silently
            shown += f"; not compared, over different questions: {apart}"
        return REPRODUCED if holds else NOT_REPRODUCED, shown

    return check


def _largest_n(rows_of_table: pl.DataFrame, row: Mapping[str, Any]) -> int | None:
    """A row without its own n: the largest n among its policy's rows of the same cell
    (how many rows the policy's numbers there are over)."""
    sized = rows_of_table.filter(
        (pl.col("policy") == row["policy"])
        & pl.col("model").eq_missing(row["model"])
        & pl.col("dataset").eq_missing(row["dataset"])
        & pl.col("n").is_not_null()
    )
    return None if sized.is_empty() else int(sized["n"].max())


def _d(scale: float) -> int:
    """Decimals a claim shows: one for percents, three for fractions (ECE)."""
    return 1 if scale != 1 else 3


def _hotpotqa_abstains_more(tidy: pl.DataFrame) -> tuple[str, str]:
    frame = _table(tidy, "section6_aggregates").filter(
        (pl.col("row") == "Quantity=QC abstention difference (pp), hotpotqa - nq")
        & pl.col("estimate").is_not_null()
    )
    if frame.is_empty():
        return NOT_RUN, "the run has no NQ and HotpotQA pair of QC abstention rates"
    diffs = dict(zip(frame["model"], frame["estimate"], strict=True))
    holds = all(v > 0 for v in diffs.values())
    shown = ", ".join(f"{m} {100 * v:+.1f} pp" for m, v in diffs.items())
    return REPRODUCED if holds else NOT_REPRODUCED, shown


_SWEEP_METRICS = ("HwSA_QC (lower safer)", "FAC_Q100 (lower better)", "Q100 Ans (higher better)")


def _threshold_step_dominates(tidy: pl.DataFrame) -> tuple[str, str]:
    frame = _table(tidy, "table12_p3_sweep")
    at = {
        (r["row"], r["quantity"]): float(r["estimate"])
        for r in frame.filter(pl.col("estimate").is_not_null()).iter_rows(named=True)
    }
    steps = {}
    for metric in _SWEEP_METRICS:
        points = [at.get((f"F1={t}", metric)) for t in ("0.0", "0.2", "1.0")]
        if None in points:
            return NOT_RUN, f"{metric} is not estimated at F1 0.0, 0.2 and 1.0"
        steps[metric] = (abs(points[1] - points[0]), abs(points[2] - points[1]))
    holds = all(first > rest for first, rest in steps.values())
    shown = "; ".join(
        f"{m.split(' (')[0]}: {100 * a:.1f} pp from 0.0 to 0.2, {100 * b:.1f} from 0.2 to 1.0"
        for m, (a, b) in steps.items()
    )
    return REPRODUCED if holds else NOT_REPRODUCED, shown


def _seed_deltas_small(tidy: pl.DataFrame) -> tuple[str, str]:
    deltas = _table(tidy, SEED_SENSITIVITY_TABLE).filter(
        (pl.col("quantity") == "|delta| (pp)") & pl.col("estimate").is_not_null()
    )
    if deltas.is_empty():
        return NOT_RUN, "the run has no seed-sensitivity table"
    largest = float(deltas["estimate"].max())  # type: ignore[arg-type]
    holds = largest <= 0.023
    return (
        REPRODUCED if holds else NOT_REPRODUCED,
        f"largest |delta| {100 * largest:.2f} pp over {deltas.height} policy x condition cells",
    )


CLAIMS: tuple[Claim, ...] = (
    (
        "GRAB-RAG §5.1, Table 1",
        "Misleading context breaks abstention: every Q0 -> QC HwSA delta is positive and "
        "its 95% CI excludes zero",
        _every_delta_excludes_zero,
    ),
    (
        "GRAB-RAG §5.2, Table 2",
        "P1 lowers the macro QC answer rate against P0",
        _macro_below(["P1"], "P0", "HwSA_QC (lower safer)"),
    ),
    (
        "GRAB-RAG §5.2, Table 2",
        "The verifiers P3 and P4 answer QC far less than P0",
        _macro_below(["P3", "P4"], "P0", "HwSA_QC (lower safer)"),
    ),
    (
        "GRAB-RAG §5.2, Table 2",
        "P3's safety costs utility: its FAC@Q100 is above P1's",
        _p3_costs_utility,
    ),
    (
        "GRAB-RAG §5.3, Table 3",
        "Most answered QC rows echo the planted entity (echo above hallucination and "
        "correct override, all models pooled)",
        _echo_dominates,
    ),
    (
        "GRAB-RAG §6",
        "Every model abstains more at QC on HotpotQA than on NQ (mean over P0-P4)",
        _hotpotqa_abstains_more,
    ),
    (
        "GRAB-RAG App. F, Table 12",
        "P3's F1 threshold acts in one step: moving it from 0.0 to 0.2 changes each metric "
        "more than moving it on from 0.2 to 1.0",
        _threshold_step_dominates,
    ),
    (
        "GRAB-RAG App. G, Table 13",
        "A second construction seed moves no HwSA cell by more than 2.3 pp",
        _seed_deltas_small,
    ),
    (
        "EvidentialRAG §5.3, Table 5",
        "EvidentialRAG's refusal F1 is above naive RAG's (P0), in every cell",
        _pairs_in_cells(
            "evid_results", "Refusal F1", "EVID", "P0", higher=True, condition="pooled"
        ),
    ),
    (
        "EvidentialRAG §5.3, Table 5",
        "EvidentialRAG's ECE (Eqs. 26-27, 15 bins) is below naive RAG's (P0), in every cell",
        _pairs_in_cells(
            "evid_results",
            "ECE Eq. 26-27 (15 bins)",
            "EVID",
            "P0",
            higher=False,
            condition="pooled",
            scale=1.0,
        ),
    ),
    (
        "CDD §5, adversarial accuracy",
        "CDD's adversarial macro accuracy is above Standard RAG's (P1), in every cell",
        _pairs_in_cells("cdd_results", "Acc adversarial macro [95% CI]", "CDD", "P1", True),
    ),
    (
        "CDD §5, adversarial accuracy",
        "CDD pays in clean accuracy: below Standard RAG's (P1), in every cell",
        _pairs_in_cells("cdd_results", "Acc clean", "CDD", "P1", higher=False),
    ),
    (
        "CDD §5, TruthfulQA misconception injection",
        "Under an injected misconception CDD answers correctly more often than Standard RAG "
        "(P1), for every model (by the probe's scorer: see the probe's table)",
        _pairs_in_cells(
            "truthfulqa_probe", "accuracy injected", "CDD", "P1", True, row="category=all"
        ),
    ),
)


def claim_rows(tidy: pl.DataFrame) -> list[dict[str, str]]:
    """Each claim on this run: reproduced, not reproduced or not run, with its numbers."""
    out = []
    for source, claim, check in CLAIMS:
        result, numbers = check(tidy)
        out.append({"Source": source, "Claim": claim, "Verdict": result, "Numbers": numbers})
    return out


def reproduction_tables(
    published: Sequence[Mapping[str, str]], tidy: pl.DataFrame, scope: RunScope
) -> tuple[Table, Table]:
    """The numbers table and the claims table, each with its note."""
    numbers = reproduction_rows(published, tidy, scope)
    counts: dict[str, int] = {}
    for row in numbers:
        counts[row["Verdict"]] = counts.get(row["Verdict"], 0) + 1
    paper_models = set().union(
        *(_cells_of(published, p).models for p in {r["paper"] for r in published})
    )
    compared = sum(n for v, n in counts.items() if v not in (NOT_RUN, NOT_COMPARABLE))
    if not paper_models & scope.models:
        note = (
            "None of the papers' models ran here (this run's: "
            f"{', '.join(sorted(scope.models))}; the papers': {', '.join(sorted(paper_models))}), "
            "so no published number is comparable; the claims below are checked on this "
            "run's own models."
        )
    else:
        shown = "; ".join(f"{v}: {n}" for v, n in sorted(counts.items()))
        note = f"{len(numbers)} published numbers, {compared} with a counterpart here ({shown})."
    return Table(numbers, note=note), Table(claim_rows(tidy), note=_claims_note())


def _claims_note() -> str:
    return (
        "Each headline finding checked on this run's tables, whatever its models: "
        "reproduced, not reproduced, not run (the table or its numbers are missing), or "
        "not comparable (the two policies' numbers are over different questions: a method "
        "run on each dataset's first questions only)."
    )
