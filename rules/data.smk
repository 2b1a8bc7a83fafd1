# Stage 1: sample N questions per dataset into the common schema, plus the passage corpus.


rule prepare_data:
    input:
        source=dataset_asset,
    output:
        questions="results/data/{dataset}/questions.jsonl",
        corpus="results/data/{dataset}/corpus.jsonl",
        report="results/data/{dataset}/report.json",
    log:
        "results/logs/prepare_data/{dataset}.log",
    wildcard_constraints:
        dataset=BUILT_DATASETS,
    priority: PREPARATION_PRIORITY
    conda:
        GRABRAG_ENV
    params:
        dataset=dataset_config,
        seed=sample_seed,
        code=script_code("prepare_data.py"),
    script:
        "../workflow/scripts/prepare_data.py"
