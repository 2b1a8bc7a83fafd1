# CDD's TruthfulQA misconception-injection probe (truthfulqa_probe): TruthfulQA's questions
# (the hub's generation set, or BIG-bench's file) and their paired contexts, the best answer or the most common misconception as
# the only passage. The generation, NLI, EvidentialRAG, CDD and policy rules then run on the
# probe dataset as on any other, and the truthfulqa_probe table scores their decisions.

if RUN.truthfulqa_probe:

    rule truthfulqa_questions:
        input:
            source=asset_manifest(RUN.truthfulqa_probe["asset"]),
        output:
            questions=f"results/data/{TRUTHFULQA}/questions.jsonl",
            report=f"results/data/{TRUTHFULQA}/report.json",
        log:
            f"results/logs/truthfulqa_questions/{TRUTHFULQA}.log",
        conda:
            GRABRAG_ENV
        params:
            n_questions=RUN.truthfulqa_probe["n_questions"],
            format=RUN.truthfulqa_probe["format"],
            seed=config["seed"],
            code=script_code("truthfulqa_questions.py"),
        script:
            "../workflow/scripts/truthfulqa_questions.py"

    rule truthfulqa_contexts:
        input:
            questions=f"results/data/{TRUTHFULQA}/questions.jsonl",
            tokenizer=TOKENIZER,
        output:
            **{
                condition: f"results/contexts/{TRUTHFULQA}/{condition}.jsonl"
                for condition in TRUTHFULQA_CONTEXTS
            },
        log:
            f"results/logs/truthfulqa_contexts/{TRUTHFULQA}.log",
        conda:
            GRABRAG_ENV
        params:
            seed=config["seed"],
            max_tokens=config["contexts"]["max_context_tokens"],
            code=script_code("truthfulqa_contexts.py"),
        script:
            "../workflow/scripts/truthfulqa_contexts.py"

    # Each probe decision scored true or false against the reference answers: by
    # entailment with the NLI model where the config declares one, else by token F1
    # (truthfulqa_probe.scorer); one job per model, each distinct answer judged once.
    rule truthfulqa_scores:
        input:
            unpack(truthfulqa_score_inputs),
        output:
            scores="results/truthfulqa/{model}/{dataset}/scores.jsonl",
        log:
            "results/logs/truthfulqa_scores/{model}/{dataset}.log",
        benchmark:
            "results/benchmarks/truthfulqa_scores/{model}/{dataset}.tsv"
        conda:
            GRABRAG_ENV
        threads: truthfulqa_scorer_threads
        resources:
            gpu=truthfulqa_scorer_gpus,
        params:
            scorer=RUN.truthfulqa_scorer,
            cells=truthfulqa_score_cells,
            nli=stable(config["nli"]),
            code=script_code("truthfulqa_scores.py"),
        script:
            "../workflow/scripts/truthfulqa_scores.py"
