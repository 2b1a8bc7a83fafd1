"""Rule reproduction: the papers' published numbers against this run's, and their claims."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)
import polars as pl

from grabrag.core.runner import log, run_rule
from grabrag.report.reproduction import (
    RunScope,
    cells_in_note,
    published_numbers,
    reproduction_tables,
)
from grabrag.report.tabular import TIDY_SCHEMA, write_table


def main(smk):
    tidy = (
        pl.concat(
            [pl.read_csv(path, schema=TIDY_SCHEMA) for path in smk.input.tables],
            how="vertical",
        )
        if smk.input.tables
        else pl.DataFrame(schema=TIDY_SCHEMA)
    )
    scope = RunScope(
        frozenset(smk.params.models),
        frozenset(smk.params.datasets),
        cells_in_note(smk.params.seed_sensitivity),
    )
    numbers, claims = reproduction_tables(published_numbers(), tidy, scope)
    for name, table in zip(("reproduction", "reproduction_claims"), (numbers, claims), strict=True):
        stem = smk.output[f"{name}_csv"].removesuffix(".csv")
        write_table(table, stem, smk.params.captions[name])
    log.info("%s %s", numbers.note, [row["Verdict"] for row in claims.rows])


run_rule(snakemake, main)  # noqa: F821
