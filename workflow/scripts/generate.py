"""Rules generate_context_prompts / generate_closed_book: write one condition's cells."""

from pathlib import Path

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)
import _job_gpu  # noqa: F401  (claims this job's GPU before any CUDA library loads)
import llama_cpp  # noqa: F401  (first: see grabrag.generation.generator.LLAMA_FIRST)

from grabrag.core.io import job_settings, read_jsonl, stamp_checkpoint, write_jsonl
from grabrag.core.progress import Progress
from grabrag.core.runner import log, run_rule
from grabrag.generation.backends import open_generator
from grabrag.generation.generator import run_cells, settings_from
from grabrag.generation.prompts import messages_for


def main(smk):
    prompts = list(smk.output.keys())
    rows = read_jsonl(smk.input.contexts)
    model = smk.params.model
    generator = open_generator(
        smk.wildcards.model,
        model,
        smk.input.get("model"),
        settings_from(smk.params.generation),
        smk.threads,
    )
    generator.preflight(
        (f"question {row['qid']} ({prompt})", messages_for(prompt, row["question"], row["context"]))
        for row in rows
        for prompt in prompts
    )
    checkpoint = Path(smk.params.checkpoint)
    stamp_checkpoint(checkpoint, job_settings(smk.params.items(), smk.input), log.warning)
    progress = Progress(total=len(rows) * len(prompts), log=log.info)
    cells = run_cells(
        generator.complete,
        generator.reset,
        rows,
        prompts,
        checkpoint,
        progress,
        batcher=generator.batcher,
    )
    for prompt in prompts:
        write_jsonl(smk.output[prompt], cells[prompt])
    checkpoint.unlink(missing_ok=True)


run_rule(snakemake, main)  # noqa: F821
