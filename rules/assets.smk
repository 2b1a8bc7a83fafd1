# Materialise one model, encoder or dataset named under `assets:` in the config.
# A local rule: on a cluster it runs where snakemake runs (the login node, where the
# network is), never as a job on a compute node, which often has no internet.


localrules:
    fetch_asset,
    plan,


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
        spec=asset_spec,
        code=script_code("fetch_asset.py"),
    script:
        "../workflow/scripts/fetch_asset.py"


# What the config will fetch (bytes per asset) and run (model calls per rule), before
# any download: `snakemake --configfile config/paper.yaml plan`.
rule plan:
    output:
        plan="results/plan.md",
    log:
        "results/logs/plan.log",
    conda:
        GRABRAG_ENV
    params:
        config=stable(config),
        code=script_code("plan.py"),
    script:
        "../workflow/scripts/plan.py"
