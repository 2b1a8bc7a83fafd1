"""Rule reask_table: per model, how many re-asked calls came back as the cells' own."""

from pathlib import Path

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.core.io import read_jsonl
from grabrag.core.runner import log, run_rule
from grabrag.generation.prompts import CONTEXT_PROMPTS
from grabrag.generation.reask import pooled_agreement
from grabrag.report.reask_table import agreement_table
from grabrag.report.tables import write_table


def main(smk):
    # the generation files come cell by cell, one per context prompt
    own = [read_jsonl(path) for path in smk.input.cells]
    per_cell = len(CONTEXT_PROMPTS)
    counts = pooled_agreement(
        smk.params.reask_cells,
        [read_jsonl(path) for path in smk.input.reasked],
        [sum(own[i : i + per_cell], []) for i in range(0, len(own), per_cell)],
    )
    decoding = smk.params.decoding
    table = agreement_table(
        counts,
        {m: d["side_by_side"] for m, d in decoding.items()},
        smk.params.concurrency,
        served=[m for m, d in decoding.items() if d["served"]],
    )
    write_table(table, Path(smk.output.csv).with_suffix(""), smk.params.caption)
    log.info("re-ask agreement: %s", {m: c["calls"] for m, c in counts.items()})


run_rule(snakemake, main)  # noqa: F821
