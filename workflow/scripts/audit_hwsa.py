"""Rule audit_hwsa (Table 6): HwSA@QC on all swaps and on the swaps a person rated
fluent or borderline in the filled audit CSV."""

from pathlib import Path

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.io import read_jsonl, write_csv
from grabrag.metrics import answer_rate
from grabrag.runner import log, run_rule
from grabrag.swaps import read_audit


def main(smk):
    keep = set(read_audit(smk.input.audit))
    rows = []
    for cell in map(Path, smk.input.cells):
        generations = read_jsonl(cell)
        n_all, hwsa_all = answer_rate(generations)
        n_kept, hwsa_kept = answer_rate(generations, keep)
        rows.append(
            {
                "model": cell.parents[2].name,
                "prompt": cell.stem,
                "n_all": n_all,
                "hwsa_all": round(hwsa_all, 4),
                "n_fluent_or_borderline": n_kept,
                "hwsa_fluent_or_borderline": round(hwsa_kept, 4),
            }
        )
    write_csv(smk.output.table, list(rows[0]), rows)
    log.info("HwSA@QC on %d audited-clean swaps written for %d cells", len(keep), len(rows))


run_rule(snakemake, main)  # noqa: F821
