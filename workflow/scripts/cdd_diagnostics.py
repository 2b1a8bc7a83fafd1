"""Rule cdd_diagnostics: causal sensitivity, ablations, source control and accuracy per
perturbation type of one model x dataset (grabrag.cdd.diagnostics.diagnostics), from stored rows
only: no language model is loaded."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.cdd.diagnostics import DIAGNOSTIC_COLUMNS, diagnostics
from grabrag.core.io import read_jsonl
from grabrag.core.runner import log, run_rule
from grabrag.report.tabular import rows_csv


def main(smk):
    conditions = list(smk.params.conditions)
    contexts = {c: read_jsonl(p) for c, p in zip(conditions, smk.input.contexts, strict=True)}
    traces = (
        {c: read_jsonl(p) for c, p in zip(conditions, smk.input.traces, strict=True)}
        if smk.params.traces
        else None
    )
    decisions = {
        (cell["condition"], cell["policy"]): read_jsonl(path)
        for cell, path in zip(smk.params.decision_cells, smk.input.decisions, strict=True)
    }
    rows = diagnostics(
        smk.wildcards.model,
        smk.wildcards.dataset,
        conditions,
        contexts,
        traces,
        decisions,
        n_resamples=smk.params.bootstrap["n_resamples"],
        confidence_level=smk.params.bootstrap["confidence_level"],
        seed=smk.params.seed,
    )
    rows_csv(smk.output.diagnostics, rows, DIAGNOSTIC_COLUMNS)
    log.info("%d diagnostic rows", len(rows))


run_rule(snakemake, main)  # noqa: F821
