"""Hybrid BM25 + dense retrieval and hard-negative mining (GRAB-RAG section 4.3).

score = w_bm25 * minmax(BM25) + w_dense * minmax(cosine), both min-max normalised per
query over the whole corpus. Hard negatives are the highest-scored passages that are
not gold and contain no answer alias (word-boundary match after normalisation).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from grabrag.core.progress import Progress
from grabrag.core.text import contains_alias, word_tokens


def load_encoder(model_dir: str | Path, device: str = "cpu") -> Any:
    """A sentence-transformers model from a local folder (never from a hub)."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(model_dir), device=device, local_files_only=True)


def embed(
    encoder: Any,
    texts: Sequence[str],
    batch_size: int = 32,
    log: Callable[[str], None] | None = None,
    chunk: int = 1024,
) -> np.ndarray:
    """L2-normalised float32 embeddings, so a dot product is the cosine similarity.
    With ``log``, a progress line at most every 10 s (texts are encoded ``chunk`` at a
    time; the encoder batches within each chunk, so the vectors do not depend on it)."""
    texts = list(texts)
    progress = Progress(len(texts), log, unit="passages", min_interval=10.0) if log else None
    parts = []
    for start in range(0, len(texts), chunk):
        part = texts[start : start + chunk]
        parts.append(
            encoder.encode(
                part,
                batch_size=batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        )
        if progress:
            progress.step("embedding", n=len(part))
    if not parts:
        return np.zeros((0, encoder.get_sentence_embedding_dimension()), dtype=np.float32)
    return np.asarray(np.concatenate(parts), dtype=np.float32)


def passage_text(passage: dict[str, str]) -> str:
    """What both retrievers see: title and text, as a reader of the passage would."""
    return f"{passage['title']}\n{passage['text']}" if passage["title"] else passage["text"]


def minmax(scores: np.ndarray) -> np.ndarray:
    """Per-row min-max normalisation to [0, 1]; a constant row becomes all zeros."""
    scores = np.asarray(scores, dtype=np.float64)
    low = scores.min(axis=-1, keepdims=True)
    span = scores.max(axis=-1, keepdims=True) - low
    return np.divide(scores - low, span, out=np.zeros_like(scores), where=span > 0)


def bm25_scores(corpus_texts: Sequence[str], queries: Sequence[str]) -> np.ndarray:
    """BM25Okapi (rank-bm25, default k1/b) scores, one row per query."""
    from rank_bm25 import BM25Okapi

    bm25 = BM25Okapi([word_tokens(t) or [""] for t in corpus_texts])
    return np.vstack([bm25.get_scores(word_tokens(q)) for q in queries])


def hybrid_scores(
    bm25: np.ndarray, dense: np.ndarray, bm25_weight: float = 0.5, dense_weight: float = 0.5
) -> np.ndarray:
    return bm25_weight * minmax(bm25) + dense_weight * minmax(dense)


def rank_question(
    question: dict[str, Any],
    corpus: Sequence[dict[str, str]],
    bm25_row: np.ndarray,
    dense_row: np.ndarray,
    hybrid_row: np.ndarray,
    n_candidates: int,
    n_hard_negatives: int,
) -> dict[str, Any]:
    """Ranked candidates (with scores) and the question's hard negatives.

    The hard-negative scan walks the full ranking, not only the kept candidates, so a
    question runs short only when the whole corpus has too few answer-free passages.
    """
    gold_ids = {p["pid"] for p in question["gold_passages"]}
    gold_texts = {p["text"].strip() for p in question["gold_passages"]}
    aliases = question.get("all_answers") or question["answers"]
    bm25_n = minmax(bm25_row)
    dense_n = minmax(dense_row)
    # Ties in the hybrid score are broken by corpus position (stable argsort): deterministic.
    order = np.argsort(-hybrid_row, kind="stable")
    candidates = []
    hard_negatives: list[str] = []
    for rank, idx in enumerate(order, start=1):
        passage = corpus[idx]
        is_gold = passage["pid"] in gold_ids or passage["text"].strip() in gold_texts
        has_alias = None
        if not is_gold and len(hard_negatives) < n_hard_negatives:
            has_alias = contains_alias(passage_text(passage), aliases)
            if not has_alias:
                hard_negatives.append(passage["pid"])
        if rank <= n_candidates:
            if has_alias is None and not is_gold:
                has_alias = contains_alias(passage_text(passage), aliases)
            candidates.append(
                {
                    "pid": passage["pid"],
                    "rank": rank,
                    "hybrid": round(float(hybrid_row[idx]), 6),
                    "bm25": round(float(bm25_row[idx]), 6),
                    "bm25_norm": round(float(bm25_n[idx]), 6),
                    "dense": round(float(dense_row[idx]), 6),
                    "dense_norm": round(float(dense_n[idx]), 6),
                    "gold": is_gold,
                    "has_alias": bool(has_alias) if not is_gold else None,
                }
            )
        elif len(hard_negatives) >= n_hard_negatives:
            break
    return {
        "qid": question["qid"],
        "candidates": candidates,
        "hard_negatives": hard_negatives,
        "gold_ranks": sorted(c["rank"] for c in candidates if c["gold"]),
    }
