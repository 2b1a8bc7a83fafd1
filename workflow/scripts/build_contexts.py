"""Rules build_contexts (one paired condition's rows) and contexts_report (the report of
every paired condition) for one dataset."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.contexts.paired import PAIRED_CONDITIONS, build_contexts, load_token_counter
from grabrag.core.io import read_jsonl, write_json, write_jsonl
from grabrag.core.runner import log, run_rule
from grabrag.data.assets import resolve


def main(smk):
    settings = smk.params.contexts
    condition = smk.wildcards.get("condition")
    questions = read_jsonl(smk.input.questions)
    corpus = {p["pid"]: p for p in read_jsonl(smk.input.corpus)}
    ranking = {r["qid"]: r for r in read_jsonl(smk.input.ranking)}
    counter = load_token_counter(str(resolve(smk.input.tokenizer)))
    # A setting a condition does not read is not among its params; the defaults below
    # stand in for it and change none of that condition's rows.
    rows, report = build_contexts(
        questions,
        ranking,
        corpus,
        seed=smk.params.seed,
        counter=counter,
        n_passages=settings["n_passages"],
        n_gold_q50=settings.get("n_gold_q50", 0),
        max_tokens=settings.get("max_context_tokens", 0),
        conditions=[condition] if condition else PAIRED_CONDITIONS,
    )
    if condition:
        write_jsonl(smk.output.rows, rows[condition])
        log.info("%s %s: %d rows", smk.wildcards.dataset, condition, len(rows[condition]))
        return
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
