"""Rule embed_corpus: dense embeddings of the corpus, computed once per dataset."""

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
    encoder = load_encoder(resolve(smk.input.encoder))
    vectors = embed(encoder, [passage_text(p) for p in corpus], smk.params.batch_size, log=log.info)
    with atomic_write(smk.output.embeddings, "wb") as handle:
        np.savez(handle, pids=np.array([p["pid"] for p in corpus]), embeddings=vectors)
    log.info(
        "embedded %d passages with %s (dim %d)", len(corpus), smk.params.encoder, vectors.shape[1]
    )


run_rule(snakemake, main)  # noqa: F821
