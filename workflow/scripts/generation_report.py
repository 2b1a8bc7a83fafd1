"""Rule generation_report: parse-status counts per cell of one model x dataset."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.core.io import read_jsonl, write_json
from grabrag.core.runner import log, run_rule
from grabrag.generation.generator import cell_report


def main(smk):
    cells = {
        f"{cell['condition']}/{cell['prompt']}": cell_report(read_jsonl(path))
        for cell, path in zip(smk.params.cells, smk.input.cells, strict=True)
    }
    failed = sum(c["parse_status"]["failed"] for c in cells.values())
    report = {
        "model": smk.wildcards.model,
        "dataset": smk.wildcards.dataset,
        "parse_failures": failed,
        "cells": cells,
    }
    write_json(smk.output.report, report)
    log.info("%d cells, %d unparseable outputs", len(cells), failed)


run_rule(snakemake, main)  # noqa: F821
