"""Rule nli: verifier labels for every passage of the questions P4 can reach."""

from pathlib import Path

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)
import _job_gpu  # noqa: F401  (claims this job's GPU before any CUDA library loads)
import llama_cpp  # noqa: F401  (first: see grabrag.generation.generator.LLAMA_FIRST)

from grabrag.core.io import read_jsonl, write_jsonl
from grabrag.core.runner import log, run_rule
from grabrag.data.assets import resolve_given
from grabrag.generation.backends import open_generator, verifier_backend, verifier_endpoint
from grabrag.generation.generator import GenerationSettings
from grabrag.policies.nli import lazy_verifier, nli_report, nli_rows


def main(smk):
    nli, model = smk.params.nli, smk.params.model
    endpoint = verifier_endpoint(nli, model)
    # the verifier's weights, or (labelling through a served generator) its canary file
    given = smk.input.get("verifier")
    # what the verifier's labels name when it has no weights file of its own
    labeller = endpoint["model"] if endpoint else model.get("backend")
    opener = None
    if verifier_backend(nli, model) is not None:
        # labelling with the generator's own model, opened through its module's backend
        def opener():
            settings = GenerationSettings(seed=smk.params.seed)
            return open_generator(smk.wildcards.model, model, given, settings, smk.threads)

    verifier = lazy_verifier(
        nli["backend"],
        None if endpoint or opener else resolve_given(given),
        n_threads=smk.threads,
        device=nli["device"],
        batch_size=nli["batch_size"],
        n_gpu_layers=model["n_gpu_layers"],
        chat_format=model["chat_format"],
        allow_cpu=model["allow_cpu"],
        batch=endpoint["concurrency"] if endpoint else model["batch"],
        seed=smk.params.seed,
        name=nli["asset"] or model.get("asset") or labeller,
        endpoint=endpoint,
        canary=Path(given) if endpoint else None,
        opener=opener,
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
