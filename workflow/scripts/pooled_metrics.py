"""Rule pooled_metrics: one dataset's metrics over every construction seed's questions
pooled, with paired bootstrap CIs over the pooled questions (tidy CSV)."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.core.runner import log, run_rule
from grabrag.evaluation.evaluate import evaluate
from grabrag.evaluation.inputs import read_context_files, read_decision_files
from grabrag.evaluation.schema import FILE_COLUMNS
from grabrag.evaluation.seeds import pool_seeds
from grabrag.report.tabular import rows_csv


def per_seed(seeds, cells, paths):
    """The input files (seed by seed, each seed's in the order of `cells`) by seed."""
    size = len(cells)
    return {
        seed: list(zip(cells, paths[place * size : (place + 1) * size], strict=True))
        for place, seed in enumerate(seeds)
    }


def main(smk):
    seeds = smk.params.seeds
    decisions = per_seed(seeds, smk.params.decision_cells, list(smk.input.decisions))
    contexts = per_seed(seeds, smk.params.context_cells, list(smk.input.contexts))
    pooled_decisions, pooled_contexts = pool_seeds(
        {seed: read_decision_files(pairs) for seed, pairs in decisions.items()},
        {seed: read_context_files(pairs) for seed, pairs in contexts.items()},
    )
    rows = evaluate(
        pooled_decisions,
        pooled_contexts,
        n_resamples=smk.params.bootstrap["n_resamples"],
        seed=smk.params.seed,
        confidence_level=smk.params.bootstrap["confidence_level"],
        question_limits=smk.params.question_limits,
    )
    rows_csv(smk.output.metrics, rows, FILE_COLUMNS)  # seed empty: pooled over the seeds
    log.info("%d metric rows for %s over seeds %s", len(rows), smk.wildcards.dataset, seeds)


run_rule(snakemake, main)  # noqa: F821
