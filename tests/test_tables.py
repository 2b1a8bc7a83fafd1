"""Table builders on hand-made tidy metric rows."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from grabrag.core.errors import DataError
from grabrag.core.outputs import read_csvs
from grabrag.report.audit_tables import audit_hwsa_rows, table_audit, write_audit_hwsa
from grabrag.report.grabrag_tables import (
    table_fac,
    table_hwsa,
    table_qc_sources,
    table_seed_sensitivity,
)
from grabrag.report.table_cells import pct_ci
from grabrag.report.tables import write_table
from grabrag.report.tabular import Table, listed_in

COLUMNS = ("model", "dataset", "policy", "condition", "metric", "value", "ci_low", "ci_high", "n")


def frame(rows, columns=None) -> pl.DataFrame:
    """A polars frame of tuples (named by ``columns``) or of dicts, as a CSV reads back."""
    records = [dict(zip(columns, r, strict=True)) for r in rows] if columns else list(rows)
    return pl.DataFrame(records, infer_schema_length=None, strict=False)


def _metrics(dataset: str, rates: dict[tuple[str, str], tuple[float, int]]) -> pl.DataFrame:
    rows = [
        ("m", dataset, policy, condition, "answer_rate", value, value, value, n)
        for (policy, condition), (value, n) in rates.items()
    ]
    rows.append(("m", dataset, "P1", "Q100", "answer_rate", 0.9, 0.9, 0.9, 10))
    return frame(rows, COLUMNS)


def test_seed_sensitivity_compares_answer_rates_of_each_seeds_own_cells() -> None:
    base = _metrics("nq", {("P1", "Q0"): (0.05, 500), ("P1", "QC"): (0.8267, 202)})
    variant = _metrics("nq_sensitivity43", {("P1", "Q0"): (0.066, 500), ("P1", "QC"): (0.82, 200)})
    table = table_seed_sensitivity(base, variant, "m", "nq", 42, 43)
    # The paper's columns (two decimals, as its Table 13); model, dataset and the
    # denominators go into the note.
    assert table.rows == [
        {
            "policy": "P1",
            "condition": "Q0",
            "seed 42": "5.00",
            "seed 43": "6.60",
            "|delta| (pp)": "1.60",
        },
        {
            "policy": "P1",
            "condition": "QC",
            "seed 42": "82.67",
            "seed 43": "82.00",
            "|delta| (pp)": "0.67",
        },
    ]
    assert table.note == (
        "m on nq; questions per cell, seed 42: Q0 500, QC 202; seed 43: Q0 500, QC 200."
    )


def test_seed_sensitivity_missing_cell_is_not_a_number() -> None:
    base = _metrics("nq", {("P1", "Q0"): (0.05, 500)})
    variant = _metrics("nq_sensitivity43", {("P1", "Q0"): (0.066, 500), ("P1", "QC"): (0.82, 200)})
    qc = table_seed_sensitivity(base, variant, "m", "nq", 42, 43).rows[1]
    assert (qc["seed 42"], qc["|delta| (pp)"]) == ("n/a", "n/a")


# --- QX and EvidentialRAG tables ------------------------------------------------------------


def _row(policy, condition, metric, value, n, low=None, high=None, reason=None):
    low = value if low is None else low
    high = value if high is None else high
    return ("m", "d", policy, condition, metric, value, low, high, n, reason)


def test_hwsa_conditions_and_evid_results() -> None:
    from grabrag.report.evidential_tables import table_evid_results, table_hwsa_conditions
    from grabrag.report.tables import write_table

    rows = []
    for policy, rates in (("P1", (0.5, 0.8, 0.6)), ("EVID_CB", (0.0, 0.25, 0.0))):
        for condition, rate in zip(("Q0", "QC", "QX"), rates, strict=True):
            rows.append(_row(policy, condition, "answer_rate", rate, 4))
            rows.append(_row(policy, condition, "ece_15", 0.1234, 4))
            rows.append(_row(policy, condition, "ece_answer_15", 0.0567, 4))
            if policy == "EVID_CB":
                rows.append(_row(policy, condition, "route_direct", 0.0, 4))
                rows.append(_row(policy, condition, "route_conflict_aware", 0.25, 4))
                rows.append(_row(policy, condition, "route_abstain", 0.75, 4))
        rows.append(_row(policy, "QX-QC", "hwsa_diff", rates[2] - rates[1], 4, -0.5, 0.25))
        rows.append(_row(policy, "Q100", "answer_rate", 0.9, 10))
        rows.append(_row(policy, "Q100", "fac", 0.1, 5, 0.0, 0.3))
        rows.append(_row(policy, "pooled", "refusal_precision", 0.5, 6))
        rows.append(_row(policy, "pooled", "refusal_recall", 0.25, 12))
        rows.append(_row(policy, "pooled", "refusal_f1", 1 / 3, 22))
        rows.append(_row(policy, "pooled", "ece_answer_15", 0.25, 22))
    metrics = frame(rows, (*COLUMNS, "reason"))
    table = table_hwsa_conditions(metrics)
    assert table["policy"] == ["P1", "EVID_CB"]
    first = table.rows[0]
    assert (first["HwSA(Q0) [95% CI]"], first["HwSA(QC) [95% CI]"]) == (
        "50.0 [50.0, 50.0]",
        "80.0 [80.0, 80.0]",
    )
    assert first["QX - QC [95% CI]"] == "-20.0 [-50.0, +25.0]" and first["n QC&QX"] == 4
    results = table_evid_results(metrics)
    p1 = [row for row in results.rows if row["policy"] == "P1"]
    assert [row["condition"] for row in p1] == ["Q100", "Q0", "QC", "QX", "pooled"]
    q100 = p1[0]
    assert (q100["FAC [95% CI]"], q100["Ans [95% CI]"], q100["HwSA [95% CI]"]) == (
        "10.0 [0.0, 30.0]",
        "90.0 [90.0, 90.0]",
        "",
    )
    qx = p1[3]
    assert (qx["HwSA [95% CI]"], qx["n"]) == ("60.0 [60.0, 60.0]", 4)
    # EvidentialRAG's ECE and GRAB-RAG's 15-bin midpoint ECE stay in their own columns
    assert (qx["ECE Eq. 26-27 (15 bins)"], qx["GRAB-RAG ECE-15 (bin midpoints, behaviour)"]) == (
        "0.057",
        "0.123",
    )
    assert qx["direct %"] == "" and q100["ECE Eq. 26-27 (15 bins)"] == ""
    (evid_qc,) = [r for r in results.rows if (r["policy"], r["condition"]) == ("EVID_CB", "QC")]
    assert (evid_qc["direct %"], evid_qc["conflict-aware %"], evid_qc["abstain route %"]) == (
        "0.0",
        "25.0",
        "75.0",
    )
    pooled = p1[4]
    assert (pooled["Refusal P"], pooled["Refusal R"], pooled["Refusal F1"]) == (
        "50.0 [50.0, 50.0]",
        "25.0 [25.0, 25.0]",
        "33.3 [33.3, 33.3]",
    )
    assert pooled["n"] == 22 and pooled["ECE Eq. 26-27 (15 bins)"] == "0.250"
    # EVID_CB is printed as EVID+CB
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        csv_path, md_path, _, tidy_path, _ = write_table(table, Path(folder) / "t", "caption")
        printed = pl.read_csv(csv_path)
        assert printed["policy"].to_list() == ["P1", "EVID+CB"]
        # the tidy file keeps the codes and the numbers behind each printed cell
        tidy = pl.read_csv(tidy_path).filter(pl.col("quantity") == "QX - QC [95% CI]")
        assert tidy["policy"].to_list() == ["P1", "EVID_CB"]
        assert tidy.row(0, named=True) == {
            "table": "t",
            "model": "m",
            "dataset": "d",
            "policy": "P1",
            "condition": None,
            "row": None,
            "quantity": "QX - QC [95% CI]",
            "estimate": pytest.approx(-0.2),
            "ci_low": -0.5,
            "ci_high": 0.25,
            "n": 4,
        }
        assert "EVID+CB" in md_path.read_text()


def _sweep() -> pl.DataFrame:
    rows = []
    for model, dataset, shift in (("m", "a", 0.0), ("m", "b", 0.2)):
        for rule, qc in (("dempster", 0.8), ("0", 0.6), ("0.3", 0.4), ("0.6", 0.2), ("1", 0.1)):
            for tau1, tau2, scale in ((0.2, 0.5, 0.5), (0.35, 0.65, 1.0), (0.5, 0.8, 1.5)):
                for condition, rate in (("Q100", 0.9), ("QC", qc + shift), ("QX", qc / 2)):
                    rows.append(
                        {"model": model, "dataset": dataset, "policy": "EVID", "variant": "evid",
                         "rule": rule, "tau1": tau1, "tau2": tau2, "condition": condition,
                         "answer_rate": min(rate * scale, 1.0), "em": 0.5}
                    )  # fmt: skip
                rows.append(
                    {"model": model, "dataset": dataset, "policy": "EVID", "variant": "evid",
                     "rule": rule, "tau1": tau1, "tau2": tau2, "condition": "pooled",
                     "abstain_rate": 0.5, "refusal_precision": 0.6, "refusal_recall": 0.9,
                     "refusal_f1": 0.72, "ece_answer_15": 0.2, "route_direct": 0.5,
                     "route_conflict_aware": 0.2, "route_abstain": 0.3}
                )  # fmt: skip
        for variant, rule, tau1, tau2 in (
            ("no_fusion", "average", 0.35, 0.65),
            ("no_routing", "0.6", float("nan"), float("nan")),
        ):
            rows.append(
                {"model": model, "dataset": dataset, "policy": "EVID", "variant": variant,
                 "rule": rule, "tau1": tau1, "tau2": tau2, "condition": "QC",
                 "answer_rate": 1.0 if variant == "no_routing" else 0.7}
            )  # fmt: skip
    return frame(rows)


def test_evid_sweep_tables_macro_average_cells() -> None:
    from grabrag.report.evidential_tables import (
        table_evid_ablation,
        table_evid_lambda_sweep,
        table_evid_tau_sweep,
    )

    lam = table_evid_lambda_sweep(_sweep(), 0.6, 0.35, 0.65)
    assert lam["rule"] == [
        "normalised Dempster",
        "lambda=0",
        "lambda=0.3",
        "lambda=0.6 (default)",
        "lambda=1 (Yager-style)",
    ]
    # QC answer rate at lambda 0.6: (0.2 + 0.4) / 2 over the two cells
    assert lam.rows[3]["HwSA@QC"] == "30.0" and lam.rows[3]["HwSA@QX"] == "10.0"
    assert lam.rows[0]["cells"] == 2 and lam.rows[0]["refusal F1"] == "72.0"
    assert lam.rows[0]["Ans@Q100"] == "90.0" and lam.rows[0]["ECE Eq. 26-27 (15 bins)"] == "0.200"
    assert (lam.rows[0]["direct %"], lam.rows[0]["abstain route %"]) == ("50.0", "30.0")
    tau = table_evid_tau_sweep(_sweep(), 0.6, 0.35, 0.65)
    assert tau["(tau1, tau2)"] == ["(0.2, 0.5)", "(0.35, 0.65) (default)", "(0.5, 0.8)"]
    assert tau["HwSA@QC"] == ["15.0", "30.0", "45.0"]
    assert tau["conflict-aware %"] == ["20.0", "20.0", "20.0"]
    ablation = table_evid_ablation(_sweep(), 0.6, 0.35, 0.65)
    assert ablation["HwSA@QC"] == ["30.0", "70.0", "100.0"]
    assert ablation.rows[1]["variant"].endswith("(evidence averaging)")
    assert ablation.rows[2]["variant"].startswith("without dynamic routing")
    # without the evaluator: naive RAG (P0, no abstention controller) on the sweep's
    # cells, from the metrics; the cell m/c is not in the sweep and stays out. P1 follows
    # in its own labelled row.
    metrics = frame(
        [
            ("m", d, policy, c, metric, v, v, v, n, None)
            for policy, shift in (("P0", 0.0), ("P1", 0.1))
            for d, qc in (("a", 0.8 - shift), ("b", 0.6 - shift), ("c", 0.0))
            for c, metric, v, n in (
                ("Q100", "answer_rate", 1.0, 10), ("Q100", "em", 0.7, 10),
                ("Q100", "abstain_rate", 0.0, 10), ("QC", "answer_rate", qc, 10),
                ("QC", "abstain_rate", 1 - qc, 10), ("pooled", "refusal_f1", 0.3, 20),
                ("pooled", "ece_answer_15", 0.4, 20),
            )
        ],
        (*COLUMNS, "reason"),
    )  # fmt: skip
    naive, p1_row = table_evid_ablation(_sweep(), 0.6, 0.35, 0.65, metrics).rows[-2:]
    assert naive["variant"] == "without evidential evaluator (naive RAG: P0)"
    assert (naive["policy"], naive["cells"], naive["HwSA@QC"]) == ("P0", 2, "70.0")
    # P1: QC (0.7 + 0.5) / 2, labelled as ours
    assert (p1_row["policy"], p1_row["cells"], p1_row["HwSA@QC"]) == ("P1", 2, "60.0")
    assert p1_row["variant"].startswith("P1 beside it (ours")
    # abstain (all): a = 2/20, b = 4/20 -> mean 15%
    assert (naive["abstain (all)"], naive["refusal F1"], naive["direct %"]) == (
        "15.0",
        "30.0",
        "n/a",
    )
    assert naive["ECE Eq. 26-27 (15 bins)"] == "0.400"


def test_lambda_sweep_table_keeps_a_configured_lambda_off_the_grid() -> None:
    from grabrag.report.evidential_tables import table_evid_lambda_sweep

    sweep = _sweep()
    extra = sweep.filter(pl.col("rule") == "0.6").with_columns(rule=pl.lit("0.45"))
    table = table_evid_lambda_sweep(pl.concat([sweep, extra]), 0.45, 0.35, 0.65)
    assert "lambda=0.45 (default)" in table["rule"]
    assert table["rule"].index("lambda=0.45 (default)") == 3  # between 0.3 and 0.6


def test_evid_evaluator_table() -> None:
    from grabrag.report.evidential_tables import table_evid_evaluator

    report = {"model": "m", "dataset": "d", "condition": "Q0", "evaluator": "m",
              "questions": 4, "evaluator_passes": 20, "with_evidence": 3,
              "status": {"ok": 17, "repaired": 2, "failed": 1}}  # fmt: skip
    row = table_evid_evaluator([report]).rows[0]
    assert (row["schema-valid %"], row["repaired %"], row["failed %"]) == ("85.0", "10.0", "5.0")
    assert row["zero-evidence %"] == "85.0" and row["evaluator passes"] == 20
    empty = table_evid_evaluator([{**report, "evaluator_passes": 0, "with_evidence": 0,
                                   "status": {}}])  # fmt: skip
    assert empty.rows[0]["schema-valid %"] == "n/a"


def test_evid_efficiency_table() -> None:
    from grabrag.report.evidential_tables import table_evid_efficiency

    summary = {
        "model": "m",
        "dataset": "d",
        "policies": {
            "P1": {"queries": 4, "seconds_per_query": 0.5, "evaluator_seconds_per_query": 0.0,
                   "generator_seconds_per_query": 0.5, "logical_decisions": 1.0,
                   "executed_passes": 1.0, "peak_memory_mb": None, "relative_cost": 1.0},
            "EVID_CB": {"queries": 4, "seconds_per_query": 2.0,
                        "evaluator_seconds_per_query": 1.5, "generator_seconds_per_query": 0.5,
                        "closed_book_seconds_per_query": 0.25,
                        "logical_decisions": 7.0, "executed_passes": 7.0,
                        "peak_memory_mb": 812.4, "relative_cost": 4.0},
        },
    }  # fmt: skip
    table = table_evid_efficiency([summary])
    assert table["policy"] == ["P1", "EVID_CB"]
    assert table["relative cost"] == ["1.00x", "4.00x"]
    assert table["peak memory (MB)"] == ["n/a", "812"]
    assert table["logical LLM decisions"] == ["1.0", "7.0"]
    assert table["closed-book s/query"] == ["n/a", "0.250"]


def frame_of(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows, infer_schema_length=None, strict=False)


def _decision(qid: str, decision: str) -> dict:
    return {"qid": qid, "decision": decision, "answer": "x" if decision == "answer" else None}


def _audit_decisions() -> dict:
    answers = {
        # (policy, condition): decisions of q1..q4
        ("P1", "QC"): ["answer", "answer", "abstain", "answer"],
        ("P1", "Q0"): ["abstain", "abstain", "abstain", "answer"],
        ("P3", "QC"): ["abstain", "answer", "abstain", "abstain"],
        ("P3", "Q0"): ["abstain", "abstain", "abstain", "abstain"],
    }
    return {
        ("m", policy, condition): [_decision(f"q{k}", d) for k, d in enumerate(ds, start=1)]
        for (policy, condition), ds in answers.items()
    }


def test_audit_hwsa_rows_and_table_6(tmp_path) -> None:
    ratings = {"q1": "fluent", "q2": "broken", "q3": "borderline"}
    rows = audit_hwsa_rows("nq", _audit_decisions(), ratings, ["q1", "q2", "q3", "q4"])
    by_policy = {row["policy"]: row for row in rows}
    # P1: QC 3/4, clean {q1, q3} 1/2; Q0 1/4 and 0/2; deltas +0.5 and +0.5 (sign kept)
    p1 = by_policy["P1"]
    assert [p1[k] for k in ("n_all", "hwsa_qc_all", "n_clean", "hwsa_qc_clean")] == [
        4,
        0.75,
        2,
        0.5,
    ]
    assert [p1[k] for k in ("hwsa_q0_all", "hwsa_q0_clean", "delta_all", "delta_clean")] == [
        0.25,
        0,
        0.5,
        0.5,
    ]
    assert p1["shift"] == -0.25 and p1["sign_preserved"] is True
    # P3: QC 1/4, clean 0/2; Q0 0 and 0; deltas +0.25 and 0: the sign is not kept
    p3 = by_policy["P3"]
    assert [p3[k] for k in ("hwsa_qc_all", "hwsa_qc_clean", "delta_all", "delta_clean")] == [
        0.25,
        0,
        0.25,
        0,
    ]
    assert p3["sign_preserved"] is False

    # Table 6 reads the rows back from the CSV the audit rule writes.
    written = tmp_path / "audit_hwsa.csv"
    write_audit_hwsa(written, rows)
    frame = read_csvs([written], strings=("dataset", "model", "policy", "sign_preserved"))
    table = table_audit(frame)
    assert table["Policy"] == ["P1", "P3", "", ""]
    # The paper's columns only: the deltas stay in audit_hwsa_rows' tidy frame.
    assert table.rows[0] == {
        "Model": "m",
        "Dataset": "nq",
        "Policy": "P1",
        "n (all)": 4,
        "HwSA@QC (all)": "75.0",
        "n (F+B)": 2,
        "HwSA@QC (F+B)": "50.0",
        "Shift (pp)": "-25.0",
    }
    macro, signs = table.rows[-2], table.rows[-1]
    # mean HwSA@QC: (75 + 25) / 2 = 50.0 (all), (50 + 0) / 2 = 25.0 (F+B); shift -25.0
    assert (macro["Model"], macro["HwSA@QC (all)"], macro["HwSA@QC (F+B)"]) == (
        "Macro avg",
        "50.0",
        "25.0",
    )
    assert macro["Shift (pp)"] == "-25.0"
    assert signs["Model"] == "1 of 2 delta signs preserved." and signs["Shift (pp)"] == ""
    # Another policy gets its row but does not enter the paper's macro average, which
    # then says whose average it is.
    decisions = _audit_decisions()
    decisions[("m", "CDD", "QC")] = [_decision(f"q{k}", "abstain") for k in range(1, 5)]
    with_cdd = table_audit(
        frame_of(audit_hwsa_rows("nq", decisions, ratings, ["q1", "q2", "q3", "q4"]))
    )
    assert with_cdd["Policy"] == ["P1", "P3", "CDD", "", ""]
    assert with_cdd.rows[-2] == {**macro, "Model": "Macro avg (P0-P4)"}
    assert with_cdd.rows[-1] == signs
    # every delta sign preserved reads as the paper's sentence
    kept = frame.filter(pl.col("policy") == "P1")
    assert table_audit(kept).rows[-1]["Model"] == "All 1 delta signs preserved."


def test_audit_rows_reject_qids_that_are_not_qc_eligible() -> None:
    ratings = {"q1": "fluent", "z9": "broken"}
    with pytest.raises(DataError, match=r"audit\.csv: 1 rated qid.*'nq': z9.*audit_sample\.csv"):
        audit_hwsa_rows("nq", _audit_decisions(), ratings, ["q1", "q2"], audit_file="audit.csv")


def test_markdown_keeps_the_formatted_strings(tmp_path) -> None:
    table = Table([{"Shift (pp)": "+50.0", "n": 3}, {"Shift (pp)": "-2.5", "n": 4}])
    write_table(table, tmp_path / "t", "Caption.")
    text = (tmp_path / "t.md").read_text()
    assert "+50.0" in text and "Caption." in text


# --- Tables 4-5, audit quality, cutoff sweep, closed book, section 6 ---------------------


def _swap_record(qid, index, tier, text="He lived in Paris.", new="He lived in Lyon."):
    return {
        "qid": qid,
        "index": index,
        "status": "accepted",
        "tier": tier,
        "entity_type": "GPE",
        "source_type": "GPE",
        "question": f"where {qid}?",
        "answers": ["Paris"],
        "original_span": "Paris",
        "replacement": "Lyon",
        "passage": {"text": text},
        "modified_passage": {"text": new},
    }


def test_ner_labels_and_swap_examples() -> None:
    from grabrag.report.audit_tables import table_ner_labels, table_swap_examples

    labels = table_ner_labels("gliner")
    assert len(labels) == 8 and set(labels["Internal type"]) >= {"PERSON", "WORK_OF_ART"}
    assert set(table_ner_labels("spacy")["NER label"]) == set(labels["Internal type"])
    records = {
        "nq": [
            _swap_record("a", 2, "3"),
            _swap_record("b", 0, "3"),
            _swap_record("c", 1, "3"),
            _swap_record("d", 3, "1"),
            {"qid": "e", "index": 4, "status": "skipped"},
        ]
    }
    by_tier = table_swap_examples(records, per_group=2)
    assert by_tier["Group"] == ["tier 1", "tier 3", "tier 3"]
    assert by_tier["Question"][1:] == ["where b?", "where c?"]  # first by position
    assert by_tier["QC"][0] == "He lived in Lyon." and by_tier["Swap"][0] == "GPE -> GPE"
    rated = table_swap_examples(records, {"nq": {"a": "broken", "d": "fluent"}})
    assert list(zip(rated["Group"], rated["Question"], strict=True)) == [
        ("fluent", "where d?"),
        ("broken", "where a?"),
    ]


def test_audit_quality_distribution_and_broken_rate_by_type() -> None:
    from grabrag.report.audit_tables import table_audit_quality

    nq = pl.DataFrame(
        {
            "qid": list("abcd"),
            "entity_type": ["ORG", "ORG", "PERSON", "PERSON"],
            "quality": ["broken", "fluent", "Fluent ", "borderline"],
        }
    )
    hp = pl.DataFrame({"qid": ["e"], "entity_type": ["ORG"], "quality": ["broken"]})
    table = table_audit_quality({"nq": nq, "hotpotqa": hp}, n_resamples=200, seed=1)
    rows = {(r["Section"], r["Dataset"], r["Category"]): r for r in table.rows}
    assert rows[("quality tier", "nq", "fluent")]["n"] == 2
    assert rows[("quality tier", "nq", "fluent")]["%"] == "50.0"
    assert rows[("quality tier", "Total", "broken")]["n"] == 2
    assert rows[("quality tier", "Total", "broken")]["of"] == 5
    org = rows[("broken rate by type", "Total", "ORG")]
    assert (org["n"], org["of"], org["%"]) == (2, 3, "66.7")
    assert (
        org["95% CI"].startswith("[")
        and rows[("broken rate by type", "nq", "PERSON")]["%"] == "0.0"
    )


def test_cutoff_sweep_and_closed_book() -> None:
    from grabrag.report.p3_tables import table_closed_book, table_cutoff_sweep

    sweep = frame(
        [
            {
                "threshold": t,
                "cutoff": c,
                "hwsa_qc": h,
                "fac_q100": 0.5,
                "ans_q100": 0.3,
                "model": m,
            }
            for m in ("a", "b")
            for t in (0.6, 0.8)
            for c, h in ((0, 0.10), (50, 0.20), (80, 0.40))
        ]
    )
    table = table_cutoff_sweep(sweep, 0.8, 50)
    assert table["Cutoff"] == ["0", "50", "80"]
    assert table["HwSA_QC (lower safer)"] == ["10.0", "20.0", "40.0"]
    assert table["HwSA_QC vs cf=50 (pp)"] == ["-10.0", "+0.0", "+20.0"]
    cb = {
        ("m", "nq"): [
            {"decision": "abstain", "confidence": 0},
            {"decision": "answer", "confidence": 90},
            {"decision": "answer", "confidence": 40},
            {"decision": None, "confidence": None},
        ]
    }
    rows = table_closed_book(cb, 50).rows
    assert rows[0]["CB abstain %"] == "25.0" and rows[0]["mean confidence (answered)"] == "65.0"
    assert rows[0]["answered below cutoff 50 %"] == "50.0" and rows[0]["parse failed %"] == "25.0"
    assert rows[-1]["model"] == "Mean" and rows[-1]["CB abstain %"] == "25.0"


def test_section6_aggregates() -> None:
    from grabrag.report.grabrag_tables import table_section6

    rows = []
    for model, nq, hp in (("phi", 0.4, 0.7), ("qwen", 0.6, 0.9)):
        for policy in ("P0", "P1", "EVID"):
            extra = 0.5 if policy == "EVID" else 0.0  # not a paper policy: left out
            for dataset, rate in (("nq", nq), ("hotpotqa", hp)):
                rows.append((model, dataset, policy, "QC", "abstain_rate", rate + extra))
                rows.append((model, dataset, policy, "QC", "qc_answered", 10))
                rows.append((model, dataset, policy, "QC", "qc_echo", 6 if dataset == "nq" else 4))
                rows.append((model, dataset, policy, "Q100", "answer_rate", 0.8))
                rows.append(
                    (model, dataset, policy, "Q100", "em_gap", 0.2 if dataset == "nq" else 0.1)
                )
                rows.append((model, dataset, policy, "QC-Q0", "hwsa_diff", 0.4))
            rows.append((model, dataset, "mean", "QC", "normalised_hwsa", 0.5))
    metrics = frame(rows, ["model", "dataset", "policy", "condition", "metric", "value"])
    table = table_section6(metrics)
    got = {(r["Quantity"].split(" (")[0], r["Model"], r["Dataset"]): r["Value"] for r in table.rows}
    assert got[("QC abstention rate", "all", "nq")] == "50.0"
    assert got[("QC abstention rate", "all", "hotpotqa")] == "80.0"
    assert got[("QC abstention difference", "phi", "")] == "-30.0"  # nq - hotpotqa (sorted)
    # in the paper config's order (NQ, HotpotQA) the difference has the paper's sign:
    # "Phi abstains 26.8 points more on HotpotQA"
    with listed_in(["phi", "qwen"], ["nq", "hotpotqa"]):
        ordered = table_section6(metrics).rows
    differences = [r for r in ordered if r["Quantity"].startswith("QC abstention difference")]
    assert differences[0]["Quantity"].endswith("hotpotqa - nq")
    assert (differences[0]["Model"], differences[0]["Value"]) == ("phi", "+30.0")
    assert [r["Dataset"] for r in ordered[:2]] == ["nq", "hotpotqa"]
    assert got[("echo share of answered QC rows", "qwen", "nq")] == "60.0"
    assert got[("Q100 answer rate", "phi", "")] == "80.0"
    assert got[("normalised HwSA@QC", "qwen", "")] == "50.0"
    assert got[("Q100 EM gap, QC-eligible - excluded", "all", "nq")] == "+20.0"
    assert got[("QC - Q0 HwSA delta", "all", "all")] == "+40.0"


# --- the paper's tables have the paper's columns -------------------------------------


def _cell_metrics() -> pl.DataFrame:
    rows = []
    for dataset, n_qc, n_capable in (("nq", 202, 150), ("hotpotqa", 330, 200)):
        for policy in ("P0", "P1"):
            rows += [
                ("m", dataset, policy, "Q0", "hwsa", 0.01, 0.0, 0.02, n_qc),
                ("m", dataset, policy, "QC", "hwsa", 0.8, 0.7, 0.9, n_qc),
                ("m", dataset, policy, "QC-Q0", "hwsa_diff", 0.79, 0.7, 0.88, n_qc),
                ("m", dataset, policy, "Q100", "fac", 0.1, 0.05, 0.15, n_capable),
                ("m", dataset, policy, "Q50", "fac", 0.2, 0.1, 0.3, n_capable),
                ("m", dataset, policy, "Q100", "answer_rate", 0.9, 0.85, 0.95, 500),
                ("m", dataset, policy, "Q50", "answer_rate", 0.8, 0.75, 0.85, 500),
                ("m", dataset, policy, "QC", "answer_rate", 0.8, 0.7, 0.9, n_qc),
                ("m", dataset, policy, "QC", "qc_answered", 10, 10, 10, n_qc),
                ("m", dataset, policy, "QC", "qc_echo", 6, 6, 6, n_qc),
                ("m", dataset, policy, "QC", "qc_override", 1, 1, 1, n_qc),
                ("m", dataset, policy, "QC", "qc_hallucination", 3, 3, 3, n_qc),
            ]
    return frame(rows, COLUMNS)


def test_table1_has_the_papers_columns_and_its_n_in_the_note() -> None:
    table = table_hwsa(_cell_metrics(), with_ci=False)
    assert list(table.columns) == [
        "model",
        "dataset",
        "policy",
        "HwSA_Q0",
        "HwSA_QC",
        "Delta [95% CI]",
    ]
    assert table.note == "n = QC-eligible questions: 330 (hotpotqa), 202 (nq)."
    # Table 7 keeps its n column, as the paper's
    assert "n" in table_hwsa(_cell_metrics(), with_ci=True).columns
    # Table 1 prints the Delta CI as whole percents ("+55.0 [48, 62]"), Table 7 to a
    # decimal with signs ("+55.0 [+47.5,+61.9]"): 0.7 -> 70, 0.88 -> 88
    assert table["Delta [95% CI]"][0] == "+79.0 [70, 88]"
    assert table_hwsa(_cell_metrics(), with_ci=True)["Delta [95% CI]"][0] == "+79.0 [+70.0, +88.0]"
    # rounded half up, as the paper's 47.5 -> 48 and 61.9 -> 62
    assert pct_ci(0.55, 0.475, 0.619, signed=True, whole_bounds=True) == "+55.0 [48, 62]"
    assert pct_ci(-0.02, -0.055, 0.004, signed=True, whole_bounds=True) == "-2.0 [-5, 0]"
    # models and datasets in the config's order: the paper's NQ before HotpotQA
    assert table["dataset"][:2] == ["hotpotqa", "hotpotqa"]
    with listed_in(["m"], ["nq", "hotpotqa"]):
        assert table_hwsa(_cell_metrics(), with_ci=False)["dataset"][:2] == ["nq", "nq"]


def test_table8_has_no_capable_set_column_but_names_its_sizes() -> None:
    table = table_fac(_cell_metrics())
    assert list(table.columns) == [
        "model",
        "dataset",
        "policy",
        "FAC(Q100)",
        "FAC(Q50)",
        "Ans(Q100)",
        "Ans(Q50)",
    ]
    assert table.note == ("Capable-set sizes (FAC at Q100): 200 (m, hotpotqa), 150 (m, nq).")


def test_tables_3_and_9_order_sources_as_the_paper() -> None:
    pooled = table_qc_sources(_cell_metrics(), per_cell=False)
    assert list(pooled.columns) == ["model", "Ans.", "Echo", "Halluc.", "Correct"]
    assert pooled.rows[-1] == {
        "model": "All",
        "Ans.": 40,
        "Echo": "60.0",
        "Halluc.": "30.0",
        "Correct": "10.0",
    }
    per_cell = table_qc_sources(_cell_metrics(), per_cell=True)
    assert list(per_cell.columns)[3:] == ["n", "Ans %", "Correct %", "Echoed %", "Halluc %"]


def test_write_table_prints_the_note_after_the_caption(tmp_path) -> None:
    from grabrag.report.table_cells import with_note

    table = with_note(Table([{"policy": "P1"}]), "n = 5.")
    csv_path, md_path, tex_path, _, _ = write_table(table, tmp_path / "t", "Table 1: x.")
    assert md_path.read_text().startswith("Table 1: x. n = 5.\n")
    assert "Table 1: x. n = 5." in tex_path.read_text()
    assert csv_path.read_text() == "policy\nP1\n"


# --- the table and figure declarations ------------------------------------------------


def test_every_declared_table_and_figure_has_its_caption() -> None:
    from grabrag.pipeline.files import EXTRA_TABLES
    from grabrag.report.specs import figures, tables

    report = Path(__file__).resolve().parents[1] / "workflow" / "report"
    for kind, declared in (("tables", [*tables(), *EXTRA_TABLES]), ("figures", figures())):
        captions = {path.stem for path in (report / kind).glob("*.rst")}
        assert captions == set(declared), kind  # none missing, none orphaned


def test_the_report_lists_the_tables_as_the_papers_number_them() -> None:
    from grabrag.report.specs import paper_order, report_labels, tables

    declared = list(tables())
    ordered = paper_order(declared)
    assert sorted(ordered) == sorted(declared)
    assert ordered[:15] == [
        "table1_hwsa",
        "table2_policies",
        "table3_qc_sources",
        "table4_ner_labels",
        "table5_swap_examples",
        "table6_audit",
        "table7_hwsa_ci",
        "table8_fac_ci",
        "table9_qc_sources",
        "table10_aurc",
        "table11_ece",
        "table11b_ece15",
        "table12_p3_sweep",
        "table12b_cutoff_sweep",
        "table13_seed_sensitivity",
    ]
    # the others keep their declared order: our GRAB-RAG additions, then each method's
    rest = [name for name in declared if name not in ordered[:15]]
    assert ordered[15:] == rest
    assert rest.index("section6_aggregates") < rest.index("evid_results")
    assert rest.index("evid_results") < rest.index("cdd_results")
    labels = report_labels(ordered)
    assert labels["table10_aurc"] == "10 table10_aurc"
    # the report sorts its items by label as text: that sort keeps this order
    assert sorted(labels.values()) == [labels[name] for name in ordered]
    assert report_labels([f"t{i}" for i in range(120)])["t0"] == "001 t0"


def test_the_features_of_a_config_choose_its_tables_and_figures() -> None:
    from grabrag.core.registry import Features
    from grabrag.report.specs import figure_names, table_names, tables

    plain = Features(conditions=("Q100", "Q50", "Q0", "QC"))
    assert "hwsa_conditions" not in table_names(plain)
    assert not {n for n in table_names(plain) if n.startswith(("evid_", "cdd_"))}
    assert "lambda_sweep" not in figure_names(plain)
    everything = Features(
        evidential=True,
        cdd_family=True,
        cdd_traces=True,
        cdd_diagnostics=True,
        audited=True,
        seed_sensitivity=True,
        truthfulqa_probe=True,
    )
    assert "truthfulqa_probe" not in table_names(plain)
    assert table_names(everything) == list(tables())
    assert "lambda_sweep" in figure_names(everything)
