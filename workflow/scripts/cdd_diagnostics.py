"""Rule cdd_diagnostics: causal sensitivity, ablations, source control and accuracy per
perturbation type of one model x dataset (grabrag.cdd_runs.diagnostics), from stored rows
only: no language model is loaded."""

from pathlib import Path

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.cdd_runs import diagnostics, diagnostics_frame
from grabrag.io import atomic_write, read_jsonl
from grabrag.runner import log, run_rule


def main(smk):
    conditions = list(smk.params.conditions)
    contexts = {Path(p).stem: read_jsonl(p) for p in smk.input.contexts}
    # results/cdd/<model>/<dataset>/<condition>/traces.jsonl
    traces = {Path(p).parent.name: read_jsonl(p) for p in smk.input.traces} or None
    # results/policies/<model>/<dataset>/<condition>/<policy>.jsonl
    decisions = {(Path(p).parent.name, Path(p).stem): read_jsonl(p) for p in smk.input.decisions}
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
    frame = diagnostics_frame(rows)
    with atomic_write(smk.output.diagnostics) as handle:
        frame.to_csv(handle, index=False)
    log.info("%d diagnostic rows", len(frame))


run_rule(snakemake, main)  # noqa: F821
