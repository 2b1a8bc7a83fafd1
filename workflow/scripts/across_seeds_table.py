"""Rule across_seeds_table: one table across construction seeds, mean +/- sd over the
seeds' copies beside the table over the seeds' questions pooled."""

from pathlib import Path

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)
import polars as pl

from grabrag.core.runner import log, run_rule
from grabrag.report.across_seeds import across_seeds
from grabrag.report.specs import Sources, table_spec
from grabrag.report.tables import write_table
from grabrag.report.tabular import TIDY_SCHEMA, listed_in, tidy_frame


def main(smk):
    name = smk.wildcards.table
    per_seed = [pl.read_csv(path, schema=TIDY_SCHEMA) for path in smk.input.tables]
    pooled = pl.DataFrame(schema=TIDY_SCHEMA)  # a sweep or diagnostics: per seed only
    if smk.params.pooled:
        files = {"metrics": list(smk.input.metrics)}
        sources = Sources(files, smk.params.cells, smk.params.settings)
        with listed_in(smk.params.order["models"], smk.params.order["datasets"]):
            pooled = tidy_frame(table_spec(name).build(sources), name)
    table = across_seeds(list(zip(smk.params.seeds, per_seed, strict=True)), pooled)
    write_table(table, Path(smk.output.csv).with_suffix(""), smk.params.caption)
    log.info("%s across seeds %s: %d numbers", name, smk.params.seeds, len(table))


run_rule(snakemake, main)  # noqa: F821
