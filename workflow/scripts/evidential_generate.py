"""Rule evidential_generate: fuse the stored evaluations (EVID; EVID_CB adds the closed-book
answer as a source), route, and make one generator call per question and variant."""

import time
from pathlib import Path

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)
import _job_gpu  # noqa: F401  (claims this job's GPU before any CUDA library loads)
import llama_cpp  # noqa: F401  (first: see grabrag.generation.generator.LLAMA_FIRST)

from grabrag.core.io import job_settings, read_jsonl, stamp_checkpoint, write_json, write_jsonl
from grabrag.core.progress import Progress
from grabrag.core.runner import log, run_rule
from grabrag.evidential.efficiency import peak_memory_mb
from grabrag.evidential.generator_pass import (
    generation_preflight,
    generation_report,
    run_generation,
)
from grabrag.generation.backends import open_generator
from grabrag.generation.generator import settings_from


def main(smk):
    started = time.perf_counter()
    variants = [key for key in smk.output.keys() if key != "report"]
    rows = read_jsonl(smk.input.contexts)
    evaluations = read_jsonl(smk.input.evaluations)
    cb = read_jsonl(smk.input.cb)
    fusion = smk.params.fusion
    model = smk.params.model
    generator = open_generator(
        smk.wildcards.model,
        model,
        smk.input.get("model"),
        settings_from(smk.params.generation),
        smk.threads,
    )
    generator.preflight(generation_preflight(rows, evaluations, cb, variants, fusion))
    checkpoint = Path(smk.params.checkpoint)
    stamp_checkpoint(checkpoint, job_settings(smk.params.items(), smk.input), log.warning)
    progress = Progress(total=len(rows) * len(variants), log=log.info)
    out = run_generation(
        generator.complete,
        generator.reset,
        rows,
        evaluations,
        cb,
        variants,
        fusion,
        checkpoint,
        progress,
        batcher=generator.batcher,
    )
    for variant in variants:
        write_jsonl(smk.output[variant], out[variant])
    write_json(
        smk.output.report,
        {
            "model": smk.wildcards.model,
            "dataset": smk.wildcards.dataset,
            "condition": smk.wildcards.condition,
            "fusion": fusion,
            "variants": {variant: generation_report(out[variant]) for variant in variants},
            "job_seconds": round(time.perf_counter() - started, 3),
            "peak_memory_mb": peak_memory_mb(),
        },
    )
    checkpoint.unlink(missing_ok=True)


run_rule(snakemake, main)  # noqa: F821
