"""Rule evidential_sweep: the lambda x (tau1, tau2) grid and the ablations of EVID and
EVID_CB for one model x dataset, from stored evaluations only (no LLM call)."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.core.io import read_jsonl, write_csv
from grabrag.core.runner import log, run_rule
from grabrag.evidential.routing import sweep_grid
from grabrag.evidential.sweep_tables import SWEEP_COLUMNS, sweep_table


def main(smk):
    conditions = smk.params.conditions
    evaluations = {c: read_jsonl(p) for c, p in zip(conditions, smk.input.evaluations, strict=True)}
    gold = {
        c: {r["qid"]: r["answers"] for r in read_jsonl(p)}
        for c, p in zip(conditions, smk.input.contexts, strict=True)
    }
    fusion = smk.params.fusion
    lams, taus = sweep_grid(
        smk.params.grid["lambda_grid"],
        smk.params.grid["tau_grid"],
        fusion["lam"],
        fusion["tau1"],
        fusion["tau2"],
    )
    rows = sweep_table(
        evaluations,
        gold,
        read_jsonl(smk.input.cb),
        lams=lams,
        taus=taus,
        ablation_lam=fusion["lam"],
        merge_f1=fusion["merge_f1"],
    )
    write_csv(smk.output.sweep, SWEEP_COLUMNS, rows)
    log.info("%d sweep rows for %s/%s", len(rows), smk.wildcards.model, smk.wildcards.dataset)


run_rule(snakemake, main)  # noqa: F821
