"""Rule cdd_generate: CDD's steps for one condition, with the ablations and the perturbed
step-5 reruns when cdd.diagnostics is on (grabrag.cdd.runs.run_traces)."""

import hashlib
import json
from pathlib import Path

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)
import _job_gpu  # noqa: F401  (claims this job's GPU before any CUDA library loads)
import llama_cpp  # noqa: F401  (first: see grabrag.generation.generator.LLAMA_FIRST)

from grabrag.cdd.runs import preflight_calls, run_traces
from grabrag.cdd.schema import CLOSED_BOOK_PRIOR
from grabrag.core.io import job_settings, read_jsonl, stamp_checkpoint, write_jsonl
from grabrag.core.runner import log, run_rule
from grabrag.generation.backends import open_generator
from grabrag.generation.generator import settings_from


def main(smk):
    rows = read_jsonl(smk.input.contexts)
    settings = smk.params.cdd
    parametric, diagnostics = settings["parametric"], settings["diagnostics"]
    gate = settings["gate"]
    # The CB rows are read in both modes: the preflight sizes the longest trace with them.
    cb_rows = read_jsonl(smk.input.cb)
    model = smk.params.model
    # generation.max_tokens is replaced by cdd.step_max_tokens (rules/cdd.smk), so the
    # preflight budget and every call's default limit are the step limit.
    generation = settings_from(smk.params.generation)
    generator = open_generator(
        smk.wildcards.model, model, smk.input.get("model"), generation, smk.threads
    )
    generator.preflight(preflight_calls(rows, cb_rows, generation.max_tokens))

    def complete(messages, *, grammar):
        return generator.complete(messages, grammar=grammar)

    fingerprint = hashlib.sha256(
        json.dumps(
            [dict(smk.params.generation), dict(settings), smk.params.code], sort_keys=True
        ).encode()
    ).hexdigest()[:16]
    checkpoint = Path(smk.params.checkpoint)
    stamp_checkpoint(checkpoint, job_settings(smk.params.items(), smk.input), log.warning)
    log.info(
        "%d questions, parametric=%s, diagnostics=%s, gate=%s, step_max_tokens=%d",
        len(rows),
        parametric,
        diagnostics,
        gate,
        generation.max_tokens,
    )
    traces = run_traces(
        complete,
        generator.reset,
        rows,
        cb_rows if parametric == CLOSED_BOOK_PRIOR else None,
        checkpoint,
        parametric=parametric,
        diagnostics=diagnostics,
        gate=gate,
        fingerprint=fingerprint,
        log=log.info,
        batcher=generator.batcher,
    )
    write_jsonl(smk.output.traces, traces)
    checkpoint.unlink(missing_ok=True)
    calls = sum(t["llm_calls"] for t in traces)
    reused = sum(t["reused_calls"] for t in traces)
    log.info(
        "%d questions: %d LLM calls (%.2f per question), %d reused, %.1f s of calls",
        len(traces),
        calls,
        calls / len(traces) if traces else 0.0,
        reused,
        sum(t["question_seconds"] for t in traces),
    )


run_rule(snakemake, main)  # noqa: F821
