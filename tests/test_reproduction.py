"""The reproduction report: each published number against this run's, verdicts recomputed
by hand, the claims on planted tables, and the tiny run's report saying that nothing is
comparable."""

from __future__ import annotations

import csv
from pathlib import Path

import polars as pl

from grabrag.report.reproduction import (
    CLAIMS,
    KEY,
    NO_ESTIMATE,
    NOT_COMPARABLE,
    NOT_REPRODUCED,
    NOT_RUN,
    OUTSIDE,
    REPRODUCED,
    WITHIN_OURS,
    WITHIN_PUBLISHED,
    RunScope,
    cells_in_note,
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
            "condition": r.get("condition"),
            "row": r.get("row"),
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
    every = {(row["paper"], row["table"]) for row in published_numbers()}
    grabrag = {"table1_hwsa", "table2_policies", "table3_qc_sources", "table7_hwsa_ci"}
    grabrag |= {"table8_fac_ci", "table9_qc_sources", "table10_aurc", "table11_ece"}
    grabrag |= {"table12_p3_sweep", "table13_seed_sensitivity", "section6_aggregates"}
    assert every == {("GRAB-RAG", t) for t in grabrag} | {
        ("EvidentialRAG", "evid_results"),
        ("CDD", "cdd_results"),
        ("CDD", "cdd_ablation"),
        ("CDD", "truthfulqa_probe"),
    }


def test_every_published_number_is_unique_and_parses() -> None:
    """Each number of each paper once, its key unique (else a counterpart would be matched
    twice), its value, CI and sd numbers, its unit known."""
    rows = published_numbers()
    keys = [tuple(r[k] for k in ("paper", *KEY)) for r in rows]
    assert len(keys) == len(set(keys))
    for row in rows:
        for column in ("published", "ci_low", "ci_high", "sd"):
            if row[column]:
                float(row[column])
        assert row["unit"] in {"percent", "fraction", "count"}, row
        assert row["source"].startswith(row["paper"]), row
    counts = {}
    for row in rows:
        counts[row["table"]] = counts.get(row["table"], 0) + 1
    # the paper's cells: 30 model x dataset x policy rows, n once per dataset block
    assert counts["table7_hwsa_ci"] == 30 * 3 + 6
    assert counts["table8_fac_ci"] == 30 * 4
    assert counts["table9_qc_sources"] == 30 * 4 + 6
    assert counts["table10_aurc"] == 6 * 5 + 5  # and the mean row
    assert counts["table11_ece"] == 5 * 4
    assert counts["table12_p3_sweep"] == 8 * 3
    assert counts["table13_seed_sensitivity"] == 10 * 3


def test_tables_of_other_shapes_decimals_and_seed_spreads() -> None:
    """Table 13 (its cell in the note, two decimals), Table 10 (three decimals, a mean
    row), section 6 (a quantity in the row's labels, "all" as a macro) and EvidentialRAG's
    mean +/- sd."""
    frame = tidy(
        [
            # Table 13, Llama on NQ, P0 at QC: 82.67 printed; ours 0.82671 rounds to it
            {
                "table": "table13_seed_sensitivity",
                "policy": "P0",
                "condition": "QC",
                "quantity": "seed 42",
                "estimate": 0.82671,
            },
            {
                "table": "table13_seed_sensitivity",
                "policy": "P0",
                "condition": "QC",
                "quantity": "seed 43",
                "estimate": 0.8250,
            },
            # Table 10, Phi on NQ, P0: 0.509 printed; ours 0.5094 rounds to it
            {
                "table": "table10_aurc",
                "model": "phi-4-mini",
                "dataset": "nq",
                "quantity": "P0",
                "estimate": 0.5094,
            },
            {
                "table": "section6_aggregates",
                "model": "all",
                "dataset": "nq",
                "row": "Quantity=Q100 EM gap, QC-eligible - excluded (pp), P0, mean over models",
                "quantity": "Value",
                "estimate": 0.226,
            },
        ]
    )
    llama_nq = {"model": "llama-3.1-8b", "dataset": "nq"}
    scope = RunScope(PAPER_MODELS, PAPER_DATASETS, cells_in_note(llama_nq))
    rows = {row["Source"]: row for row in reproduction_rows(published_numbers(), frame, scope)}
    t13 = "GRAB-RAG Table 13 (Llama on NQ), row P0 / QC, column "
    assert rows[t13 + "Seed 42"]["Verdict"] == WITHIN_OURS
    assert rows[t13 + "Seed 42"]["Ours"] == "82.67"
    assert rows[t13 + "Seed 43"]["Verdict"] == OUTSIDE  # published 82.00, ours 82.50
    assert rows[t13 + "|Δ|"]["Verdict"] == NOT_RUN  # the run has the cell, not the number
    # Table 13 of another cell (the seed sensitivity run on Phi) is not Llama's
    other = RunScope(
        PAPER_MODELS, PAPER_DATASETS, cells_in_note({**llama_nq, "model": "phi-4-mini"})
    )
    again = {r["Source"]: r for r in reproduction_rows(published_numbers(), frame, other)}
    assert again[t13 + "Seed 42"]["Verdict"] == NOT_RUN
    assert rows["GRAB-RAG Table 10, row Phi / NQ, column P0"]["Verdict"] == WITHIN_OURS
    assert rows["GRAB-RAG Table 10, row Phi / NQ, column P0"]["Ours"] == "0.509"
    # the mean over six cells: comparable on the paper's models and datasets, no number here
    assert rows["GRAB-RAG Table 10, row Mean, column P0"]["Verdict"] == NOT_RUN
    gap = "GRAB-RAG §6, Selection bias in QC eligibility: Q100 EM gap on NQ"
    assert rows[gap]["Verdict"] == WITHIN_OURS and rows[gap]["Ours"] == "22.6"
    # one model only: section 6's means over models are not comparable
    one = RunScope(frozenset({"phi-4-mini"}), PAPER_DATASETS)
    alone = {r["Source"]: r for r in reproduction_rows(published_numbers(), frame, one)}
    assert alone[gap]["Verdict"] == NOT_COMPARABLE
    evid = next(
        r
        for r in rows.values()
        if r["Source"].startswith("EvidentialRAG Table 5, row EvidentialRAG, column Refusal F1")
    )
    assert evid["Published"] == "71.5 ± 1.4 (sd)" and evid["Verdict"] == NOT_RUN


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
    for claim in claims:  # the other papers' claims have no table here
        if claim.startswith(("EvidentialRAG", "CDD", "Under an injected")):
            assert claims[claim]["Verdict"] == NOT_RUN, claim


def test_the_other_papers_claims_on_planted_tables() -> None:
    def cell(table, model, policy, quantity, value, **labels):
        return {
            "table": table,
            "model": model,
            "dataset": "nq",
            "policy": policy,
            "quantity": quantity,
            "estimate": value,
            **labels,
        }

    rows = [
        # EvidentialRAG above naive RAG in one cell, below in the other
        cell("evid_results", "a", "EVID", "Refusal F1", 0.7, condition="pooled"),
        cell("evid_results", "a", "P0", "Refusal F1", 0.1, condition="pooled"),
        cell("evid_results", "b", "EVID", "Refusal F1", 0.2, condition="pooled"),
        cell("evid_results", "b", "P0", "Refusal F1", 0.3, condition="pooled"),
        # CDD above Standard RAG (P1) in its one cell
        cell("cdd_results", "a", "CDD", "Acc adversarial macro [95% CI]", 0.78),
        cell("cdd_results", "a", "P1", "Acc adversarial macro [95% CI]", 0.63),
        # Table 12: 0.0 -> 0.2 moves everything more than 0.2 -> 1.0
        *[
            {"table": "table12_p3_sweep", "row": f"F1={t}", "quantity": q, "estimate": v}
            for q, values in (
                ("HwSA_QC (lower safer)", (0.416, 0.169, 0.128)),
                ("FAC_Q100 (lower better)", (0.0, 0.404, 0.506)),
                ("Q100 Ans (higher better)", (0.793, 0.463, 0.326)),
            )
            for t, v in zip(("0.0", "0.2", "1.0"), values, strict=True)
        ],
        # Table 13: the paper's largest swing, 2.26 pp
        {
            "table": "table13_seed_sensitivity",
            "policy": "P2",
            "condition": "QC",
            "quantity": "|delta| (pp)",
            "estimate": 0.0226,
        },
        # section 6: one model abstains less on HotpotQA
        *[
            {
                "table": "section6_aggregates",
                "model": m,
                "dataset": "",
                "row": "Quantity=QC abstention difference (pp), hotpotqa - nq",
                "quantity": "Value",
                "estimate": v,
            }
            for m, v in (("phi-4-mini", 0.268), ("qwen2.5-7b", -0.01))
        ],
    ]
    claims = {row["Claim"]: row for row in claim_rows(tidy(rows))}

    def verdict(prefix: str) -> str:
        (found,) = [row["Verdict"] for claim, row in claims.items() if claim.startswith(prefix)]
        return found

    assert verdict("EvidentialRAG's refusal F1 is ") == NOT_REPRODUCED
    refusal = next(r for c, r in claims.items() if c.startswith("EvidentialRAG's refusal"))
    assert refusal["Numbers"] == "a/nq: EVID 70.0 vs P0 10.0; b/nq: EVID 20.0 vs P0 30.0"
    assert verdict("EvidentialRAG's ECE") == NOT_RUN
    assert verdict("CDD's adversarial macro accura") == REPRODUCED
    assert verdict("CDD pays in clean accuracy: be") == NOT_RUN
    assert verdict("P3's F1 threshold acts in one ") == REPRODUCED
    assert verdict("A second construction seed mov") == REPRODUCED
    assert verdict("Every model abstains more at Q") == NOT_REPRODUCED


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
    assert len(claims) == len(CLAIMS) and all(c["Verdict"] and c["Numbers"] for c in claims)
    assert (tiny_run / "results/report/tables/reproduction.html").exists()


def test_a_method_on_fewer_questions_is_not_compared() -> None:
    """evidential.n_questions: EVID's numbers over one question's rows and P0's over four
    are not compared; a cell over the same rows still is, and a cell set aside is named."""

    def cell(model, policy, value, n, quantity="Refusal F1"):
        return {
            "table": "evid_results",
            "model": model,
            "dataset": "squad",
            "policy": policy,
            "condition": "pooled",
            "quantity": quantity,
            "estimate": value,
            "n": n,
        }

    claim = "EvidentialRAG's refusal F1 is above naive RAG's (P0), in every cell"
    apart = [cell("a", "EVID", 0.7, 5), cell("a", "P0", 0.1, 20)]
    (row,) = [r for r in claim_rows(tidy(apart)) if r["Claim"] == claim]
    assert row["Verdict"] == NOT_COMPARABLE
    assert row["Numbers"] == (
        "Refusal F1 over different questions (a/squad: EVID over n=5, P0 over n=20)"
    )
    mixed = [*apart, cell("b", "EVID", 0.7, 20), cell("b", "P0", 0.1, 20)]
    (row,) = [r for r in claim_rows(tidy(mixed)) if r["Claim"] == claim]
    assert row["Verdict"] == REPRODUCED
    assert row["Numbers"] == (
        "b/squad: EVID 70.0 vs P0 10.0; not compared, over different questions: "
        "a/squad: EVID over n=5, P0 over n=20"
    )
    # a row without its own n counts as its policy's largest n in the cell
    ece = "ECE Eq. 26-27 (15 bins)"
    unsized = [
        cell("a", "EVID", 0.1, None, ece),
        cell("a", "P0", 0.3, None, ece),
        cell("a", "EVID", 0.5, 5, "Ans [95% CI]"),
        cell("a", "P0", 0.5, 20, "Ans [95% CI]"),
    ]
    verdicts = {r["Claim"]: r["Verdict"] for r in claim_rows(tidy(unsized))}
    assert (
        verdicts[
            "EvidentialRAG's ECE (Eqs. 26-27, 15 bins) is below naive RAG's (P0), in every cell"
        ]
        == NOT_COMPARABLE
    )
