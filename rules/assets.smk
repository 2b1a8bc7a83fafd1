# Materialise one model, encoder or dataset named under `assets:` in the config.
# A local rule: on a cluster it runs where snakemake runs (the login node, where the
# network is), never as a job on a compute node, which often has no internet.


localrules:
    fetch_asset,


rule fetch_asset:
    output:
        manifest=f"{RESOURCES}/{{asset}}/manifest.json",
    log:
        f"{RESOURCES}/logs/fetch_asset/{{asset}}.log",
    conda:
        GRABRAG_ENV
    resources:
        downloads=1,
    params:
        spec=lambda wildcards: stable(config["assets"][wildcards.asset]),
        code=script_code("fetch_asset.py"),
    script:
        "../workflow/scripts/fetch_asset.py"
