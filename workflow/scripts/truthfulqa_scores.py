"""Rule truthfulqa_scores: one model's TruthfulQA probe decisions -> their outcomes."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)
import _job_gpu  # noqa: F401  (claims this job's GPU before any CUDA library loads)

from grabrag.core.io import read_jsonl, write_jsonl
from grabrag.core.runner import log, run_rule
from grabrag.data.assets import resolve
from grabrag.evaluation.entailment import nli_scorer
from grabrag.scoring.truthfulness import NLI, TokenF1Scorer, score_decisions


def main(smk):
    nli = smk.params.nli
    if smk.params.scorer == NLI:
        scorer = nli_scorer(
            resolve(smk.input.nli),
            name=nli["asset"],
            batch_size=nli["batch_size"],
            device=nli["device"],
        )
    else:
        scorer = TokenF1Scorer()
    decisions = [
        (cell, path, read_jsonl(path))
        for cell, path in zip(smk.params.cells, smk.input.decisions, strict=True)
    ]
    rows = score_decisions(decisions, read_jsonl(smk.input.questions), scorer)
    write_jsonl(smk.output.scores, rows)
    counts = {}
    for row in rows:
        counts[row["outcome"]] = counts.get(row["outcome"], 0) + 1
    log.info("scored %d decisions with %s: %s", len(rows), scorer.name, counts)


run_rule(snakemake, main)  # noqa: F821
