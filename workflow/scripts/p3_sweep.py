"""Rule p3_sweep (Table 12): P3's HwSA@QC, FAC@Q100 and Ans@Q100 for every F1 threshold x
confidence cutoff, from the stored P1 and CB generations (no model call)."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.core.io import read_jsonl, write_csv
from grabrag.core.runner import run_rule
from grabrag.evaluation.p3_sweep import p3_sweep_rows


def main(smk):
    gold = {r["qid"]: r["answers"] for r in read_jsonl(smk.input.q100)}
    p1 = {"Q100": read_jsonl(smk.input.p1_q100)}
    if "p1_qc" in smk.input.keys():  # a config without the QC condition has no HwSA column
        p1["QC"] = read_jsonl(smk.input.p1_qc)
    rows = p3_sweep_rows(
        p1,
        read_jsonl(smk.input.cb),
        read_jsonl(smk.input.p1_decisions),
        gold,
        smk.params.grid["thresholds"],
        smk.params.grid["cutoffs"],
    )
    write_csv(smk.output.sweep, list(rows[0]), rows)


run_rule(snakemake, main)  # noqa: F821
