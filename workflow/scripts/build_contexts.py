"""Rule build_contexts: Q100, Q50, Q0 and Qclosed rows for one dataset."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.contexts.paired import PAIRED_CONDITIONS, build_contexts, load_token_counter
from grabrag.core.io import read_jsonl, write_json, write_jsonl
from grabrag.core.runner import log, run_rule
from grabrag.data.assets import resolve


def main(smk):
    settings = smk.params.contexts
    questions = read_jsonl(smk.input.questions)
    corpus = {p["pid"]: p for p in read_jsonl(smk.input.corpus)}
    ranking = {r["qid"]: r for r in read_jsonl(smk.input.ranking)}
    counter = load_token_counter(str(resolve(smk.input.tokenizer)))
    rows, report = build_contexts(
        questions,
        ranking,
        corpus,
        seed=smk.params.seed,
        counter=counter,
        n_passages=settings["n_passages"],
        n_gold_q50=settings["n_gold_q50"],
        max_tokens=settings["max_context_tokens"],
    )
    for condition in PAIRED_CONDITIONS:
        write_jsonl(smk.output[condition], rows[condition])
    report = {
        "dataset": smk.wildcards.dataset,
        "tokenizer": f"{type(counter.tokenizer).__name__} of asset {smk.params.tokenizer}",
        **report,
    }
    write_json(smk.output.report, report)
    log.info(
        "%s: %d questions in every condition, %d dropped (too few hard negatives)",
        smk.wildcards.dataset,
        report["kept"],
        len(report["dropped_insufficient_hard_negatives"]),
    )


run_rule(snakemake, main)  # noqa: F821
