"""Rule metrics: every metric of one dataset with paired bootstrap CIs (tidy CSV)."""

from pathlib import Path

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.evaluate import evaluate_dataset, to_frame
from grabrag.io import atomic_write, read_jsonl
from grabrag.runner import log, run_rule


def main(smk):
    decisions = {}
    for path in map(Path, smk.input.decisions):
        # results/policies/<model>/<dataset>/<condition>/<policy>.jsonl
        decisions[(path.parents[2].name, path.parent.name, path.stem)] = read_jsonl(path)
    contexts = {Path(p).stem: read_jsonl(p) for p in smk.input.contexts}
    rows = evaluate_dataset(
        smk.wildcards.dataset,
        decisions,
        contexts,
        n_resamples=smk.params.bootstrap["n_resamples"],
        seed=smk.params.seed,
        confidence_level=smk.params.bootstrap["confidence_level"],
    )
    frame = to_frame(rows)
    with atomic_write(smk.output.metrics) as handle:
        frame.to_csv(handle, index=False)
    log.info("%d metric rows for %s", len(frame), smk.wildcards.dataset)


run_rule(snakemake, main)  # noqa: F821
