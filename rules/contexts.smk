# Stage 3: the paired context conditions Q100, Q50, Q0 and Qclosed.


rule build_contexts:
    input:
        questions=base_file("data", "questions.jsonl"),
        corpus=base_file("data", "corpus.jsonl"),
        ranking=base_file("retrieval", "hard_negatives.jsonl"),
        tokenizer=asset_manifest(tokenizer_asset()),
    output:
        **{
            condition: f"results/contexts/{{dataset}}/{condition}.jsonl"
            for condition in PAIRED_CONDITIONS
        },
        report="results/contexts/{dataset}/report.json",
    log:
        "results/logs/build_contexts/{dataset}.log",
    wildcard_constraints:
        dataset=BUILT_DATASETS,
    conda:
        GRABRAG_ENV
    params:
        contexts=stable(config["contexts"]),
        seed=construction_seed,
        tokenizer=tokenizer_asset(),
        code=script_code("build_contexts.py"),
    script:
        "../workflow/scripts/build_contexts.py"
