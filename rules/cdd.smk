# Stage 6c: CDD (Context-Driven Decomposition), CDD-alpha and the prompt-only baselines
# (workflow/grabrag/cdd/). One GPU job per model x dataset x
# condition runs CDD's steps (with the ablations and perturbed reruns for the diagnostics),
# another the four baseline prompts; the policy rule (rules/policies.smk) turns the stored
# rows into decisions without any LLM call, and cdd_diagnostics summarises them.


rule cdd_generate:
    input:
        contexts=cdd_contexts,
        cb=closed_book_cell,
        model=model_asset,
    output:
        traces="results/cdd/{model}/{dataset}/{condition}/traces.jsonl",
    log:
        "results/logs/cdd_generate/{model}/{dataset}/{condition}.log",
    benchmark:
        "results/benchmarks/cdd_generate/{model}/{dataset}/{condition}.tsv"
    conda:
        GRABRAG_ENV
    threads: model_threads
    resources:
        gpu=model_gpus,
    params:
        model=model_settings,
        generation=RUN.cdd_generation_settings(),
        cdd=stable({k: config["cdd"][k] for k in ("parametric", "diagnostics", "gate")}),
        checkpoint=checkpoint_in("cdd", ".traces_checkpoint.jsonl"),
        code=script_code("cdd_generate.py"),
    script:
        "../workflow/scripts/cdd_generate.py"


if RUN.cdd_baselines:

    rule baselines_generate:
        input:
            contexts=cdd_contexts,
            model=model_asset,
        output:
            **{
                name: f"results/cdd/{{model}}/{{dataset}}/{{condition}}/{name}.jsonl"
                for name in RUN.cdd_baselines
            },
        log:
            "results/logs/baselines_generate/{model}/{dataset}/{condition}.log",
        benchmark:
            "results/benchmarks/baselines_generate/{model}/{dataset}/{condition}.tsv"
        conda:
            GRABRAG_ENV
        threads: model_threads
        resources:
            gpu=model_gpus,
        params:
            model=model_settings,
            generation=RUN.generation_settings(),
            checkpoint=checkpoint_in("cdd", ".baselines_checkpoint.jsonl"),
            code=script_code("cdd_baselines.py"),
        script:
            "../workflow/scripts/cdd_baselines.py"


rule cdd_diagnostics:
    input:
        contexts=cdd_condition_contexts,
        traces=expand(
            "results/cdd/{{model}}/{{dataset}}/{condition}/traces.jsonl",
            condition=RUN.conditions if RUN.cdd_traces else [],
        ),
        decisions=lambda w: files(DECISION_FILE, cdd_decision_cells(w)),
    output:
        diagnostics="results/cdd/{model}/{dataset}/diagnostics.csv",
    log:
        "results/logs/cdd_diagnostics/{model}/{dataset}.log",
    conda:
        GRABRAG_ENV
    params:
        # contexts and traces are one file per condition, in this order
        conditions=RUN.conditions,
        traces=RUN.cdd_traces,
        decision_cells=cdd_decision_cells,
        bootstrap=stable(config["bootstrap"]),
        seed=config["seed"],
        code=script_code("cdd_diagnostics.py"),
    script:
        "../workflow/scripts/cdd_diagnostics.py"
