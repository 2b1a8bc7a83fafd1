"""Rule fetch_asset: materialise one asset and write its manifest."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag.core.runner import log, run_rule
from grabrag.data.assets import materialise


def main(smk):
    name = smk.wildcards.asset
    # Read from the config, not a rule param: where the pins live is no content.
    lock_dir = smk.config.get("asset_lock_dir")
    path = materialise(name, smk.params.spec, smk.output.manifest, lock_dir)
    log.info("asset %s materialised at %s", name, path)


run_rule(snakemake, main)  # noqa: F821
