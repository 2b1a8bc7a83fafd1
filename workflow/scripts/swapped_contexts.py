"""Rules qc_contexts and qx_contexts: a condition built from the QC swaps (QC: the swapped
gold passage among hard negatives; QX: the original gold passage and its swapped twin
together), for the questions of the condition it is paired with."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.contexts.paired import load_token_counter
from grabrag.contexts.swapped import swapped_condition_rows
from grabrag.core.io import read_jsonl, write_json, write_jsonl
from grabrag.core.runner import log, run_rule
from grabrag.data.assets import resolve


def main(smk):
    settings, condition = smk.params.contexts, smk.params.condition
    rows, report = swapped_condition_rows(
        condition,
        read_jsonl(smk.input.questions),
        read_jsonl(smk.input.swaps),
        {r["qid"]: r for r in read_jsonl(smk.input.ranking)},
        {p["pid"]: p for p in read_jsonl(smk.input.corpus)},
        read_jsonl(smk.input.paired),
        seed=smk.params.seed,
        counter=load_token_counter(str(resolve(smk.input.tokenizer))),
        n_passages=settings["n_passages"],
        max_tokens=settings["max_context_tokens"],
    )
    write_jsonl(smk.output[condition], rows)
    write_json(smk.output.report, {"dataset": smk.wildcards.dataset, **report})
    log.info("%s: %d %s rows", smk.wildcards.dataset, len(rows), condition)


run_rule(snakemake, main)  # noqa: F821
