"""Rule retrieve: hybrid ranking of the corpus for every question, and its hard negatives."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)
import numpy as np
import torch

from grabrag.core.errors import DataError
from grabrag.core.io import read_jsonl, write_jsonl
from grabrag.core.runner import log, run_rule
from grabrag.data.assets import resolve
from grabrag.data.retrieval import (
    bm25_scores,
    embed,
    hybrid_scores,
    load_encoder,
    passage_text,
    rank_question,
)


def main(smk):
    torch.set_num_threads(smk.threads)
    questions = read_jsonl(smk.input.questions)
    corpus = read_jsonl(smk.input.corpus)
    stored = np.load(smk.input.embeddings)
    if list(stored["pids"]) != [p["pid"] for p in corpus]:
        raise DataError(
            f"{smk.input.embeddings} does not match {smk.input.corpus}; delete the embeddings "
            "file so rule embed_corpus rebuilds it"
        )
    texts = [passage_text(p) for p in corpus]
    encoder = load_encoder(resolve(smk.input.encoder))
    query_vectors = embed(encoder, [q["question"] for q in questions])
    dense = query_vectors @ stored["embeddings"].T
    bm25 = bm25_scores(texts, [q["question"] for q in questions])
    hybrid = hybrid_scores(bm25, dense, smk.params.bm25_weight, smk.params.dense_weight)
    rows = [
        rank_question(
            q,
            corpus,
            bm25[i],
            dense[i],
            hybrid[i],
            smk.params.n_candidates,
            smk.params.n_hard_negatives,
        )
        for i, q in enumerate(questions)
    ]
    write_jsonl(smk.output.ranking, rows)
    short = sum(len(r["hard_negatives"]) < smk.params.n_hard_negatives for r in rows)
    log.info(
        "ranked %d passages for %d questions; %d short of hard negatives",
        len(corpus),
        len(questions),
        short,
    )


run_rule(snakemake, main)  # noqa: F821
