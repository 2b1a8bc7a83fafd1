"""Rule prepare_data: adapter -> filters -> seeded sample -> questions, corpus, report."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.core.io import write_json, write_jsonl
from grabrag.core.runner import log, run_rule
from grabrag.data.assets import resolve
from grabrag.data.datasets import build_dataset, read_dataset


def main(smk):
    spec = smk.params.dataset
    source = resolve(smk.input.source)
    output = read_dataset(smk.wildcards.dataset, spec["adapter"], source)
    questions, corpus, report = build_dataset(
        output,
        n_questions=spec["n_questions"],
        seed=smk.params.seed,
        max_answer_tokens=spec["max_answer_tokens"],
        corpus_max_passages=spec["corpus_max_passages"],
    )
    report = {"dataset": smk.wildcards.dataset, "adapter": spec["adapter"], **report}
    write_jsonl(smk.output.questions, questions)
    write_jsonl(smk.output.corpus, corpus)
    write_json(smk.output.report, report)
    log.info(
        "%s: %d questions, %d corpus passages; excluded %s",
        smk.wildcards.dataset,
        len(questions),
        len(corpus),
        report["excluded"],
    )


run_rule(snakemake, main)  # noqa: F821
