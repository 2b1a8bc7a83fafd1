# Stage 6b: EvidentialRAG as the EVID and EVID_CB policies (EvidentialRAG sections
# 3, 4.3-4.4, 5.7-5.9). An evaluator pass judges each passage (k calls per question), the
# judgements are fused into masses and routed, and the generator makes one call per
# question and variant; the policy rule (rules/policies.smk) turns those rows into
# decisions, the sweep re-fuses the stored judgements without any LLM call.


rule evidential_evaluate:
    input:
        contexts=evidential_contexts,
        evaluator=evaluator_asset,
    output:
        evaluations="results/evidential/{model}/{dataset}/{condition}/evaluations.jsonl",
        report="results/evidential/{model}/{dataset}/{condition}/evaluate_report.json",
    log:
        "results/logs/evidential_evaluate/{model}/{dataset}/{condition}.log",
    benchmark:
        "results/benchmarks/evidential_evaluate/{model}/{dataset}/{condition}.tsv"
    conda:
        GRABRAG_ENV
    threads: evaluator_threads
    resources:
        gpu=evaluator_gpus,
    params:
        evaluator_name=evaluator_name,
        evaluator=evaluator_settings,
        generation=RUN.generation_settings(),
        max_tokens=config["evidential"]["evaluator_max_tokens"],
        checkpoint=checkpoint_in("evidential", ".evaluate_checkpoint.jsonl"),
        code=script_code("evidential_evaluate.py"),
    script:
        "../workflow/scripts/evidential_evaluate.py"


rule evidential_generate:
    input:
        contexts=evidential_contexts,
        evaluations="results/evidential/{model}/{dataset}/{condition}/evaluations.jsonl",
        cb=closed_book_cell,
        model=model_asset,
    output:
        **{
            policy: f"results/evidential/{{model}}/{{dataset}}/{{condition}}/{policy}.jsonl"
            for policy in RUN.evid_policies
        },
        report="results/evidential/{model}/{dataset}/{condition}/generate_report.json",
    log:
        "results/logs/evidential_generate/{model}/{dataset}/{condition}.log",
    benchmark:
        "results/benchmarks/evidential_generate/{model}/{dataset}/{condition}.tsv"
    conda:
        GRABRAG_ENV
    threads: model_threads
    resources:
        gpu=model_gpus,
    params:
        model=model_settings,
        generation=RUN.generation_settings(),
        fusion=RUN.fusion_settings(),
        code=script_code("evidential_generate.py"),
        checkpoint=checkpoint_in("evidential", ".generate_checkpoint.jsonl"),
    script:
        "../workflow/scripts/evidential_generate.py"


rule evidential_sweep:
    input:
        evaluations=expand(
            "results/evidential/{{model}}/{{dataset}}/{condition}/evaluations.jsonl",
            condition=RUN.conditions,
        ),
        contexts=evidential_condition_contexts,
        cb=closed_book_cell,
    output:
        sweep="results/evidential/{model}/{dataset}/sweep.csv",
    log:
        "results/logs/evidential_sweep/{model}/{dataset}.log",
    conda:
        GRABRAG_ENV
    params:
        # evaluations and contexts are one file per condition, in this order
        conditions=RUN.conditions,
        fusion=RUN.fusion_settings(),
        grid=stable({k: config["evidential"][k] for k in ("lambda_grid", "tau_grid")}),
        code=script_code("evidential_sweep.py"),
    script:
        "../workflow/scripts/evidential_sweep.py"


rule evidential_efficiency:
    input:
        p0=expand(
            GENERATION_FILE,
            condition=RUN.conditions,
            prompt="P0",
            allow_missing=True,
        ),
        p1=expand(
            GENERATION_FILE,
            condition=RUN.conditions,
            prompt="P1",
            allow_missing=True,
        ),
        evidential=lambda w: files(EVIDENTIAL_FILE, evidential_cells(w)),
        reports=expand(
            "results/evidential/{{model}}/{{dataset}}/{condition}/{stage}_report.json",
            condition=RUN.conditions,
            stage=("evaluate", "generate"),
        ),
        cb=closed_book_cell,
    output:
        efficiency="results/evidential/{model}/{dataset}/efficiency.json",
    log:
        "results/logs/evidential_efficiency/{model}/{dataset}.log",
    conda:
        GRABRAG_ENV
    params:
        conditions=RUN.conditions,
        evidential_cells=evidential_cells,
        code=script_code("evidential_efficiency.py"),
    script:
        "../workflow/scripts/evidential_efficiency.py"
