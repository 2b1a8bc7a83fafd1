"""Rule cost_ledger: the run's model calls per model and stage, beside the plan's."""

from pathlib import Path

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.core.io import read_jsonl
from grabrag.core.runner import log, run_rule
from grabrag.evaluation.ledger import ledger
from grabrag.report.ledger_table import ledger_table
from grabrag.report.tabular import write_table


def main(smk):
    files = smk.params.files
    totals = ledger((f["stage"], f["model"], read_jsonl(f["file"])) for f in files)
    table = ledger_table(totals, smk.params.models, smk.params.planned)
    write_table(table, Path(smk.output.csv).with_suffix(""), smk.params.caption)
    log.info("cost ledger over %d files: %d rows", len(files), len(table))


run_rule(snakemake, main)  # noqa: F821
