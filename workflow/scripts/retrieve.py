"""Rule retrieve: hybrid ranking of the corpus for every question, and its hard negatives."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)
import numpy as np

from grabrag.core.errors import DataError
from grabrag.core.io import read_jsonl, write_jsonl
from grabrag.core.runner import log, run_rule
from grabrag.data.retrieval import bm25_scores, hybrid_scores, passage_text, rank_question


def main(smk):
    questions = read_jsonl(smk.input.questions)
    corpus = read_jsonl(smk.input.corpus)
    stored = np.load(smk.input.corpus_embeddings)
    queries = np.load(smk.input.question_embeddings)
    for embeddings, ids, source in (
        (smk.input.corpus_embeddings, stored["pids"], [p["pid"] for p in corpus]),
        (smk.input.question_embeddings, queries["qids"], [q["qid"] for q in questions]),
    ):
        if list(ids) != source:
            raise DataError(
                f"{embeddings} does not match {smk.input.corpus} and {smk.input.questions}; "
                "delete the embeddings files so rule embed rebuilds them"
            )
    texts = [passage_text(p) for p in corpus]
    dense = queries["embeddings"] @ stored["embeddings"].T
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
