"""Rule plan: what the config fetches (bytes per asset) and runs (model calls per rule),
written to results/plan.md and shown in the log, before anything is downloaded."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.core.io import atomic_write
from grabrag.core.runner import log, run_rule
from grabrag.pipeline.plan import plan_text


def main(smk):
    text = plan_text(smk.params.config)
    with atomic_write(smk.output.plan) as handle:
        handle.write(text)
    log.info("the plan, also in %s:\n%s", smk.output.plan, text)


run_rule(snakemake, main)  # noqa: F821
