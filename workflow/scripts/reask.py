"""Rule reask: one generation cell's first questions sent again at the audit's concurrency."""

from pathlib import Path

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)
import _job_gpu  # noqa: F401  (claims this job's GPU before any CUDA library loads)
import llama_cpp  # noqa: F401  (first: see grabrag.generation.generator.LLAMA_FIRST)

from grabrag.core.io import job_settings, read_jsonl, stamp_checkpoint, write_jsonl
from grabrag.core.progress import Progress
from grabrag.core.runner import log, run_rule
from grabrag.generation.backends import open_generator
from grabrag.generation.generator import run_cells, settings_from
from grabrag.generation.prompts import CONTEXT_PROMPTS
from grabrag.generation.reask import audit_model, reasked_questions


def main(smk):
    rows = reasked_questions(read_jsonl(smk.input.contexts), smk.params.questions)
    model = audit_model(smk.params.model, smk.params.concurrency)
    generator = open_generator(
        smk.wildcards.model,
        model,
        smk.input.get("model"),
        settings_from(smk.params.generation),
        smk.threads,
        cached=False,
    )
    checkpoint = Path(smk.params.checkpoint)
    stamp_checkpoint(checkpoint, job_settings(smk.params.items(), smk.input), log.warning)
    progress = Progress(total=len(rows) * len(CONTEXT_PROMPTS), log=log.info)
    cells = run_cells(
        generator.complete,
        generator.reset,
        rows,
        CONTEXT_PROMPTS,
        checkpoint,
        progress,
        batcher=generator.batcher,
    )
    write_jsonl(smk.output.reasked, [row for prompt in CONTEXT_PROMPTS for row in cells[prompt]])
    checkpoint.unlink(missing_ok=True)
    log.info(
        "re-asked %d questions x %d prompts at concurrency %d",
        len(rows),
        len(CONTEXT_PROMPTS),
        smk.params.concurrency,
    )


run_rule(snakemake, main)  # noqa: F821
