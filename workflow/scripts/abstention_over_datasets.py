"""Rule abstention_over_datasets: Figure 2's abstention rates averaged over the datasets,
with bootstrap CIs from each dataset's own resamples (tidy CSV)."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.core.runner import log, run_rule
from grabrag.evaluation.evaluate import abstention_over_datasets
from grabrag.evaluation.inputs import read_context_files, read_decision_files
from grabrag.evaluation.schema import FILE_COLUMNS, SEED
from grabrag.report.tabular import rows_csv


def main(smk):
    decisions = read_decision_files(
        zip(smk.params.decision_cells, smk.input.decisions, strict=True)
    )
    rows = abstention_over_datasets(
        decisions,
        read_context_files(zip(smk.params.context_cells, smk.input.contexts, strict=True)),
        n_resamples=smk.params.bootstrap["n_resamples"],
        seed=smk.params.seed,
        confidence_level=smk.params.bootstrap["confidence_level"],
        question_limits=smk.params.question_limits,
    )
    # the base seed's build of every dataset
    seed = smk.params.seed
    rows_csv(smk.output.metrics, [{**row, SEED: seed} for row in rows], FILE_COLUMNS)
    log.info("%d mean abstention rows over %d cells", len(rows), len(decisions))


run_rule(snakemake, main)  # noqa: F821
