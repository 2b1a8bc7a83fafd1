"""Rule swaps: one swap (or skip reason) per question and the eligibility summary."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.contexts.audit import (
    SWAP_TABLE_COLUMNS,
    eligibility_summary,
    reference_comparison,
    swap_table,
)
from grabrag.contexts.entity_pool import EntityPool, NerCache
from grabrag.contexts.ner import load_configured_ner, ner_assets
from grabrag.contexts.swaps import build_swaps
from grabrag.core.io import read_json, read_jsonl, write_csv, write_json, write_jsonl
from grabrag.core.runner import log, run_rule


def main(smk):
    questions = read_jsonl(smk.input.questions)
    pool = EntityPool.from_dict(read_json(smk.input.pool))
    ner = NerCache(load_configured_ner(smk.params.ner, *ner_assets(smk)), log=log.info)
    records, _ = build_swaps(questions, ner, seed=smk.params.seed, pool=pool)
    summary = {
        "dataset": smk.wildcards.dataset,
        "seed": smk.params.seed,
        "ner": smk.params.ner["backend"],
        **eligibility_summary(records),
    }
    if any((q.get("extra") or {}).get("reference_swap") for q in questions):
        summary["reference_comparison"] = reference_comparison(records, questions, ner)
    write_jsonl(smk.output.swaps, records)
    write_csv(smk.output.table, SWAP_TABLE_COLUMNS, swap_table(records))
    write_json(smk.output.summary, summary)
    log.info(
        "%s: %d of %d questions QC-eligible, by tier %s, leaks %d",
        smk.wildcards.dataset,
        summary["eligible"],
        summary["questions"],
        summary["by_tier"],
        summary["leaks"],
    )


run_rule(snakemake, main)  # noqa: F821
