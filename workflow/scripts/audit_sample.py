"""Rule audit_sample: the questions of one dataset's QC rows drawn for a person to rate
(GRAB-RAG Appendix C's quality audit)."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.contexts.audit import audit_sample, write_audit_csv
from grabrag.core.io import read_jsonl
from grabrag.core.runner import log, run_rule


def main(smk):
    rows = audit_sample(
        read_jsonl(smk.input.swaps),
        read_jsonl(smk.input.qc),
        smk.params.audit_size,
        smk.params.seed,
    )
    write_audit_csv(smk.output.audit, rows)
    log.info("%s: %d QC questions drawn for the audit", smk.wildcards.dataset, len(rows))


run_rule(snakemake, main)  # noqa: F821
