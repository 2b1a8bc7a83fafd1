# Stage 4: the misleading-context condition QC (entity swaps, GRAB-RAG 3.3 and Appendix C)
# and the inter-context conflict condition QX built from the same swaps.


rule entity_pool:
    input:
        questions="results/data/{dataset}/questions.jsonl",
        corpus="results/data/{dataset}/corpus.jsonl",
        ner=NER,
        ner_tokenizer=NER_TOKENIZER,
        # qc.pool dataset_gold reads every gold passage of the source split.
        source=pool_source,
    output:
        pool="results/qc/{dataset}/entity_pool.json",
    log:
        "results/logs/entity_pool/{dataset}.log",
    priority: NER_PRIORITY
    conda:
        GRABRAG_ENV
    threads: NER_THREADS
    params:
        ner=stable(config["ner"]),
        pool_source=config["qc"]["pool"],
        adapter=dataset_adapter,
        code=script_code("entity_pool.py"),
    script:
        "../workflow/scripts/entity_pool.py"


rule swaps:
    input:
        questions=base_file("data", "questions.jsonl"),
        pool=base_file("qc", "entity_pool.json"),
        ner=NER,
        ner_tokenizer=NER_TOKENIZER,
    output:
        swaps="results/qc/{dataset}/swaps.jsonl",
        table="results/qc/{dataset}/swaps.csv",
        summary="results/qc/{dataset}/summary.json",
    log:
        "results/logs/swaps/{dataset}.log",
    priority: NER_PRIORITY
    conda:
        GRABRAG_ENV
    threads: NER_THREADS
    params:
        ner=stable(config["ner"]),
        seed=construction_seed,
        code=script_code("swaps.py"),
    script:
        "../workflow/scripts/swaps.py"


rule qc_contexts:
    input:
        questions=base_file("data", "questions.jsonl"),
        corpus=base_file("data", "corpus.jsonl"),
        ranking=base_file("retrieval", "hard_negatives.jsonl"),
        paired="results/contexts/{dataset}/Q0.jsonl",
        swaps="results/qc/{dataset}/swaps.jsonl",
        tokenizer=TOKENIZER,
    output:
        QC="results/contexts/{dataset}/QC.jsonl",
        report="results/contexts/{dataset}/QC_report.json",
    log:
        "results/logs/qc_contexts/{dataset}.log",
    priority: PREPARATION_PRIORITY
    conda:
        GRABRAG_ENV
    params:
        contexts=RUN.context_settings("QC"),
        seed=construction_seed,
        condition="QC",
        code=script_code("swapped_contexts.py"),
    script:
        "../workflow/scripts/swapped_contexts.py"


# The quality audit's sample (Appendix C): drawn from the QC rows, so every rated
# question has an HwSA@QC to recompute.
rule audit_sample:
    input:
        swaps="results/qc/{dataset}/swaps.jsonl",
        qc="results/contexts/{dataset}/QC.jsonl",
    output:
        audit="results/qc/{dataset}/audit_sample.csv",
    log:
        "results/logs/audit_sample/{dataset}.log",
    conda:
        GRABRAG_ENV
    params:
        audit_size=config["qc"]["audit_size"],
        seed=construction_seed,
        code=script_code("audit_sample.py"),
    script:
        "../workflow/scripts/audit_sample.py"


# QX (inter-context conflict): the original gold passage and its swapped twin
# together among hard negatives, for exactly the questions of QC.
rule qx_contexts:
    input:
        questions=base_file("data", "questions.jsonl"),
        corpus=base_file("data", "corpus.jsonl"),
        ranking=base_file("retrieval", "hard_negatives.jsonl"),
        paired="results/contexts/{dataset}/QC.jsonl",
        swaps="results/qc/{dataset}/swaps.jsonl",
        tokenizer=TOKENIZER,
    output:
        QX="results/contexts/{dataset}/QX.jsonl",
        report="results/contexts/{dataset}/QX_report.json",
    log:
        "results/logs/qx_contexts/{dataset}.log",
    priority: PREPARATION_PRIORITY
    conda:
        GRABRAG_ENV
    params:
        contexts=RUN.context_settings("QX"),
        seed=construction_seed,
        condition="QX",
        code=script_code("swapped_contexts.py"),
    script:
        "../workflow/scripts/swapped_contexts.py"
