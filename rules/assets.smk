# Materialise one model, encoder or dataset named under `assets:` in the config.


rule fetch_asset:
    output:
        manifest=f"{RESOURCES}/{{asset}}/manifest.json",
    params:
        spec=lambda wildcards: config["assets"][wildcards.asset],
    log:
        f"{RESOURCES}/logs/fetch_asset/{{asset}}.log",
    resources:
        downloads=1,
    script:
        "../workflow/scripts/fetch_asset.py"
