"""Rule endpoint_canary: a served model's server proves it applies the constraint."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.core.io import write_json
from grabrag.core.runner import log, run_rule
from grabrag.generation.endpoint import EndpointGenerator
from grabrag.generation.generator import settings_from


def main(smk):
    model = smk.params.model
    generator = EndpointGenerator(
        smk.wildcards.model, model["endpoint"], settings_from(smk.params.generation)
    )
    record = generator.canary()
    write_json(smk.output.canary, record)
    log.info(
        "model %s: %s applies the %s constraint (identity %s, window %s)",
        smk.wildcards.model,
        record["host"],
        record["constraint"],
        record["identity_hash"],
        record["window"],
    )


run_rule(snakemake, main)  # noqa: F821
