"""The reproduction report: each published number against this run's, verdicts recomputed
by hand, the claims on planted tables, and the tiny run's report saying that nothing is
comparable."""

from __future__ import annotations

import csv
from pathlib import Path

import polars as pl

from grabrag.report.reproduction import (
    NO_ESTIMATE,
    NOT_COMPARABLE,
    NOT_REPRODUCED,
    NOT_RUN,
    OUTSIDE,
    REPRODUCED,
    WITHIN_OURS,
    WITHIN_PUBLISHED,
    RunScope,
    claim_rows,
    published_numbers,
    reproduction_rows,
)
from grabrag.report.tabular import TIDY_SCHEMA

PAPER_MODELS = frozenset({"phi-4-mini", "llama-3.1-8b", "qwen2.5-7b"})
PAPER_DATASETS = frozenset({"nq", "hotpotqa"})


def tidy(rows: list[dict]) -> pl.DataFrame:
    full = [
        {
            "table": r["table"],
            "model": r.get("model"),
            "dataset": r.get("dataset"),
            "policy": r.get("policy"),
            "condition": None,
            "row": None,
            "quantity": r["quantity"],
            "estimate": r.get("estimate"),
            "ci_low": r.get("ci_low"),
            "ci_high": r.get("ci_high"),
            "n": r.get("n", 202),
        }
        for r in rows
    ]
    return pl.DataFrame(full, schema=TIDY_SCHEMA)


def phi_nq(policy: str, quantity: str, estimate: float | None, low=None, high=None) -> dict:
    return {
        "table": "table1_hwsa",
        "model": "phi-4-mini",
        "dataset": "nq",
        "policy": policy,
        "quantity": quantity,
        "estimate": estimate,
        "ci_low": low,
        "ci_high": high,
    }


def verdicts(frame: pl.DataFrame, scope: RunScope) -> dict[str, str]:
    rows = reproduction_rows(published_numbers(), frame, scope)
    return {row["Source"]: row["Verdict"] for row in rows}


def test_three_verdicts_recomputed_by_hand() -> None:
    frame = tidy(
        [
            # published +55.0 [48, 62]: ours 50.0 lies in the paper's CI
            phi_nq("P0", "Delta [95% CI]", 0.50, 0.44, 0.56),
            # published 81.7, no CI: it lies in ours [60.0, 85.0]
            phi_nq("P0", "HwSA_QC", 0.70, 0.60, 0.85),
            # published 1.0: ours 20.0 [15.0, 25.0] holds neither
            phi_nq("P1", "HwSA_Q0", 0.20, 0.15, 0.25),
            # an empty base: no estimate
            phi_nq("P2", "HwSA_Q0", None),
        ]
    )
    found = verdicts(frame, RunScope(PAPER_MODELS, PAPER_DATASETS))
    source = "GRAB-RAG Table 1, row Phi / NQ / {}, column {}"
    assert found[source.format("P0", "Δ [95% CI]")] == WITHIN_PUBLISHED
    assert found[source.format("P0", "HwSA_QC")] == WITHIN_OURS
    assert found[source.format("P1", "HwSA_Q0")] == OUTSIDE
    assert found[source.format("P2", "HwSA_Q0")] == NO_ESTIMATE
    # a cell the run has the model for but no row: not run, never a blank
    assert found[source.format("P3", "HwSA_Q0")] == NOT_RUN


def test_numbers_of_models_not_run_and_macros_over_them() -> None:
    found = verdicts(
        tidy([phi_nq("P0", "HwSA_Q0", 0.267)]), RunScope(frozenset({"phi-4-mini"}), PAPER_DATASETS)
    )
    assert found["GRAB-RAG Table 1, row Phi / NQ / P0, column HwSA_Q0"] == WITHIN_OURS
    assert found["GRAB-RAG Table 1, row Llama / NQ / P0, column HwSA_Q0"] == NOT_RUN
    # Table 2 averages all six cells: with one model it is not comparable
    macro = "GRAB-RAG Table 2, row P0, column HwSA_QC (macro over the six model x dataset cells)"
    assert found[macro] == NOT_COMPARABLE
    every = {row["table"] for row in published_numbers()}
    assert every == {"table1_hwsa", "table2_policies", "table3_qc_sources"}


def test_the_claims_on_planted_tables() -> None:
    deltas = [
        {**phi_nq(p, "Delta [95% CI]", 0.3, 0.1, 0.5)} for p in ("P0", "P1", "P2", "P3", "P4")
    ]
    macro = [
        {
            "table": "table2_policies",
            "policy": p,
            "quantity": "HwSA_QC (lower safer)",
            "estimate": v,
        }
        for p, v in (("P0", 0.58), ("P1", 0.42), ("P2", 0.38), ("P3", 0.13), ("P4", 0.14))
    ]
    sources = [
        {"table": "table3_qc_sources", "model": "All", "quantity": q, "estimate": v}
        for q, v in (("Echo", 0.3), ("Halluc.", 0.6), ("Correct", 0.1))
    ]
    claims = {row["Claim"]: row for row in claim_rows(tidy(deltas + macro + sources))}
    verdict = {claim[:30]: row["Verdict"] for claim, row in claims.items()}
    assert verdict["Misleading context breaks abst"] == REPRODUCED
    assert verdict["P1 lowers the macro QC answer "] == REPRODUCED
    assert verdict["The verifiers P3 and P4 answer"] == REPRODUCED
    assert verdict["P3's safety costs utility: its"] == NOT_RUN  # no FAC in the planted table
    assert verdict["Most answered QC rows echo the"] == NOT_REPRODUCED
    echo = next(row for claim, row in claims.items() if claim.startswith("Most answered"))
    assert echo["Numbers"] == "Echo 30.0, Halluc. 60.0, Correct 10.0"


def test_the_tiny_run_says_plainly_that_nothing_is_comparable(tiny_run: Path) -> None:
    tables = tiny_run / "results" / "tables"
    rows = list(csv.DictReader((tables / "reproduction.csv").open()))
    assert len(rows) == len(published_numbers())
    assert {row["Verdict"] for row in rows} <= {NOT_RUN, NOT_COMPARABLE}
    assert all(row["Verdict"] for row in rows)
    assert (
        "None of the papers' models ran here (this run's: micro"
        in (tables / "reproduction.md").read_text()
    )
    claims = list(csv.DictReader((tables / "reproduction_claims.csv").open()))
    assert len(claims) == 5 and all(c["Verdict"] and c["Numbers"] for c in claims)
    assert (tiny_run / "results/report/tables/reproduction.html").exists()
