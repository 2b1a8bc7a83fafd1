# Stage 2: hybrid BM25 + dense retrieval and hard negatives.


rule embed_corpus:
    input:
        corpus="results/data/{dataset}/corpus.jsonl",
        encoder=asset_manifest(config["retrieval"]["encoder"]),
    output:
        embeddings="results/retrieval/{dataset}/corpus_embeddings.npz",
    log:
        "results/logs/embed_corpus/{dataset}.log",
    conda:
        GRABRAG_ENV
    threads: workflow.cores
    params:
        encoder=config["retrieval"]["encoder"],
        batch_size=config["retrieval"]["batch_size"],
        code=script_code("embed_corpus.py"),
    script:
        "../workflow/scripts/embed_corpus.py"


rule retrieve:
    input:
        questions="results/data/{dataset}/questions.jsonl",
        corpus="results/data/{dataset}/corpus.jsonl",
        embeddings="results/retrieval/{dataset}/corpus_embeddings.npz",
        encoder=asset_manifest(config["retrieval"]["encoder"]),
    output:
        ranking="results/retrieval/{dataset}/hard_negatives.jsonl",
    log:
        "results/logs/retrieve/{dataset}.log",
    conda:
        GRABRAG_ENV
    threads: workflow.cores
    params:
        bm25_weight=config["retrieval"]["bm25_weight"],
        dense_weight=config["retrieval"]["dense_weight"],
        n_candidates=config["retrieval"]["n_candidates"],
        n_hard_negatives=config["retrieval"]["n_hard_negatives"],
        code=script_code("retrieve.py"),
    script:
        "../workflow/scripts/retrieve.py"
