"""Rule truthfulqa_questions: TruthfulQA (the hub's or BIG-bench's) -> the probe's sampled
questions."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.core.io import write_json, write_jsonl
from grabrag.core.runner import log, run_rule
from grabrag.data.assets import resolve
from grabrag.data.truthfulqa import FORMATS, sample_questions


def main(smk):
    source = resolve(smk.input.source)
    read = FORMATS[smk.params.format](source)
    questions = sample_questions(read.questions, smk.params.n_questions, smk.params.seed)
    write_jsonl(smk.output.questions, [q.as_dict() for q in questions])
    report = {
        "source": str(source),
        "format": smk.params.format,
        "rows": len(read.questions) + len(read.malformed),
        "malformed_skipped": len(read.malformed),
        "malformed": read.malformed,
        "questions": len(questions),
    }
    write_json(smk.output.report, report)
    log.info(
        "TruthfulQA: %d questions of %d readable rows; %d malformed rows skipped",
        len(questions),
        len(read.questions),
        len(read.malformed),
    )


run_rule(snakemake, main)  # noqa: F821
