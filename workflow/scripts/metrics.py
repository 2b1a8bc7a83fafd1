"""Rule metrics: every metric of one dataset with paired bootstrap CIs (tidy CSV)."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.evaluate import evaluate, read_context_files, read_decision_files, to_frame
from grabrag.io import atomic_write
from grabrag.runner import log, run_rule


def main(smk):
    rows = evaluate(
        read_decision_files(zip(smk.params.decision_cells, smk.input.decisions, strict=True)),
        read_context_files(zip(smk.params.context_cells, smk.input.contexts, strict=True)),
        n_resamples=smk.params.bootstrap["n_resamples"],
        seed=smk.params.seed,
        confidence_level=smk.params.bootstrap["confidence_level"],
    )
    frame = to_frame(rows)
    with atomic_write(smk.output.metrics) as handle:
        frame.to_csv(handle, index=False)
    log.info("%d metric rows for %s", len(frame), smk.wildcards.dataset)


run_rule(snakemake, main)  # noqa: F821
