"""Rule evidential_efficiency: latency, LLM-call accounting and peak memory of EVID /
EVID_CB against naive RAG (P0), with P1 beside it, for one model x dataset (EvidentialRAG
Table 11)."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.core.io import read_json, read_jsonl, write_json
from grabrag.core.runner import log, run_rule
from grabrag.evidential.efficiency import efficiency_summary


def main(smk):
    single_pass = {
        "P0": [row for path in smk.input.p0 for row in read_jsonl(path)],
        "P1": [row for path in smk.input.p1 for row in read_jsonl(path)],
    }
    variants = {}
    for cell, path in zip(smk.params.evidential_cells, smk.input.evidential, strict=True):
        variants.setdefault(cell["policy"], []).extend(read_jsonl(path))
    summary = efficiency_summary(
        single_pass,
        variants,
        read_jsonl(smk.input.cb),
        [read_json(p) for p in smk.input.reports],
    )
    write_json(
        smk.output.efficiency,
        {
            "model": smk.wildcards.model,
            "dataset": smk.wildcards.dataset,
            "conditions": smk.params.conditions,
            **summary,
        },
    )
    for policy, entry in summary["policies"].items():
        log.info(
            "%s: %s s/query, relative cost %s",
            policy,
            entry["seconds_per_query"],
            entry["relative_cost"],
        )


run_rule(snakemake, main)  # noqa: F821
