"""Rule qx_contexts: the QX condition, the original gold passage and its swapped twin
together among hard negatives, for exactly the questions of QC."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.assets import resolve
from grabrag.contexts import load_token_counter
from grabrag.io import read_jsonl, write_json, write_jsonl
from grabrag.runner import log, run_rule
from grabrag.swap_contexts import build_qx_rows


def main(smk):
    settings = smk.params.contexts
    rows, report = build_qx_rows(
        read_jsonl(smk.input.questions),
        read_jsonl(smk.input.swaps),
        {r["qid"]: r for r in read_jsonl(smk.input.ranking)},
        {p["pid"]: p for p in read_jsonl(smk.input.corpus)},
        seed=smk.params.seed,
        counter=load_token_counter(str(resolve(smk.input.tokenizer))),
        n_passages=settings["n_passages"],
        max_tokens=settings["max_context_tokens"],
    )
    # QX holds exactly QC's questions: it needs one clean hard negative fewer, so on its
    # own it could keep a question that QC (and so HwSA's pairing) lacks.
    paired = {r["qid"] for r in read_jsonl(smk.input.paired)}
    unpaired = [r["qid"] for r in rows if r["qid"] not in paired]
    rows = [r for r in rows if r["qid"] in paired]
    write_jsonl(smk.output.QX, rows)
    write_json(
        smk.output.report,
        {
            "dataset": smk.wildcards.dataset,
            **report,
            "qx_rows": len(rows),
            "dropped_not_in_qc": unpaired,
        },
    )
    log.info("%s: %d QX rows", smk.wildcards.dataset, len(rows))


run_rule(snakemake, main)  # noqa: F821
