"""Rule tables: the paper's tables as CSV + Markdown + LaTeX + a tidy numeric CSV."""

from pathlib import Path

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.core.runner import log, run_rule
from grabrag.report import tables as t
from grabrag.report.tabular import listed_in


def main(smk):
    files = {name: list(smk.input[name]) for name in smk.input.keys()}
    settings = {
        "fusion": smk.params.fusion,
        "seed_sensitivity": smk.params.seed_sensitivity,
        "paper_outputs": smk.params.paper_outputs,
    }
    sources = t.Sources(files, smk.params.cells, settings)
    decoding = t.decoding_note(smk.params.decoding)
    with listed_in(smk.params.order["models"], smk.params.order["datasets"]):
        for name, caption in smk.params.captions.items():
            table = t.build_table(name, sources)
            if decoding:
                t.with_note(table, f"{table.note} {decoding}".strip())
            t.write_table(table, Path(smk.output[name]).with_suffix(""), caption)
            log.info("%s: %d rows", name, len(table))


run_rule(snakemake, main)  # noqa: F821
