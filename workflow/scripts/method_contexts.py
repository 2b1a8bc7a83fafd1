"""Rule method_contexts: a condition's context rows among its dataset's first N questions,
for a method that runs on those only (evidential.n_questions, cdd.n_questions)."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.contexts.paired import first_questions
from grabrag.core.io import read_jsonl, write_jsonl
from grabrag.core.runner import log, run_rule


def main(smk):
    rows = read_jsonl(smk.input.rows)
    kept = first_questions(rows, int(smk.wildcards.questions), smk.input.rows)
    write_jsonl(smk.output.rows, kept)
    log.info(
        "%d of %d rows: those of the first %s questions",
        len(kept),
        len(rows),
        smk.wildcards.questions,
    )


run_rule(snakemake, main)  # noqa: F821
