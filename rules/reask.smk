# The re-ask audit (on with reask_audit.questions above 0): each generation cell's first
# questions sent again at another concurrency, never from the response cache, then one
# table of per-model agreement with the cells' own calls. Greedy decoding is deterministic
# one call at a time; batches and a loaded server can flip near ties, and this measures
# how often they did.


rule reask:
    input:
        contexts=CONTEXT_FILE,
        model=model_asset,
    output:
        reasked=REASK_FILE,
    log:
        "results/logs/reask/{model}/{dataset}/{condition}.log",
    benchmark:
        "results/benchmarks/reask/{model}/{dataset}/{condition}.tsv"
    conda:
        GRABRAG_ENV
    threads: model_threads
    resources:
        gpu=model_gpus,
    params:
        model=model_settings,
        generation=RUN.generation_settings(),
        questions=RUN.reask_questions,
        concurrency=lambda w: RUN.reask_concurrency(w.model),
        checkpoint=checkpoint_in("reask", ".checkpoint.jsonl"),
        code=script_code("reask.py"),
    script:
        "../workflow/scripts/reask.py"


rule reask_table:
    input:
        reasked=files(REASK_FILE, RUN.reask_cells()),
        cells=files(GENERATION_FILE, RUN.reask_generation_cells()),
    output:
        **{
            suffix: f"results/tables/{REASK_TABLE}.{suffix.replace('_', '.')}"
            for suffix in ("csv", "md", "tex", "tidy_csv", "html")
        },
    log:
        "results/logs/table/reask_agreement.log",
    conda:
        GRABRAG_ENV
    params:
        reask_cells=RUN.reask_cells(),
        decoding=RUN.decoding(),
        concurrency={m: RUN.reask_concurrency(m) for m in RUN.models},
        caption=extra_caption(REASK_TABLE),
        code=script_code("reask_table.py"),
    script:
        "../workflow/scripts/reask_table.py"
