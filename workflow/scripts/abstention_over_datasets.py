"""Rule abstention_over_datasets: Figure 2's abstention rates averaged over the datasets,
with bootstrap CIs from each dataset's own resamples (tidy CSV)."""

from pathlib import Path

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.evaluate import abstention_over_datasets, to_frame
from grabrag.io import atomic_write, read_jsonl
from grabrag.runner import log, run_rule


def main(smk):
    decisions = {}
    for path in map(Path, smk.input.decisions):
        # results/policies/<model>/<dataset>/<condition>/<policy>.jsonl
        key = (path.parents[2].name, path.parents[1].name, path.parent.name, path.stem)
        decisions[key] = read_jsonl(path)
    contexts = {(Path(p).parent.name, Path(p).stem): read_jsonl(p) for p in smk.input.contexts}
    rows = abstention_over_datasets(
        decisions,
        contexts,
        n_resamples=smk.params.bootstrap["n_resamples"],
        seed=smk.params.seed,
        confidence_level=smk.params.bootstrap["confidence_level"],
    )
    frame = to_frame(rows)
    with atomic_write(smk.output.metrics) as handle:
        frame.to_csv(handle, index=False)
    log.info("%d mean abstention rows over %d cells", len(frame), len(decisions))


run_rule(snakemake, main)  # noqa: F821
