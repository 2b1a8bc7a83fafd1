"""Rule nli: verifier labels for every passage of the questions P4 can reach."""

from pathlib import Path

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)
import _job_gpu  # noqa: F401  (claims this job's GPU before any CUDA library loads)
import llama_cpp  # noqa: F401  (first: see grabrag.generation.generator.LLAMA_FIRST)

from grabrag.core.io import read_jsonl, write_jsonl
from grabrag.core.runner import log, run_rule
from grabrag.data.assets import resolve_given
from grabrag.generation.backends import verifier_endpoint
from grabrag.policies.nli import lazy_verifier, nli_report, nli_rows


def main(smk):
    nli, model = smk.params.nli, smk.params.model
    endpoint = verifier_endpoint(nli, model)
    # the verifier's weights, or (labelling through a served generator) its canary file
    given = smk.input.get("verifier")
    verifier = lazy_verifier(
        nli["backend"],
        None if endpoint else resolve_given(given),
        n_threads=smk.threads,
        device=nli["device"],
        batch_size=nli["batch_size"],
        n_gpu_layers=model["n_gpu_layers"],
        chat_format=model["chat_format"],
        allow_cpu=model["allow_cpu"],
        batch=endpoint["concurrency"] if endpoint else model["batch"],
        seed=smk.params.seed,
        name=nli["asset"] or model.get("asset") or endpoint["model"],
        endpoint=endpoint,
        canary=Path(given) if endpoint else None,
    )
    rows = nli_rows(
        read_jsonl(smk.input.contexts),
        read_jsonl(smk.input.cb),
        verifier,
        cutoff=smk.params.cutoff,
        progress=log.info,
    )
    write_jsonl(smk.output.nli, rows)
    log.info("%s", nli_report(rows))


run_rule(snakemake, main)  # noqa: F821
