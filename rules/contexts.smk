# Stage 3: the paired context conditions Q100, Q50, Q0 and Qclosed.
# One job per condition, each with only the context settings that condition reads, so
# that editing one (contexts.n_gold_q50, say) rebuilds only the conditions it changes
# and reruns only their cells.


rule build_contexts:
    input:
        questions=base_file("data", "questions.jsonl"),
        corpus=base_file("data", "corpus.jsonl"),
        ranking=base_file("retrieval", "hard_negatives.jsonl"),
        tokenizer=TOKENIZER,
    output:
        rows="results/contexts/{dataset}/{condition}.jsonl",
    log:
        "results/logs/build_contexts/{dataset}/{condition}.log",
    wildcard_constraints:
        dataset=BUILT_DATASETS,
        condition=_alternatives(PAIRED_CONDITIONS),
    priority: PREPARATION_PRIORITY
    conda:
        GRABRAG_ENV
    params:
        contexts=lambda w: RUN.context_settings(w.condition),
        seed=construction_seed,
        tokenizer=RUN.tokenizer_asset(),
        code=script_code("build_contexts.py"),
    script:
        "../workflow/scripts/build_contexts.py"


# The paired conditions' report (questions kept and dropped, truncations per condition):
# every context setting, read by nothing downstream.
rule contexts_report:
    input:
        questions=base_file("data", "questions.jsonl"),
        corpus=base_file("data", "corpus.jsonl"),
        ranking=base_file("retrieval", "hard_negatives.jsonl"),
        tokenizer=TOKENIZER,
    output:
        report="results/contexts/{dataset}/report.json",
    log:
        "results/logs/contexts_report/{dataset}.log",
    wildcard_constraints:
        dataset=BUILT_DATASETS,
    conda:
        GRABRAG_ENV
    params:
        contexts=RUN.context_settings(None),
        seed=construction_seed,
        tokenizer=RUN.tokenizer_asset(),
        code=script_code("build_contexts.py"),
    script:
        "../workflow/scripts/build_contexts.py"


# A method run on each dataset's first N questions only (evidential.n_questions,
# cdd.n_questions: ours, for small runs) reads a condition's rows among those questions.
rule method_contexts:
    input:
        rows="results/contexts/{dataset}/{condition}.jsonl",
    output:
        rows="results/contexts/{dataset}/{condition}.first{questions}.jsonl",
    log:
        "results/logs/method_contexts/{dataset}/{condition}.first{questions}.log",
    priority: PREPARATION_PRIORITY
    conda:
        GRABRAG_ENV
    params:
        code=script_code("method_contexts.py"),
    script:
        "../workflow/scripts/method_contexts.py"
