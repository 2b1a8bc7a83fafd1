"""Rule fetch_asset: materialise one asset and write its manifest."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.assets import materialise
from grabrag.runner import log, run_rule


def main(smk):
    name = smk.wildcards.asset
    path = materialise(name, smk.params.spec, smk.output.manifest)
    log.info("asset %s materialised at %s", name, path)


run_rule(snakemake, main)  # noqa: F821
