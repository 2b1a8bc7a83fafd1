"""Rule policy: one policy's decisions for one cell, from stored outputs only.

This script loads no language model: P3 and P4 reuse the P1 and CB generations (and the
NLI verdicts), as the paper specifies.
"""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.core.io import read_jsonl, write_jsonl
from grabrag.core.registry import decide, with_cell
from grabrag.core.runner import log, run_rule


def main(smk):
    inputs = {key: read_jsonl(path) for key, path in smk.input.items()}
    cell = smk.wildcards
    rows = with_cell(
        decide(cell.policy, inputs, smk.params.settings),
        cell.model,
        cell.dataset,
        cell.condition,
        cell.policy,
    )
    write_jsonl(smk.output.decisions, rows)
    answered = sum(r["decision"] == "answer" for r in rows)
    log.info("%s: %d of %d answered", smk.wildcards.policy, answered, len(rows))


run_rule(snakemake, main)  # noqa: F821
