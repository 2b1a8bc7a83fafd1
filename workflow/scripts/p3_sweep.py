"""Rule p3_sweep (Table 12): P3's answer rate over F1 thresholds x confidence cutoffs,
from the stored P1 and CB generations (no model call)."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.io import read_jsonl, write_csv
from grabrag.policies import p3_sweep
from grabrag.runner import run_rule


def main(smk):
    rows = p3_sweep(read_jsonl(smk.input.p1), read_jsonl(smk.input.cb))
    write_csv(smk.output.sweep, list(rows[0]), rows)


run_rule(snakemake, main)  # noqa: F821
