"""Rule table: one table as CSV + Markdown + LaTeX + a tidy numeric CSV."""

from pathlib import Path

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.core.runner import log, run_rule
from grabrag.report.specs import Sources, table_spec
from grabrag.report.table_cells import with_note
from grabrag.report.tables import decoding_note, served_note, write_table
from grabrag.report.tabular import listed_in


def main(smk):
    files = {name: list(smk.input[name]) for name in smk.input.keys()}
    sources = Sources(files, smk.params.cells, smk.params.settings)
    with listed_in(smk.params.order["models"], smk.params.order["datasets"]):
        table = table_spec(smk.wildcards.table).build(sources)
    notes = " ".join(
        n for n in (decoding_note(smk.params.decoding), served_note(smk.params.served)) if n
    )
    if notes:
        with_note(table, f"{table.note} {notes}".strip())
    write_table(table, Path(smk.output.csv).with_suffix(""), smk.params.caption)
    log.info("%s: %d rows", smk.wildcards.table, len(table))


run_rule(snakemake, main)  # noqa: F821
