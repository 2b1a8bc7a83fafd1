"""Rule evidential_evaluate: the EvidentialRAG evaluator's judgement of every passage of one
model x dataset x condition (k calls per question, back to back; see
grabrag.evidential.generator_pass for the call accounting)."""

import time
from pathlib import Path

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)
import _job_gpu  # noqa: F401  (claims this job's GPU before any CUDA library loads)
import llama_cpp  # noqa: F401  (first: see grabrag.generation.generator.LLAMA_FIRST)

from grabrag.core.io import job_settings, read_jsonl, stamp_checkpoint, write_json, write_jsonl
from grabrag.core.progress import Progress
from grabrag.core.runner import log, run_rule
from grabrag.evidential.efficiency import peak_memory_mb
from grabrag.evidential.evaluator_pass import (
    evaluation_report,
    preflight_messages,
    run_evaluations,
)
from grabrag.generation.backends import open_generator
from grabrag.generation.generator import GenerationSettings, settings_from


def main(smk):
    started = time.perf_counter()
    rows = read_jsonl(smk.input.contexts)
    evaluator = smk.params.evaluator
    max_tokens = smk.params.max_tokens
    settings = settings_from(smk.params.generation)
    # The preflight budget is n_ctx - the evaluator's own max_tokens.
    settings = GenerationSettings(
        n_ctx=settings.n_ctx,
        max_tokens=max_tokens,
        temperature=settings.temperature,
        seed=settings.seed,
    )
    generator = open_generator(
        smk.params.evaluator_name,
        evaluator,
        smk.input.get("evaluator"),
        settings,
        smk.threads,
    )
    generator.preflight(call for row in rows for call in preflight_messages(row, max_tokens))
    checkpoint = Path(smk.params.checkpoint)
    stamp_checkpoint(checkpoint, job_settings(smk.params.items(), smk.input), log.warning)
    progress = Progress(total=sum(len(r["passages"]) for r in rows), log=log.info)
    out = run_evaluations(
        generator.complete,
        generator.reset,
        rows,
        checkpoint,
        max_tokens,
        progress,
        batcher=generator.batcher,
    )
    write_jsonl(smk.output.evaluations, out)
    write_json(
        smk.output.report,
        {
            "model": smk.wildcards.model,
            "dataset": smk.wildcards.dataset,
            "condition": smk.wildcards.condition,
            "evaluator": smk.params.evaluator_name,
            **evaluation_report(out),
            "job_seconds": round(time.perf_counter() - started, 3),
            "peak_memory_mb": peak_memory_mb(),
        },
    )
    checkpoint.unlink(missing_ok=True)


run_rule(snakemake, main)  # noqa: F821
