"""Rule qc_contexts: the QC condition, the swapped gold passage among hard negatives."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.assets import resolve
from grabrag.contexts import load_token_counter
from grabrag.io import read_jsonl, write_json, write_jsonl
from grabrag.runner import log, run_rule
from grabrag.swap_contexts import build_qc_rows


def main(smk):
    settings = smk.params.contexts
    questions = read_jsonl(smk.input.questions)
    rows, report = build_qc_rows(
        questions,
        read_jsonl(smk.input.swaps),
        {r["qid"]: r for r in read_jsonl(smk.input.ranking)},
        {p["pid"]: p for p in read_jsonl(smk.input.corpus)},
        seed=smk.params.seed,
        counter=load_token_counter(str(resolve(smk.input.tokenizer))),
        n_passages=settings["n_passages"],
        max_tokens=settings["max_context_tokens"],
    )
    # QC stays a subset of the paired question set (a question dropped from Q0 for too
    # few hard negatives is dropped here too).
    paired = {r["qid"] for r in read_jsonl(smk.input.paired)}
    unpaired = [r["qid"] for r in rows if r["qid"] not in paired]
    rows = [r for r in rows if r["qid"] in paired]
    write_jsonl(smk.output.QC, rows)
    write_json(
        smk.output.report,
        {
            "dataset": smk.wildcards.dataset,
            **report,
            "qc_rows": len(rows),
            "dropped_not_in_paired_set": unpaired,
        },
    )
    log.info("%s: %d QC rows", smk.wildcards.dataset, len(rows))


run_rule(snakemake, main)  # noqa: F821
