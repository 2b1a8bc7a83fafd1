"""Rule figure: one figure as PDF + PNG."""

from pathlib import Path

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.core.runner import run_rule
from grabrag.report.figures import save
from grabrag.report.specs import Sources, figure_spec
from grabrag.report.tabular import listed_in


def main(smk):
    files = {name: list(smk.input[name]) for name in smk.input.keys()}
    sources = Sources(files, smk.params.cells, smk.params.settings)
    with listed_in(smk.params.order["models"], smk.params.order["datasets"]):
        fig = figure_spec(smk.wildcards.figure).build(sources)
    save(fig, Path(smk.output.pdf).with_suffix(""))


run_rule(snakemake, main)  # noqa: F821
