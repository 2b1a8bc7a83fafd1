"""Rule audit_hwsa (Table 6): HwSA@QC per model x policy on all swaps and on the swaps a
person rated fluent or borderline in the filled audit CSV, with the Q0 -> QC deltas."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.contexts.audit import read_audit_ratings
from grabrag.core.io import read_jsonl
from grabrag.core.runner import log, run_rule
from grabrag.report.audit_tables import audit_hwsa_rows, write_audit_hwsa


def main(smk):
    ratings = read_audit_ratings(smk.input.audit)
    qc_qids = [r["qid"] for r in read_jsonl(smk.input.qc_contexts)]
    decisions = {
        (cell["model"], cell["policy"], cell["condition"]): read_jsonl(path)
        for cell, path in zip(smk.params.decision_cells, smk.input.decisions, strict=True)
    }
    rows = audit_hwsa_rows(
        smk.wildcards.dataset, decisions, ratings, qc_qids, audit_file=smk.input.audit
    )
    write_audit_hwsa(smk.output.table, rows)
    log.info(
        "HwSA@QC on %d audited fluent/borderline swaps of %d rated, %d cells",
        sum(q != "broken" for q in ratings.values()),
        len(ratings),
        len(rows),
    )


run_rule(snakemake, main)  # noqa: F821
