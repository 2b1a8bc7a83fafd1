"""Rule tables: the paper's tables as CSV + Markdown + LaTeX + a tidy numeric CSV."""

from pathlib import Path

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)
import polars as pl

from grabrag import tables as t
from grabrag.io import read_json, read_jsonl
from grabrag.results import read_diagnostics, read_metrics, read_sweeps
from grabrag.runner import log, run_rule
from grabrag.tabular import read_csvs


def _keyed(smk, name):
    """(cell, path) of each file of input ``name``: the rule names each file's cell."""
    return zip(smk.params.cells[name], smk.input[name], strict=True)


def _sweeps(smk, name):
    """The per-model x dataset sweep CSVs of input ``name`` in one frame."""
    return read_sweeps(smk.input[name], smk.params.cells[name])


def _seed_sensitivity(smk, metrics):
    """Table 13 for each configured seed variant (one, in practice)."""
    tables = []
    for cell, path in _keyed(smk, "seed_metrics"):
        spec = smk.params.seed_sensitivity[cell["dataset"]]
        tables.append(
            t.table_seed_sensitivity(
                metrics,
                read_metrics([path]),
                spec["model"],
                spec["dataset"],
                spec["base_seed"],
                spec["seed"],
            )
        )
    notes = " ".join(table.note for table in tables)
    return t.with_note(t.Table([row for table in tables for row in table.rows]), notes)


def _evid_sweeps(smk):
    """The EvidentialRAG sweep CSVs of every model x dataset, with model and dataset."""
    return _sweeps(smk, "evid_sweeps")


def _cdd_diagnostics(smk):
    """Every model x dataset's CDD diagnostics.csv in one frame."""
    return read_diagnostics(smk.input.cdd_diagnostics)


def _p3_sweeps(smk):
    """Every model x dataset's P3_sweep.csv in one frame."""
    return _sweeps(smk, "sweeps")


def _paper_outputs(smk):
    """Builders of Tables 4-5, the audit's quality, the cutoff sweep, the closed-book pass
    and section 6's aggregates (the inputs they read besides the metric table)."""
    spec = smk.params.paper_outputs

    def swaps():
        return {cell["dataset"]: read_jsonl(path) for cell, path in _keyed(smk, "swaps")}

    def audits():
        return {
            dataset: pl.read_csv(path, infer_schema=False, missing_utf8_is_empty_string=True)
            for dataset, path in zip(spec["audited"], smk.input.audit_ratings, strict=True)
        }

    def ratings():
        return {
            d: dict(zip(f["qid"], f["quality"].str.strip_chars().str.to_lowercase(), strict=True))
            for d, f in audits().items()
        }

    def closed_book():
        return {
            (cell["model"], cell["dataset"]): read_jsonl(path)
            for cell, path in _keyed(smk, "closed_book")
        }

    def sweeps():
        return _p3_sweeps(smk)

    boot = spec["bootstrap"]
    return {
        "table4_ner_labels": lambda: t.table_ner_labels(spec["ner_backend"]),
        "table5_swap_examples": lambda: t.table_swap_examples(swaps(), ratings()),
        "audit_quality": lambda: t.table_audit_quality(
            audits(), boot["n_resamples"], boot["confidence_level"], spec["seed"]
        ),
        "table12b_cutoff_sweep": lambda: t.table_cutoff_sweep(
            sweeps(), spec["f1_threshold"], spec["confidence_cutoff"]
        ),
        "closed_book": lambda: t.table_closed_book(closed_book(), spec["confidence_cutoff"]),
    }


def main(smk):
    metrics = read_metrics(smk.input.metrics)
    fusion = smk.params.fusion
    taus = (fusion["lam"], fusion["tau1"], fusion["tau2"])
    builders = {
        "table1_hwsa": lambda: t.table_hwsa(metrics, with_ci=False),
        "table2_policies": lambda: t.table_policy_comparison(metrics),
        "table3_qc_sources": lambda: t.table_qc_sources(metrics, per_cell=False),
        "table7_hwsa_ci": lambda: t.table_hwsa(metrics, with_ci=True),
        "table8_fac_ci": lambda: t.table_fac(metrics),
        "table9_qc_sources": lambda: t.table_qc_sources(metrics, per_cell=True),
        "table10_aurc": lambda: t.table_aurc(metrics),
        "table11_ece": lambda: t.table_ece(metrics, "ece"),
        "table11b_ece15": lambda: t.table_ece(metrics, "ece_15"),
        "table12_p3_sweep": lambda: t.table_p3_sweep(_p3_sweeps(smk)),
        "normalised_hwsa": lambda: t.table_metric_by_cell(
            metrics, "normalised_hwsa", "QC", "HwSA@QC / Ans@Q100"
        ),
        "selection_bias": lambda: t.table_selection_bias(metrics),
        "parse_failures": lambda: t.table_parse_failures([read_json(p) for p in smk.input.reports]),
        "table6_audit": lambda: t.table_audit(
            read_csvs(smk.input.audits, strings=("dataset", "model", "policy", "sign_preserved"))
        ),
        "table13_seed_sensitivity": lambda: _seed_sensitivity(smk, metrics),
        "hwsa_conditions": lambda: t.table_hwsa_conditions(metrics),
        "evid_results": lambda: t.table_evid_results(metrics),
        "evid_efficiency": lambda: t.table_evid_efficiency(
            [read_json(p) for p in smk.input.evid_efficiency]
        ),
        "evid_lambda_sweep": lambda: t.table_evid_lambda_sweep(_evid_sweeps(smk), *taus),
        "evid_tau_sweep": lambda: t.table_evid_tau_sweep(_evid_sweeps(smk), *taus),
        "evid_ablation": lambda: t.table_evid_ablation(_evid_sweeps(smk), *taus, metrics),
        "evid_evaluator": lambda: t.table_evid_evaluator(
            [read_json(p) for p in smk.input.evid_evaluate_reports]
        ),
        "cdd_results": lambda: t.table_cdd_results(metrics, _cdd_diagnostics(smk)),
        "cdd_sensitivity": lambda: t.table_cdd_sensitivity(_cdd_diagnostics(smk)),
        "cdd_ablation": lambda: t.table_cdd_ablation(_cdd_diagnostics(smk)),
        "cdd_source_control": lambda: t.table_cdd_source_control(_cdd_diagnostics(smk)),
        "section6_aggregates": lambda: t.table_section6(metrics),
        **_paper_outputs(smk),
    }
    for name, caption in smk.params.captions.items():
        table = builders[name]()
        t.write_table(table, Path(smk.output[name]).with_suffix(""), caption)
        log.info("%s: %d rows", name, len(table))


run_rule(snakemake, main)  # noqa: F821
