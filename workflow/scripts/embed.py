"""Rule embed: dense embeddings of the corpus and of the questions, computed once per
dataset. The questions are embedded here, beside the corpus, so that rule retrieve loads
no encoder (nor torch) of its own."""

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)
import numpy as np
import torch

from grabrag.core.io import atomic_write, read_jsonl
from grabrag.core.runner import log, run_rule
from grabrag.data.assets import resolve
from grabrag.data.retrieval import embed, load_encoder, passage_text


def main(smk):
    torch.set_num_threads(smk.threads)
    corpus = read_jsonl(smk.input.corpus)
    questions = read_jsonl(smk.input.questions)
    encoder = load_encoder(resolve(smk.input.encoder))
    vectors = embed(encoder, [passage_text(p) for p in corpus], smk.params.batch_size, log=log.info)
    with atomic_write(smk.output.corpus, "wb") as handle:
        np.savez(handle, pids=np.array([p["pid"] for p in corpus]), embeddings=vectors)
    # The questions on one thread: a few rows split across threads came out different in
    # the last bits (9e-8, one question at 8 threads against 2), so the SLURM profile's
    # threads and a local run's gave different files; one thread gives the same vectors at
    # any thread count, and a question pass is small.
    torch.set_num_threads(1)
    query_vectors = embed(encoder, [q["question"] for q in questions], smk.params.batch_size)
    with atomic_write(smk.output.questions, "wb") as handle:
        np.savez(handle, qids=np.array([q["qid"] for q in questions]), embeddings=query_vectors)
    log.info(
        "embedded %d passages and %d questions with %s (dim %d)",
        len(corpus),
        len(questions),
        smk.params.encoder,
        vectors.shape[1],
    )


run_rule(snakemake, main)  # noqa: F821
