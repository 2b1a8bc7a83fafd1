"""Rule baselines_generate: the prompt-only baselines (CAI, SHAM, REFLECT, FILTER) of one
condition, back to back per question, as generation rows
(grabrag.generation.generator.run_cells)."""

from pathlib import Path

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)
import _job_gpu  # noqa: F401  (claims this job's GPU before any CUDA library loads)
import llama_cpp  # noqa: F401  (first: see grabrag.generation.generator.LLAMA_FIRST)

from grabrag.cdd.baselines import baseline_messages, grammar_for_messages
from grabrag.core.io import job_settings, read_jsonl, stamp_checkpoint, write_jsonl
from grabrag.core.progress import Progress
from grabrag.core.runner import log, run_rule
from grabrag.generation.backends import open_generator
from grabrag.generation.generator import cell_report, run_cells, settings_from


def main(smk):
    names = list(smk.output.keys())
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
        (
            f"question {row['qid']} ({name})",
            baseline_messages(name, row["question"], row["context"]),
        )
        for row in rows
        for name in names
    )
    checkpoint = Path(smk.params.checkpoint)
    stamp_checkpoint(checkpoint, job_settings(smk.params.items(), smk.input), log.warning)
    progress = Progress(total=len(rows) * len(names), log=log.info)

    def complete(messages):
        # REFLECT and FILTER reason first: each baseline's grammar follows its format
        return generator.complete(messages, grammar=grammar_for_messages(messages))

    cells = run_cells(
        complete,
        generator.reset,
        rows,
        names,
        checkpoint,
        progress,
        messages=baseline_messages,
        batcher=generator.batcher,
    )
    for name in names:
        write_jsonl(smk.output[name], cells[name])
        log.info("%s: %s", name, cell_report(cells[name]))
    checkpoint.unlink(missing_ok=True)


run_rule(snakemake, main)  # noqa: F821
