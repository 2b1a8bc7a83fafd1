"""Rule metrics: every metric of one dataset with paired bootstrap CIs (tidy CSV)."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.core.runner import log, run_rule
from grabrag.evaluation.evaluate import evaluate
from grabrag.evaluation.inputs import read_context_files, read_decision_files
from grabrag.evaluation.schema import FILE_COLUMNS, SEED
from grabrag.report.tabular import rows_csv


def main(smk):
    rows = evaluate(
        read_decision_files(zip(smk.params.decision_cells, smk.input.decisions, strict=True)),
        read_context_files(zip(smk.params.context_cells, smk.input.contexts, strict=True)),
        n_resamples=smk.params.bootstrap["n_resamples"],
        seed=smk.params.seed,
        confidence_level=smk.params.bootstrap["confidence_level"],
        question_limits=smk.params.question_limits,
    )
    build_seed = smk.params.build_seed
    rows_csv(smk.output.metrics, [{**row, SEED: build_seed} for row in rows], FILE_COLUMNS)
    log.info("%d metric rows for %s", len(rows), smk.wildcards.dataset)


run_rule(snakemake, main)  # noqa: F821
