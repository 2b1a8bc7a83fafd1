# Stage 5: grammar-constrained generation, one job per model x dataset x condition.
# The job writes the P0, P1 and P2 cells together so their shared prefix is computed once.


rule generate_context_prompts:
    input:
        contexts=CONTEXT_FILE,
        model=model_asset,
    output:
        **{
            prompt: f"results/generation/{{model}}/{{dataset}}/{{condition}}/{prompt}.jsonl"
            for prompt in CONTEXT_PROMPTS
        },
    log:
        "results/logs/generate/{model}/{dataset}/{condition}.log",
    benchmark:
        "results/benchmarks/generate/{model}/{dataset}/{condition}.tsv"
    conda:
        GRABRAG_ENV
    threads: model_threads
    resources:
        gpu=model_gpus,
    params:
        model=model_settings,
        generation=RUN.generation_settings(),
        checkpoint=checkpoint_in("generation", ".checkpoint.jsonl"),
        code=script_code("generate.py"),
    script:
        "../workflow/scripts/generate.py"


rule generate_closed_book:
    input:
        contexts="results/contexts/{dataset}/Qclosed.jsonl",
        model=model_asset,
    output:
        CB="results/generation/{model}/{dataset}/Qclosed/CB.jsonl",
    log:
        "results/logs/generate/{model}/{dataset}/Qclosed.log",
    benchmark:
        "results/benchmarks/generate/{model}/{dataset}/Qclosed.tsv"
    conda:
        GRABRAG_ENV
    threads: model_threads
    resources:
        gpu=model_gpus,
    params:
        model=model_settings,
        generation=RUN.generation_settings(),
        checkpoint=checkpoint_in("generation", ".checkpoint.jsonl", CLOSED_BOOK),
        code=script_code("generate.py"),
    script:
        "../workflow/scripts/generate.py"


rule generation_report:
    input:
        cells=lambda wildcards: files(GENERATION_FILE, generation_report_cells(wildcards)),
    output:
        report="results/generation/{model}/{dataset}/report.json",
    log:
        "results/logs/generation_report/{model}/{dataset}.log",
    conda:
        GRABRAG_ENV
    params:
        cells=generation_report_cells,
        code=script_code("generation_report.py"),
    script:
        "../workflow/scripts/generation_report.py"
