"""The paired conditions: composition, seeded shuffles, gold reuse, the token cap."""

from __future__ import annotations

import random

import pytest

from grabrag.contexts.paired import (
    PAIRED_CONDITIONS,
    build_contexts,
    condition_passages,
    load_token_counter,
    water_fill,
)


@pytest.fixture(scope="module")
def counter(encoder_dir):
    return load_token_counter(str(encoder_dir))


def _p(pid: str, text: str = "") -> dict[str, str]:
    return {"pid": pid, "title": f"T{pid}", "text": text or f"passage {pid}"}


def _question(qid: str, golds: int) -> dict:
    return {
        "qid": qid,
        "question": f"question {qid}?",
        "answers": ["answer"],
        "gold_passages": [_p(f"{qid}g{k}", f"gold {k} holds the answer") for k in range(golds)],
    }


def test_gold_is_reused_in_turn_to_fill_q100_and_q50() -> None:
    gold = [_p("g0"), _p("g1")]
    negatives = [_p(f"n{k}") for k in range(10)]
    q100 = condition_passages("Q100", gold, negatives, 5, 3)
    assert [p["pid"] for p in q100] == ["g0", "g1", "g0", "g1", "g0"]
    q50 = condition_passages("Q50", gold, negatives, 5, 3)
    assert [p["pid"] for p in q50] == ["g0", "g1", "g0", "n0", "n1"]
    assert [p["role"] for p in q50] == ["gold"] * 3 + ["hard_negative"] * 2
    assert [p["pid"] for p in condition_passages("Q0", gold, negatives, 5, 3)] == [
        "n0",
        "n1",
        "n2",
        "n3",
        "n4",
    ]
    assert condition_passages("Qclosed", gold, negatives, 5, 3) == []
    with pytest.raises(ValueError, match="unknown condition"):
        condition_passages("QZ", gold, negatives, 5, 3)


def test_more_golds_than_slots_takes_the_first() -> None:
    gold = [_p(f"g{k}") for k in range(7)]
    assert [p["pid"] for p in condition_passages("Q100", gold, [], 5, 3)] == [
        "g0",
        "g1",
        "g2",
        "g3",
        "g4",
    ]


@pytest.mark.parametrize(
    ("lengths", "budget", "cap"),
    [
        ([100, 100], 300, None),
        ([1000, 100, 100], 500, 300),
        ([400] * 5, 1500, 300),
        ([10, 2000], 1000, 990),
    ],
)
def test_water_fill(lengths: list[int], budget: int, cap: int | None) -> None:
    assert water_fill(lengths, budget) == cap
    if cap is not None:
        assert sum(min(n, cap) for n in lengths) <= budget
        assert sum(min(n, cap + 1) for n in lengths) > budget


def _inputs(n_questions: int, golds: int = 1, negatives: int = 8):
    questions = [_question(f"q{i}", golds) for i in range(n_questions)]
    corpus = {}
    retrieval = {}
    for q in questions:
        for p in q["gold_passages"]:
            corpus[p["pid"]] = p
        negs = [_p(f"{q['qid']}n{k}") for k in range(negatives)]
        corpus.update({p["pid"]: p for p in negs})
        retrieval[q["qid"]] = {"hard_negatives": [p["pid"] for p in negs]}
    return questions, retrieval, corpus


def test_shuffle_is_random_42_plus_i(counter) -> None:
    questions, retrieval, corpus = _inputs(3)
    rows, _ = build_contexts(questions, retrieval, corpus, seed=42, counter=counter)
    for i, row in enumerate(rows["Q0"]):
        expected = [f"q{i}n{k}" for k in range(5)]
        random.Random(42 + i).shuffle(expected)
        assert [p["pid"] for p in row["passages"]] == expected
        assert row["index"] == i


def test_seeded_reproducibility_and_seed_change(counter) -> None:
    questions, retrieval, corpus = _inputs(4)
    first, _ = build_contexts(questions, retrieval, corpus, seed=42, counter=counter)
    again, _ = build_contexts(questions, retrieval, corpus, seed=42, counter=counter)
    other, _ = build_contexts(questions, retrieval, corpus, seed=43, counter=counter)
    assert first == again
    assert [r["context"] for r in first["Q0"]] != [r["context"] for r in other["Q0"]]


def test_too_few_hard_negatives_drops_the_question_everywhere(counter) -> None:
    questions, retrieval, corpus = _inputs(3)
    retrieval["q1"]["hard_negatives"] = retrieval["q1"]["hard_negatives"][:4]
    rows, report = build_contexts(questions, retrieval, corpus, seed=42, counter=counter)
    assert report["dropped_insufficient_hard_negatives"] == ["q1"]
    assert report["kept"] == 2
    for condition in PAIRED_CONDITIONS:
        assert [r["qid"] for r in rows[condition]] == ["q0", "q2"]
    # positions keep their original i: q2 still shuffles with Random(42 + 2)
    assert rows["Q0"][1]["index"] == 2


def test_token_cap_cuts_the_longest_passages_first(counter) -> None:
    questions, retrieval, corpus = _inputs(1)
    long_text = " ".join(f"word{k}" for k in range(2000))
    corpus["q0n0"] = {**corpus["q0n0"], "text": long_text}
    rows, report = build_contexts(
        questions, retrieval, corpus, seed=42, counter=counter, max_tokens=200
    )
    row = rows["Q0"][0]
    assert row["truncated"] and row["context_tokens"] <= 200
    cut = [p for p in row["passages"] if "truncated_from_tokens" in p]
    assert [p["pid"] for p in cut] == ["q0n0"]
    assert long_text.startswith(cut[0]["text"]) and len(cut[0]["text"]) < len(long_text)
    short = [p for p in row["passages"] if p["pid"] != "q0n0"]
    assert all(p["text"] == corpus[p["pid"]]["text"] for p in short)
    assert report["truncated_contexts"]["Q0"] == 1


def _one_gold(text: str, answers: list[str]) -> tuple[list, dict, dict]:
    question = {"qid": "q0", "question": "?", "answers": answers, "gold_passages": [_p("g", text)]}
    negatives = [_p(f"n{k}") for k in range(5)]
    corpus = {p["pid"]: p for p in [question["gold_passages"][0], *negatives]}
    return [question], {"q0": {"hard_negatives": [p["pid"] for p in negatives]}}, corpus


def test_the_cap_keeps_the_answer_of_a_reused_long_gold_passage(counter) -> None:
    # one 400-token gold passage ("hay" and "needle" are one token each), the answer at
    # token 349: Q100 reuses it five times, so water-filling cuts every copy to
    # 1500 / 5 = 300 tokens, and its first 300 tokens lack the answer. Each copy keeps
    # the 300-token window centred on it instead: start 349 - (300 - 1) // 2 = 200,
    # clamped to 400 - 300 = 100, so the window is the passage's last 300 tokens.
    words = ["hay"] * 400
    words[349] = "needle"
    text = " ".join(words)
    assert counter.count(text) == 400
    questions, retrieval, corpus = _one_gold(text, ["needle"])
    rows, report = build_contexts(questions, retrieval, corpus, seed=42, counter=counter)
    # Q50's three copies (1,200 tokens) and two short negatives fit uncut
    for condition, copies, truncated in (("Q100", 5, True), ("Q50", 3, False)):
        row = rows[condition][0]
        golds = [p for p in row["passages"] if p["role"] == "gold"]
        assert len(golds) == copies and row["truncated"] == truncated
        assert row["answer_in_context"] and row["context_tokens"] <= 1500
    q100 = [p for p in rows["Q100"][0]["passages"] if p["role"] == "gold"]
    assert {p["window_start_token"] for p in q100} == {100}
    assert {p["tokens"] for p in q100} == {300}
    assert {p["text"] for p in q100} == {" ".join(words[100:])}
    assert report["truncated_contexts_without_answer"] == {c: 0 for c in PAIRED_CONDITIONS}
    # a passage whose head keeps the answer is cut from its tail as before
    words[349], words[5] = "hay", "needle"
    questions, retrieval, corpus = _one_gold(" ".join(words), ["needle"])
    rows, _ = build_contexts(questions, retrieval, corpus, seed=42, counter=counter)
    head = [p for p in rows["Q100"][0]["passages"] if p["role"] == "gold"]
    assert {p["text"] for p in head} == {" ".join(words[:300])}
    assert not any("window_start_token" in p for p in head)


def test_answer_lost_to_the_cap_is_flagged(counter) -> None:
    # the answer span (4 tokens) is longer than a copy's share of a 10-token budget (2):
    # no window holds it, the copies keep their heads and the loss is counted
    text = " ".join(["hay"] * 60) + " needle haystack"
    questions, retrieval, corpus = _one_gold(text, ["needle haystack"])
    rows, report = build_contexts(
        questions, retrieval, corpus, seed=42, counter=counter, max_tokens=10
    )
    assert rows["Q100"][0]["truncated"] and not rows["Q100"][0]["answer_in_context"]
    assert report["truncated_contexts_without_answer"]["Q100"] == 1
    assert report["truncated_contexts_without_answer"]["Q0"] == 0


def test_raw_tokenizer_counts_and_cuts_as_the_transformers_one(encoder_dir) -> None:
    """The context stage reads tokenizer.json with the `tokenizers` library; it must give
    the transformers fast tokenizer's counts and cut points on real passages."""
    import json

    from transformers import AutoTokenizer

    from grabrag.contexts.paired import TokenCounter
    from grabrag.data.assets import resolve

    from .conftest import RESOURCES

    squad = resolve(RESOURCES / "squad-v1.1-dev" / "manifest.json")
    data = json.loads(squad.read_text())["data"]
    texts = [p["context"] for article in data[:6] for p in article["paragraphs"]]
    texts += ["", "Ünïcödé — “quotes” and 1,234.5 numbers", "word " * 700]
    raw = load_token_counter(str(encoder_dir))
    wrapped = TokenCounter(AutoTokenizer.from_pretrained(str(encoder_dir), local_files_only=True))
    assert type(raw.tokenizer).__name__ == "_RawFastTokenizer"
    assert len(texts) > 200
    for text in texts:
        assert raw.count(text) == wrapped.count(text)
        for budget in (0, 1, 37, 150, 600):
            assert raw.truncate(text, budget) == wrapped.truncate(text, budget)
