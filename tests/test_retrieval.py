"""Hybrid scoring, min-max normalisation and the hard-negative rule."""

from __future__ import annotations

import numpy as np
import pytest

from grabrag.core.text import contains_alias
from grabrag.data.retrieval import (
    bm25_scores,
    embed,
    hybrid_scores,
    load_encoder,
    minmax,
    passage_text,
    rank_question,
)


def _passage(pid: str, text: str, title: str = "") -> dict[str, str]:
    return {"pid": pid, "title": title, "text": text}


def test_minmax_per_row_and_constant_row() -> None:
    scores = np.array([[1.0, 3.0, 2.0], [5.0, 5.0, 5.0]])
    out = minmax(scores)
    assert out[0].tolist() == [0.0, 1.0, 0.5]
    assert out[1].tolist() == [0.0, 0.0, 0.0]


def test_hybrid_weights_normalised_scores_equally() -> None:
    bm25 = np.array([[0.0, 10.0, 5.0]])
    dense = np.array([[0.9, 0.1, 0.5]])
    out = hybrid_scores(bm25, dense, 0.5, 0.5)
    assert np.allclose(out, [[0.5, 0.5, 0.5]])


@pytest.mark.parametrize(
    ("text", "aliases", "found"),
    [
        ("Denver Broncos won the game.", ["denver broncos"], True),
        ("The Parisian cafe", ["Paris"], False),  # word boundary
        ("Born in the U.S. in 1950", ["US"], True),  # normalisation
        ("It happened in 19500 BC", ["1950"], False),
        ("Nothing here", ["", "x y"], False),
    ],
)
def test_contains_alias(text: str, aliases: list[str], found: bool) -> None:
    assert contains_alias(text, aliases) is found


def test_alias_hidden_in_a_negative_excludes_it() -> None:
    question = {
        "qid": "q1",
        "question": "Who won Super Bowl 50?",
        "answers": ["Denver Broncos"],
        "all_answers": ["Denver Broncos", "the Broncos"],
        "gold_passages": [_passage("g", "The Denver Broncos won Super Bowl 50.")],
    }
    corpus = [
        _passage("g", "The Denver Broncos won Super Bowl 50."),
        _passage("leak", "Super Bowl 50 was played in 2016; THE BRONCOS, from Denver, won."),
        _passage("n1", "Super Bowl 49 was won by the Patriots."),
        _passage("n2", "Super Bowl 51 was won by the Patriots."),
        _passage("dup", "The Denver Broncos won Super Bowl 50."),  # same text as gold
    ]
    hybrid = np.array([1.0, 0.9, 0.8, 0.7, 0.95])
    ranked = rank_question(
        question, corpus, hybrid, hybrid, hybrid, n_candidates=5, n_hard_negatives=5
    )
    assert ranked["hard_negatives"] == ["n1", "n2"]
    by_pid = {c["pid"]: c for c in ranked["candidates"]}
    assert by_pid["leak"]["has_alias"] is True and by_pid["leak"]["gold"] is False
    assert by_pid["dup"]["gold"] is True
    assert ranked["gold_ranks"] == [1, 2]
    assert [c["rank"] for c in ranked["candidates"]] == [1, 2, 3, 4, 5]


def test_hard_negative_scan_goes_past_the_kept_candidates() -> None:
    question = {
        "qid": "q",
        "question": "?",
        "answers": ["gold"],
        "gold_passages": [_passage("g", "gold")],
    }
    corpus = [_passage("g", "gold")] + [_passage(f"a{i}", "has gold in it") for i in range(5)]
    corpus += [_passage("late", "clean passage")]
    scores = np.linspace(1.0, 0.0, len(corpus))
    ranked = rank_question(
        question, corpus, scores, scores, scores, n_candidates=2, n_hard_negatives=3
    )
    assert len(ranked["candidates"]) == 2
    assert ranked["hard_negatives"] == ["late"]


def test_bm25_prefers_the_passage_sharing_query_terms() -> None:
    texts = ["cats purr loudly", "dogs bark at night", "the stock market fell"]
    scores = bm25_scores(texts, ["why do dogs bark"])
    assert scores.shape == (1, 3)
    assert int(np.argmax(scores[0])) == 1


def test_real_encoder_ranks_the_relevant_passage_first(encoder_dir) -> None:
    encoder = load_encoder(encoder_dir)
    corpus = [
        _passage("a", "The Eiffel Tower is a wrought-iron tower in Paris.", "Eiffel Tower"),
        _passage("b", "Photosynthesis converts light into chemical energy.", "Photosynthesis"),
    ]
    vectors = embed(encoder, [passage_text(p) for p in corpus])
    assert vectors.shape == (2, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    query = embed(encoder, ["Which city has the Eiffel Tower?"])
    assert int(np.argmax(query @ vectors.T)) == 0
