# Stage 2: hybrid BM25 + dense retrieval and hard negatives.


# The questions are embedded with the corpus, so that retrieve loads no encoder.
rule embed:
    input:
        corpus="results/data/{dataset}/corpus.jsonl",
        questions="results/data/{dataset}/questions.jsonl",
        encoder=asset_manifest(config["retrieval"]["encoder"]),
    output:
        corpus="results/retrieval/{dataset}/corpus_embeddings.npz",
        questions="results/retrieval/{dataset}/question_embeddings.npz",
    log:
        "results/logs/embed/{dataset}.log",
    priority: ALL_CORES_PRIORITY
    conda:
        GRABRAG_ENV
    threads: workflow.cores
    params:
        encoder=config["retrieval"]["encoder"],
        batch_size=config["retrieval"]["batch_size"],
        code=script_code("embed.py"),
    script:
        "../workflow/scripts/embed.py"


rule retrieve:
    input:
        questions="results/data/{dataset}/questions.jsonl",
        corpus="results/data/{dataset}/corpus.jsonl",
        corpus_embeddings="results/retrieval/{dataset}/corpus_embeddings.npz",
        question_embeddings="results/retrieval/{dataset}/question_embeddings.npz",
    output:
        ranking="results/retrieval/{dataset}/hard_negatives.jsonl",
    log:
        "results/logs/retrieve/{dataset}.log",
    priority: PREPARATION_PRIORITY
    conda:
        GRABRAG_ENV
    params:
        bm25_weight=config["retrieval"]["bm25_weight"],
        dense_weight=config["retrieval"]["dense_weight"],
        n_candidates=config["retrieval"]["n_candidates"],
        n_hard_negatives=config["retrieval"]["n_hard_negatives"],
        code=script_code("retrieve.py"),
    script:
        "../workflow/scripts/retrieve.py"
