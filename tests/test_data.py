"""Unit tests for grabrag.data.datasets: adapters, filters, seeded sampling, corpus and bad input.

Fixtures under tests/fixtures/data are small files in the exact format of the real sources:

- squad_v1.1_dev_sample.json: real SQuAD v1.1 dev paragraphs with a subset of their questions
  (one answer list longer than 5 tokens only, one all-"yes").
- bigbench_knowledge_conflicts_task.json: real examples 0, 1, 2291, 9744 (the defective one
  whose target_scores holds only the target), 458 and 29 of the BIG-bench task
  contextual_parametric_knowledge_conflicts.
- nq_open_gold_validation_sample.jsonl: florin-hf/nq_open_gold rows as exported to JSONL.
- hotpot_qa_distractor_validation_sample.jsonl: hotpotqa/hotpot_qa distractor rows.
- common_schema_sample.jsonl: local rows in the common schema, one per exclusion reason.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from grabrag.core.errors import DataError, GrabragError
from grabrag.data.datasets import (
    ADAPTERS,
    MAX_MALFORMED_FRACTION,
    AdapterOutput,
    Passage,
    RawExample,
    adapt_bigbench_knowledge_conflicts,
    adapt_hf_hotpotqa_distractor,
    adapt_hf_nq_open_gold,
    adapt_jsonl,
    adapt_squad_v1,
    adapter_code_file,
    build_dataset,
    dataset_gold_texts,
    exclusion_reason,
    read_dataset,
    register_adapter,
)

FIXTURES = Path(__file__).parent / "fixtures" / "data"
SQUAD = FIXTURES / "squad_v1.1_dev_sample.json"
BIGBENCH = FIXTURES / "bigbench_knowledge_conflicts_task.json"
NQ = FIXTURES / "nq_open_gold_validation_sample.jsonl"
HOTPOT = FIXTURES / "hotpot_qa_distractor_validation_sample.jsonl"
LOCAL = FIXTURES / "common_schema_sample.jsonl"

# Index of the defective example (real index 9744) inside the BIG-bench fixture.
BIGBENCH_DEFECT_INDEX = 3


# --- helpers ------------------------------------------------------------------------------


def _sha_pid(title: str, text: str) -> str:
    return "p" + hashlib.sha1(f"{title}\n{text}".encode()).hexdigest()[:12]


def _write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    return path


def _read_jsonl_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def _bigbench_filler(i: int) -> dict[str, Any]:
    """A well-formed example in the BIG-bench format (tokenised text, one swapped name)."""
    substitute = f"Jeremy Johnson {i}"
    return {
        "input": (
            f"\nQuestion: who played sheriff number {i} in the western series ?"
            f"\nContext: {substitute} as Sheriff No. {i} , a role {substitute} kept for "
            f"{i % 7 + 2} seasons ."
        ),
        "target": substitute,
        "target_scores": {substitute: 1, f"Claude Rains {i}": 0},
    }


def _padded_bigbench(tmp_path: Path, total: int, extra_defects: int = 0) -> Path:
    """The fixture task plus well-formed fillers up to ``total`` examples (+ extra defects)."""
    task = json.loads(BIGBENCH.read_text("utf-8"))
    examples = task["examples"]
    examples += [_bigbench_filler(i) for i in range(total - len(examples))]
    examples += [
        {
            "input": "\nQuestion: who sang it ?\nContext: It was sung by Ninja .",
            "target": "Ninja",
            "target_scores": {"Ninja": 0},
        }
        for _ in range(extra_defects)
    ]
    path = tmp_path / "task.json"
    path.write_text(json.dumps(task, indent=4, ensure_ascii=False), "utf-8")
    return path


def _many_local_questions(tmp_path: Path, n: int, titles: tuple[str, ...] = ("Topic",)) -> Path:
    rows = [
        {
            "qid": f"gen-{i:03d}",
            "question": f"What is the code name of project {i}?",
            "answers": [f"Codename {i}"],
            "gold_passages": [
                {
                    "title": titles[i % len(titles)],
                    "text": f"Project {i} was known internally as Codename {i}.",
                }
            ],
        }
        for i in range(n)
    ]
    return _write_jsonl(tmp_path / "many.jsonl", rows)


def _by_qid(output: AdapterOutput) -> dict[str, Any]:
    return {e.qid: e for e in output.examples}


# --- adapters on their fixtures -------------------------------------------------------------


def test_squad_adapter_questions_answers_and_paragraphs() -> None:
    out = adapt_squad_v1(SQUAD)
    assert out.malformed == []
    assert [e.qid for e in out.examples] == [
        "56be4db0acb8001400a502ec",
        "56be4db0acb8001400a502ed",
        "56be4db0acb8001400a502ee",
        "56be5438acb8001400a5031a",
        "56d20564e7d4791d00902612",
        "5733a5f54776f41900660f45",
        "5733a5f54776f41900660f44",
        "57336755d058e614000b5a3f",
        "56e190bce3433e1400422fcb",
    ]
    ex = _by_qid(out)
    first = ex["56be4db0acb8001400a502ec"]
    assert first.question == "Which NFL team represented the AFC at Super Bowl 50?"
    # Three identical annotations collapse into one alias.
    assert first.answers == ["Denver Broncos"]
    # Title underscores become spaces; the question's own paragraph is its gold passage.
    assert len(first.gold_passages) == 1
    gold = first.gold_passages[0]
    assert gold.title == "Super Bowl 50"
    assert gold.text.startswith("Super Bowl 50 was an American football game")
    assert gold.text[177 : 177 + len("Denver Broncos")] == "Denver Broncos"
    # Distinct annotations stay as aliases, in order.
    assert ex["56be4db0acb8001400a502ee"].answers == [
        "Santa Clara, California",
        "Levi's Stadium",
        "Levi's Stadium in the San Francisco Bay Area at Santa Clara, California.",
    ]
    assert ex["5733a5f54776f41900660f44"].answers == ["Maria Skłodowska-Curie"]
    assert ex["56e190bce3433e1400422fcb"].answers == ["yes"]
    assert ex["56e190bce3433e1400422fcb"].gold_passages[0].title == (
        "Computational complexity theory"
    )
    # Every paragraph (5 in the fixture) is a corpus passage.
    raw = json.loads(SQUAD.read_text("utf-8"))
    contexts = [p["context"] for a in raw["data"] for p in a["paragraphs"]]
    assert [p.text for p in out.other_passages] == contexts
    assert len(out.other_passages) == 5


def test_squad_build_drops_yes_no_and_long_answers() -> None:
    questions, corpus, report = build_dataset(adapt_squad_v1(SQUAD), n_questions=100, seed=0)
    qids = {q["qid"] for q in questions}
    assert "56e190bce3433e1400422fcb" not in qids  # answer "yes"
    assert "56d20564e7d4791d00902612" not in qids  # every alias has more than 5 tokens
    assert len(qids) == 7
    assert report["excluded"] == {"no_short_answer": 1, "yes_no_answer": 1}
    assert report["eligible"] == 7
    assert report["source_questions"] == 9
    where = next(q for q in questions if q["qid"] == "56be4db0acb8001400a502ee")
    # The long alias is kept in all_answers but not among the scored answers.
    assert where["answers"] == ["Santa Clara, California", "Levi's Stadium"]
    assert len(where["all_answers"]) == 3
    # All five paragraphs, including the gold of excluded questions, are in the corpus.
    assert len(corpus) == 5 == report["corpus_passages"] == report["source_passages"]


def test_bigbench_adapter_rebuilds_gold_and_skips_defect(tmp_path: Path) -> None:
    # One defect is tolerated only when it is at most 1% of the rows, as in the real
    # 17,528-example file, so the fixture is padded with well-formed examples to 100.
    path = _padded_bigbench(tmp_path, total=100)
    out = adapt_bigbench_knowledge_conflicts(path)
    assert len(out.examples) == 99
    assert len(out.malformed) == 1
    problem = out.malformed[0]
    assert f"examples[{BIGBENCH_DEFECT_INDEX}]" in problem
    assert str(path) in problem
    assert "Robert Mitchum" in problem
    qids = [e.qid for e in out.examples]
    assert f"bbkc-{BIGBENCH_DEFECT_INDEX:05d}" not in qids
    assert qids[:5] == ["bbkc-00000", "bbkc-00001", "bbkc-00002", "bbkc-00004", "bbkc-00005"]
    assert out.other_passages == []

    ex = _by_qid(out)
    candace = ex["bbkc-00000"]
    assert candace.question == "who does candace like in phineas and ferb?"
    assert candace.answers == ["Jeremy Johnson"]
    assert len(candace.gold_passages) == 1
    gold = candace.gold_passages[0]
    assert gold.title == ""
    assert gold.text.startswith("Candace Flynn ( voiced by Ashley Tisdale )")
    assert "obvious crush on Jeremy Johnson , but" in gold.text
    assert "Griselda Blanco" not in gold.text
    swap = candace.extra["reference_swap"]
    assert swap["substitute"] == "Griselda Blanco"
    assert "obvious crush on Griselda Blanco , but" in swap["passage"]
    assert not swap["passage"].startswith((" ", "\n"))

    # Every occurrence of the substitute is put back, also inside a longer word: the
    # dataset made its swaps by plain string replacement ("Malachias" -> "Deni Avdijaas").
    skepta = ex["bbkc-00002"]
    assert skepta.answers == ["Trevor Jones"]
    assert skepta.gold_passages[0].text == "Composers : Trevor Jones and Trevor Jones"
    malachi = ex["bbkc-00004"]
    assert malachi.answers == ["Malachi"]
    assert malachi.gold_passages[0].text.startswith("Malachi ( or Malachias ;")
    assert "making Malachi the last book" in malachi.gold_passages[0].text
    assert "Deni Avdija" not in malachi.gold_passages[0].text
    assert malachi.extra["reference_swap"]["passage"].count("Deni Avdija") == 3

    sanchez = ex["bbkc-00001"]
    assert sanchez.gold_passages[0].text == (
        "Claude Rains as Senator Joseph Harrison `` Joe '' Paine"
    )


def test_bigbench_defect_reported_in_build_report(tmp_path: Path) -> None:
    out = adapt_bigbench_knowledge_conflicts(_padded_bigbench(tmp_path, total=100))
    questions, corpus, report = build_dataset(out, n_questions=10, seed=3)
    assert report["source_questions"] == 100
    assert report["malformed_rows"] == out.malformed
    assert len(report["malformed_rows"]) == 1
    assert report["eligible"] == 99
    assert len(questions) == 10
    # BIG-bench gold passages have no title; the corpus holds every rebuilt passage.
    assert len(corpus) == 99
    assert all(p["title"] == "" for p in corpus)


def test_nq_open_gold_adapter() -> None:
    out = adapt_hf_nq_open_gold(NQ)
    assert out.malformed == []
    assert out.other_passages == []
    assert [e.qid for e in out.examples] == [
        "nq--1381519658428584457",
        "nq-8463306133429399061",
        "nq-4120931256421590312",
        "nq--6802534628745605728",
        "nq-5225754983651766092",
    ]
    rows = _read_jsonl_rows(NQ)
    for example, row in zip(out.examples, rows, strict=True):
        assert example.question == row["question"]
        assert [p.text for p in example.gold_passages] == [row["text"]]
        assert example.gold_passages[0].title == row.get("title", "")
    ex = _by_qid(out)
    assert ex["nq--1381519658428584457"].answers == ["Wilhelm Conrad Röntgen"]
    # Aliases are stripped and deduplicated; a row without 'title' gets an empty title.
    assert ex["nq-8463306133429399061"].answers == ["Linda Davis"]
    assert ex["nq-8463306133429399061"].gold_passages[0].title == ""
    assert ex["nq-4120931256421590312"].answers == [
        "Fernie Alpine Resort",
        "Fernie , British Columbia",
    ]

    questions, _, report = build_dataset(out, n_questions=10, seed=0)
    assert report["excluded"] == {"no_short_answer": 1}
    assert "nq--6802534628745605728" not in {q["qid"] for q in questions}


def test_hotpotqa_adapter_gold_and_distractors() -> None:
    out = adapt_hf_hotpotqa_distractor(HOTPOT)
    assert out.malformed == []
    rows = _read_jsonl_rows(HOTPOT)
    assert [e.qid for e in out.examples] == [r["id"] for r in rows]
    ex = _by_qid(out)

    derrickson = ex["5a8b57f25542995d1e6f1371"]
    assert derrickson.question == "Were Scott Derrickson and Ed Wood of the same nationality?"
    assert derrickson.answers == ["yes"]
    assert derrickson.extra == {"type": "comparison", "level": "hard"}
    assert [p.title for p in derrickson.gold_passages] == ["Scott Derrickson", "Ed Wood"]
    # Sentences carry their own leading spaces: joined as they are, no doubled space.
    assert derrickson.gold_passages[0].text == (
        "Scott Derrickson (born July 16, 1966) is an American director, screenwriter and "
        "producer. He lives in Los Angeles, California. He is best known for directing horror "
        'films such as "Sinister".'
    )

    temple = ex["5a8c7595554299585d9e36b6"]
    assert temple.answers == ["Chief of Protocol"]
    assert temple.extra == {"type": "bridge", "level": "hard"}
    # A title listed twice in supporting_facts (two sentences) is still one gold paragraph.
    assert [p.title for p in temple.gold_passages] == [
        "Kiss and Tell (1945 film)",
        "Shirley Temple",
    ]
    assert "Chief of Protocol of the United States." in temple.gold_passages[1].text

    # The other eight paragraphs of each question are corpus distractors, in row order.
    assert len(out.other_passages) == 3 * 8
    gold_titles = {p.title for e in out.examples for p in e.gold_passages}
    assert not gold_titles & {p.title for p in out.other_passages}
    expected_others = [
        (title, "".join(sents))
        for r in rows
        for title, sents in zip(r["context"]["title"], r["context"]["sentences"], strict=True)
        if title not in r["supporting_facts"]["title"]
    ]
    assert [(p.title, p.text) for p in out.other_passages] == expected_others
    assert out.other_passages[0].title == "Ed Wood (film)"
    assert out.other_passages[0].text == (
        "Ed Wood is a 1994 American biographical period comedy-drama film directed and "
        "produced by Tim Burton. It stars Johnny Depp as cult filmmaker Ed Wood."
    )


def test_hotpotqa_build_drops_yes_no_comparison() -> None:
    questions, corpus, report = build_dataset(
        adapt_hf_hotpotqa_distractor(HOTPOT), n_questions=10, seed=0
    )
    assert sorted(q["qid"] for q in questions) == [
        "5a7a06935542990198eaf050",
        "5a8c7595554299585d9e36b6",
    ]
    assert report["excluded"] == {"yes_no_answer": 1}
    assert report["gold_passages_per_question"] == {2: 2}
    # 3 questions x 10 paragraphs, all distinct.
    assert len(corpus) == 30
    assert "Woodson, Arkansas" in {p["title"] for p in corpus}


def test_jsonl_adapter_common_schema() -> None:
    out = adapt_jsonl(LOCAL)
    assert out.malformed == []
    assert out.other_passages == []
    assert [e.qid for e in out.examples] == [
        "loc-001",
        "loc-002",
        "loc-003",
        "loc-004",
        "loc-005",
        "loc-006",
        "7",  # an int qid becomes a string
        "loc-008",
        "loc-009",
    ]
    ex = _by_qid(out)
    assert ex["loc-001"].answers == ["Ada Lovelace", "Augusta Ada King"]
    assert ex["loc-001"].extra == {"source": "handmade"}
    assert ex["loc-002"].extra == {}
    assert [p.title for p in ex["loc-002"].gold_passages] == [
        "Analytical Engine",
        "Analytical Engine",
        "Charles Babbage",
    ]
    assert ex["loc-009"].gold_passages[0].title == ""
    assert ex["loc-003"].gold_passages == []


def test_jsonl_pid_is_recomputed_and_duplicate_gold_merged() -> None:
    questions, corpus, _ = build_dataset(adapt_jsonl(LOCAL), n_questions=100, seed=0)
    babbage = next(q for q in questions if q["qid"] == "loc-002")
    # The stale 'pid' in the file is ignored; the two identical passages become one.
    assert len(babbage["gold_passages"]) == 2
    for passage in babbage["gold_passages"]:
        assert passage["pid"] == _sha_pid(passage["title"], passage["text"])
        assert passage["pid"] != "p-stale-id"
    assert "p-stale-id" not in {p["pid"] for p in corpus}


def test_adapter_registry_names() -> None:
    assert ADAPTERS == {
        "squad_v1": adapt_squad_v1,
        "bigbench_knowledge_conflicts": adapt_bigbench_knowledge_conflicts,
        "hf_nq_open_gold": adapt_hf_nq_open_gold,
        "hf_hotpotqa_distractor": adapt_hf_hotpotqa_distractor,
        "jsonl": adapt_jsonl,
    }


# --- filters and report -------------------------------------------------------------------


def test_build_report_counts_every_exclusion_reason() -> None:
    questions, corpus, report = build_dataset(adapt_jsonl(LOCAL), n_questions=3, seed=11)
    assert report["excluded"] == {
        "empty_question": 1,  # loc-006
        "no_answer": 1,  # loc-005
        "no_gold_passage": 2,  # loc-003 (none), loc-004 (whitespace only)
        "yes_no_answer": 1,  # loc-008 ("No.")
    }
    assert report["source_questions"] == 9
    assert report["malformed_rows"] == []
    assert report["eligible"] == 4
    assert report["sampled"] == 3
    assert report["requested"] == 3
    assert report["short_of_request"] == 0
    assert report["seed"] == 11
    assert report["max_answer_tokens"] == 5
    assert report["corpus_passages"] == len(corpus)
    assert sum(report["gold_passages_per_question"].values()) == 3
    assert {q["qid"] for q in questions} <= {"loc-001", "loc-002", "7", "loc-009"}


def test_build_short_of_request() -> None:
    questions, _, report = build_dataset(adapt_jsonl(LOCAL), n_questions=50, seed=0)
    assert sorted(q["qid"] for q in questions) == ["7", "loc-001", "loc-002", "loc-009"]
    assert report["sampled"] == 4
    assert report["requested"] == 50
    assert report["short_of_request"] == 46


def test_question_record_shape() -> None:
    questions, _, _ = build_dataset(adapt_jsonl(LOCAL), n_questions=100, seed=0)
    ada = next(q for q in questions if q["qid"] == "loc-001")
    assert set(ada) == {"qid", "question", "answers", "all_answers", "gold_passages", "extra"}
    assert ada["question"] == "Who wrote the first published algorithm for the Analytical Engine?"
    assert ada["gold_passages"] == [
        {
            "pid": _sha_pid("Ada Lovelace", ada["gold_passages"][0]["text"]),
            "title": "Ada Lovelace",
            "text": ada["gold_passages"][0]["text"],
        }
    ]


@pytest.mark.parametrize(
    ("answers", "max_tokens", "reason"),
    [
        (["Denver Broncos"], 5, None),
        (["yes"], 5, "yes_no_answer"),
        (["No."], 5, "yes_no_answer"),
        (["YES", "no"], 5, "yes_no_answer"),
        (["one two three four five"], 5, None),  # exactly max_answer_tokens is short
        (["one two three four five six"], 5, "no_short_answer"),
        (["one two three four five six", "six"], 5, None),
        (["one two three"], 2, "no_short_answer"),
        (["..."], 5, "no_short_answer"),  # no word token at all
        ([], 5, "no_answer"),
    ],
)
def test_exclusion_reason(answers: list[str], max_tokens: int, reason: str | None) -> None:
    example = RawExample("q", "A question?", answers, [Passage("T", "Some gold text.")])
    assert exclusion_reason(example, max_tokens) == reason


def test_exclusion_reason_order() -> None:
    no_gold: list[Passage] = []
    assert exclusion_reason(RawExample("q", " ", [], no_gold), 5) == "empty_question"
    assert exclusion_reason(RawExample("q", "Q?", ["yes"], no_gold), 5) == "yes_no_answer"
    assert exclusion_reason(RawExample("q", "Q?", ["Paris"], no_gold), 5) == "no_gold_passage"
    blank = [Passage("Paris", " \n ")]
    assert exclusion_reason(RawExample("q", "Q?", ["Paris"], blank), 5) == "no_gold_passage"


def test_max_answer_tokens_changes_eligibility() -> None:
    out = adapt_hf_nq_open_gold(NQ)
    _, _, report5 = build_dataset(out, n_questions=10, seed=0, max_answer_tokens=5)
    questions10, _, report10 = build_dataset(out, n_questions=10, seed=0, max_answer_tokens=10)
    assert report5["eligible"] == 4
    assert report10["eligible"] == 5
    assert report10["excluded"] == {}
    assert "nq--6802534628745605728" in {q["qid"] for q in questions10}
    # With 2 tokens only "Linda Davis" and "December 1972" are short enough.
    questions2, _, report2 = build_dataset(out, n_questions=10, seed=0, max_answer_tokens=2)
    assert report2["excluded"] == {"no_short_answer": 3}
    moon = next(q for q in questions2 if q["qid"] == "nq-5225754983651766092")
    assert moon["answers"] == ["December 1972"]
    assert moon["all_answers"] == ["14 December 1972 UTC", "December 1972"]
    # No alias has a single token.
    with pytest.raises(DataError, match=r"\{'no_short_answer': 5\}"):
        build_dataset(out, n_questions=10, seed=0, max_answer_tokens=1)


# --- seeded sampling ------------------------------------------------------------------------


def test_sampling_same_seed_identical(tmp_path: Path) -> None:
    out = adapt_jsonl(_many_local_questions(tmp_path, 60))
    first = build_dataset(out, n_questions=12, seed=2024)
    second = build_dataset(adapt_jsonl(tmp_path / "many.jsonl"), n_questions=12, seed=2024)
    assert first == second
    assert json.dumps(first) == json.dumps(second)  # order included


def test_sampling_different_seed_different_sample(tmp_path: Path) -> None:
    out = adapt_jsonl(_many_local_questions(tmp_path, 60))
    qids_a = [q["qid"] for q in build_dataset(out, n_questions=12, seed=1)[0]]
    qids_b = [q["qid"] for q in build_dataset(out, n_questions=12, seed=2)[0]]
    assert len(qids_a) == len(set(qids_a)) == 12
    assert set(qids_a) != set(qids_b)


def test_sampling_all_is_a_permutation(tmp_path: Path) -> None:
    out = adapt_jsonl(_many_local_questions(tmp_path, 20))
    questions, _, _ = build_dataset(out, n_questions=20, seed=5)
    assert sorted(q["qid"] for q in questions) == [f"gen-{i:03d}" for i in range(20)]


def test_sampling_bigbench_reproducible(tmp_path: Path) -> None:
    out = adapt_bigbench_knowledge_conflicts(_padded_bigbench(tmp_path, total=100))
    a = build_dataset(out, n_questions=15, seed=7)
    b = build_dataset(out, n_questions=15, seed=7)
    c = build_dataset(out, n_questions=15, seed=8)
    assert a == b
    assert [q["qid"] for q in a[0]] != [q["qid"] for q in c[0]]


# --- corpus -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("adapter", "path"),
    [
        (adapt_squad_v1, SQUAD),
        (adapt_hf_nq_open_gold, NQ),
        (adapt_hf_hotpotqa_distractor, HOTPOT),
        (adapt_jsonl, LOCAL),
    ],
)
def test_corpus_holds_gold_of_sampled_questions(adapter: Any, path: Path) -> None:
    out = adapter(path)
    for seed in range(4):
        questions, corpus, _ = build_dataset(out, n_questions=2, seed=seed)
        by_pid = {p["pid"]: p for p in corpus}
        assert len(by_pid) == len(corpus)  # no duplicate passages
        for q in questions:
            assert q["gold_passages"]
            for gold in q["gold_passages"]:
                assert by_pid[gold["pid"]] == gold
        # Uncapped: every non-empty passage of the source, sorted by pid.
        assert [p["pid"] for p in corpus] == sorted(by_pid)
        assert all(p["text"].strip() for p in corpus)


def test_corpus_cap_keeps_gold_and_prefers_same_title(tmp_path: Path) -> None:
    titles = ("Alpha", "Beta", "Gamma")
    out = adapt_jsonl(_many_local_questions(tmp_path, 12, titles))  # 4 passages per title
    for seed in range(10):
        questions, corpus, report = build_dataset(
            out, n_questions=1, seed=seed, corpus_max_passages=3
        )
        (question,) = questions
        gold = question["gold_passages"][0]
        assert len(corpus) == 3
        assert report["corpus_passages"] == 3
        assert report["source_passages"] == 12
        assert corpus[0] == gold
        # The two other slots go to same-article passages, not to other titles.
        assert [p["title"] for p in corpus] == [gold["title"]] * 3
    # With more room than same-title passages, the rest is filled from other titles.
    questions, corpus, _ = build_dataset(out, n_questions=1, seed=0, corpus_max_passages=6)
    title = questions[0]["gold_passages"][0]["title"]
    assert [p["title"] for p in corpus[:4]] == [title] * 4
    assert len(corpus) == 6
    assert all(p["title"] != title for p in corpus[4:])


def test_corpus_cap_is_seeded(tmp_path: Path) -> None:
    out = adapt_jsonl(_many_local_questions(tmp_path, 40))
    a = build_dataset(out, n_questions=2, seed=4, corpus_max_passages=10)[1]
    b = build_dataset(out, n_questions=2, seed=4, corpus_max_passages=10)[1]
    assert a == b
    pids = {
        build_dataset(out, n_questions=2, seed=s, corpus_max_passages=10)[1][5]["pid"]
        for s in range(8)
    }
    assert len(pids) > 1  # the filler part depends on the seed


def test_corpus_cap_below_required_keeps_all_gold() -> None:
    out = adapt_hf_hotpotqa_distractor(HOTPOT)
    questions, corpus, report = build_dataset(out, n_questions=2, seed=0, corpus_max_passages=1)
    required = {p["pid"] for q in questions for p in q["gold_passages"]}
    assert len(required) == 4
    assert {p["pid"] for p in corpus} == required
    assert report["corpus_passages"] == 4


def test_corpus_cap_larger_than_pool_changes_nothing() -> None:
    out = adapt_hf_hotpotqa_distractor(HOTPOT)
    uncapped = build_dataset(out, n_questions=2, seed=0)[1]
    capped = build_dataset(out, n_questions=2, seed=0, corpus_max_passages=30)[1]
    assert capped == uncapped


def test_pid_content_addressed_and_stable(tmp_path: Path) -> None:
    passage = Passage("Super Bowl 50", "Super Bowl 50 was an American football game.")
    assert re.fullmatch(r"p[0-9a-f]{12}", passage.pid)
    assert passage.pid == _sha_pid(passage.title, passage.text)
    assert passage.as_dict() == {"pid": passage.pid, "title": passage.title, "text": passage.text}
    assert Passage("Super Bowl 51", passage.text).pid != passage.pid
    assert Passage(passage.title, passage.text + " ").pid != passage.pid

    # The same passage has the same pid whatever N, the seed and the cap are.
    out = adapt_squad_v1(SQUAD)
    seen: dict[str, str] = {}
    for n, seed, cap in [(7, 0, None), (1, 3, None), (3, 9, 2), (2, 1, 4)]:
        questions, corpus, _ = build_dataset(out, n_questions=n, seed=seed, corpus_max_passages=cap)
        for p in [*corpus, *(g for q in questions for g in q["gold_passages"])]:
            assert seen.setdefault(p["text"], p["pid"]) == p["pid"]
            assert p["pid"] == _sha_pid(p["title"], p["text"])
    assert len(seen) == 5


# --- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("adapter", [adapt_squad_v1, adapt_bigbench_knowledge_conflicts])
def test_json_adapters_reject_non_json(tmp_path: Path, adapter: Any) -> None:
    path = tmp_path / "task.json"
    path.write_text('{"data": [\n  {"title": "Super_Bowl_50",\n', "utf-8")
    with pytest.raises(DataError, match=r"not valid JSON at line \d+") as info:
        adapter(path)
    assert str(path) in str(info.value)
    path.write_text("<html>404 Not Found</html>\n", "utf-8")
    with pytest.raises(DataError, match="not valid JSON"):
        adapter(path)


@pytest.mark.parametrize(
    "adapter",
    [
        adapt_squad_v1,
        adapt_bigbench_knowledge_conflicts,
        adapt_hf_nq_open_gold,
        adapt_hf_hotpotqa_distractor,
        adapt_jsonl,
    ],
)
def test_missing_file(tmp_path: Path, adapter: Any) -> None:
    path = tmp_path / "absent.json"
    with pytest.raises(DataError, match="file not found") as info:
        adapter(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("adapter", "fixture"),
    [(adapt_hf_nq_open_gold, NQ), (adapt_hf_hotpotqa_distractor, HOTPOT), (adapt_jsonl, LOCAL)],
)
def test_jsonl_bad_line_names_file_and_line(tmp_path: Path, adapter: Any, fixture: Path) -> None:
    lines = fixture.read_text("utf-8").splitlines()
    lines.insert(2, lines[2][: len(lines[2]) // 2])  # a truncated row becomes line 3
    path = tmp_path / fixture.name
    path.write_text("\n".join(lines) + "\n", "utf-8")
    with pytest.raises(DataError) as info:
        adapter(path)
    message = str(info.value)
    assert str(path) in message
    assert "line 3" in message
    assert "not valid JSON" in message


def test_jsonl_line_not_an_object(tmp_path: Path) -> None:
    lines = NQ.read_text("utf-8").splitlines()
    path = tmp_path / "nq.jsonl"
    path.write_text("\n".join([lines[0], "", '["a", "list"]', *lines[1:]]) + "\n", "utf-8")
    with pytest.raises(DataError, match=r"line 3: expected a JSON object, got list"):
        adapt_hf_nq_open_gold(path)


@pytest.mark.parametrize(
    ("adapter", "fixture", "field"),
    [
        (adapt_hf_nq_open_gold, NQ, "example_id"),
        (adapt_hf_nq_open_gold, NQ, "question"),
        (adapt_hf_nq_open_gold, NQ, "answers"),
        (adapt_hf_nq_open_gold, NQ, "text"),
        (adapt_hf_hotpotqa_distractor, HOTPOT, "id"),
        (adapt_hf_hotpotqa_distractor, HOTPOT, "question"),
        (adapt_hf_hotpotqa_distractor, HOTPOT, "answer"),
        (adapt_hf_hotpotqa_distractor, HOTPOT, "supporting_facts"),
        (adapt_hf_hotpotqa_distractor, HOTPOT, "context"),
        (adapt_jsonl, LOCAL, "qid"),
        (adapt_jsonl, LOCAL, "question"),
        (adapt_jsonl, LOCAL, "answers"),
        (adapt_jsonl, LOCAL, "gold_passages"),
    ],
)
def test_missing_field_in_row_names_the_field(
    tmp_path: Path, adapter: Any, fixture: Path, field: str
) -> None:
    rows = _read_jsonl_rows(fixture)
    del rows[1][field]
    path = _write_jsonl(tmp_path / fixture.name, rows)
    with pytest.raises(DataError) as info:
        adapter(path)
    message = str(info.value)
    assert f"missing field '{field}'" in message
    assert f"{path}: row 2" in message
    assert f"1 of {len(rows)} rows are malformed" in message


def test_missing_nested_fields_name_the_field(tmp_path: Path) -> None:
    rows = _read_jsonl_rows(HOTPOT)
    del rows[0]["context"]["sentences"]
    path = _write_jsonl(tmp_path / "hotpot.jsonl", rows)
    with pytest.raises(
        DataError,
        match=r"row 1 \(id 5a8b57f25542995d1e6f1371\)\.context: "
        r"missing field 'sentences'",
    ):
        adapt_hf_hotpotqa_distractor(path)

    rows = _read_jsonl_rows(LOCAL)
    del rows[0]["gold_passages"][0]["text"]
    path = _write_jsonl(tmp_path / "local.jsonl", rows)
    with pytest.raises(DataError, match=r"row 1\.gold_passages\[0\]: missing field 'text'"):
        adapt_jsonl(path)


def test_squad_missing_fields_name_the_field(tmp_path: Path) -> None:
    data = json.loads(SQUAD.read_text("utf-8"))
    del data["data"][1]["paragraphs"][0]["qas"][1]["id"]
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(data), "utf-8")
    with pytest.raises(DataError) as info:
        adapt_squad_v1(path)
    assert "data[1].paragraphs[0].qas[1]: missing field 'id'" in str(info.value)
    assert "1 of 9 rows are malformed" in str(info.value)

    data = json.loads(SQUAD.read_text("utf-8"))
    del data["data"][0]["paragraphs"][1]["context"]
    path.write_text(json.dumps(data), "utf-8")
    with pytest.raises(DataError, match=r"data\[0\]\.paragraphs\[1\]: missing field 'context'"):
        adapt_squad_v1(path)

    data = json.loads(SQUAD.read_text("utf-8"))
    del data["data"][2]["title"]
    path.write_text(json.dumps(data), "utf-8")
    with pytest.raises(DataError, match=r"data\[2\]: missing field 'title'"):
        adapt_squad_v1(path)


def test_bigbench_missing_field_names_the_field(tmp_path: Path) -> None:
    task = json.loads(BIGBENCH.read_text("utf-8"))
    del task["examples"][0]["target_scores"]
    path = tmp_path / "task.json"
    path.write_text(json.dumps(task), "utf-8")
    with pytest.raises(DataError, match=r"examples\[0\]: missing field 'target_scores'"):
        adapt_bigbench_knowledge_conflicts(path)


def test_wrong_field_type_names_field_and_types(tmp_path: Path) -> None:
    rows = _read_jsonl_rows(NQ)
    rows[0]["answers"] = "Wilhelm Conrad Röntgen"
    path = _write_jsonl(tmp_path / "nq.jsonl", rows)
    with pytest.raises(DataError, match=r"row 1: field 'answers' should be list, got str"):
        adapt_hf_nq_open_gold(path)
    rows = _read_jsonl_rows(NQ)
    rows[0]["example_id"] = 1.5
    path = _write_jsonl(tmp_path / "nq.jsonl", rows)
    with pytest.raises(DataError, match=r"field 'example_id' should be int/str, got float"):
        adapt_hf_nq_open_gold(path)


@pytest.mark.parametrize(
    ("adapter", "fixture", "expected"),
    [
        (adapt_bigbench_knowledge_conflicts, SQUAD, "not a BIG-bench task file"),
        (adapt_squad_v1, BIGBENCH, "not a SQuAD v1.1 file"),
        (adapt_hf_nq_open_gold, SQUAD, "missing field 'example_id'"),
        (adapt_hf_nq_open_gold, HOTPOT, "missing field 'example_id'"),
        (adapt_hf_nq_open_gold, LOCAL, "missing field 'example_id'"),
        (adapt_hf_hotpotqa_distractor, NQ, "missing field 'context'"),
        (adapt_hf_hotpotqa_distractor, LOCAL, "missing field 'context'"),
        (adapt_jsonl, NQ, "missing field 'gold_passages'"),
        (adapt_jsonl, HOTPOT, "missing field 'gold_passages'"),
        (adapt_jsonl, BIGBENCH, "not valid JSON"),
        (adapt_hf_hotpotqa_distractor, BIGBENCH, "not valid JSON"),
        (adapt_squad_v1, NQ, "not valid JSON"),
        (adapt_bigbench_knowledge_conflicts, HOTPOT, "not valid JSON"),
    ],
)
def test_wrong_adapter_for_file(adapter: Any, fixture: Path, expected: str) -> None:
    with pytest.raises(DataError) as info:
        adapter(fixture)
    assert expected in str(info.value)
    assert str(fixture) in str(info.value)


def test_bigbench_wrong_input_shape_is_malformed(tmp_path: Path) -> None:
    # A multiple-choice BIG-bench task: right container, wrong 'input' shape.
    task = {
        "name": "other_task",
        "examples": [
            {"input": "2 + 2 =", "target": "4", "target_scores": {"4": 1, "5": 0}} for _ in range(3)
        ],
    }
    path = tmp_path / "task.json"
    path.write_text(json.dumps(task), "utf-8")
    with pytest.raises(DataError, match=r"3 of 3 rows are malformed") as info:
        adapt_bigbench_knowledge_conflicts(path)
    assert "is not 'Question: ...\\nContext: ...'" in str(info.value)


def test_small_bigbench_fixture_has_too_many_malformed_rows() -> None:
    # 1 defect among 6 examples is more than 1%: the unpadded fixture is refused.
    with pytest.raises(DataError) as info:
        adapt_bigbench_knowledge_conflicts(BIGBENCH)
    message = str(info.value)
    assert "1 of 6 rows are malformed (more than 1%)" in message
    assert f"examples[{BIGBENCH_DEFECT_INDEX}]" in message
    assert "['Robert Mitchum']" in message


def test_malformed_fraction_boundary(tmp_path: Path) -> None:
    assert MAX_MALFORMED_FRACTION == 0.01
    # 1 of 100 is exactly 1%: tolerated.
    assert len(adapt_bigbench_knowledge_conflicts(_padded_bigbench(tmp_path, 100)).malformed) == 1
    # 2 of 101 is more than 1%: refused.
    with pytest.raises(DataError, match="2 of 101 rows are malformed"):
        adapt_bigbench_knowledge_conflicts(_padded_bigbench(tmp_path, 100, extra_defects=1))


def test_too_many_malformed_jsonl_rows(tmp_path: Path) -> None:
    rows = _read_jsonl_rows(LOCAL)
    rows[0]["answers"] = None
    del rows[4]["question"]
    path = _write_jsonl(tmp_path / "local.jsonl", rows)
    with pytest.raises(DataError) as info:
        adapt_jsonl(path)
    message = str(info.value)
    assert "2 of 9 rows are malformed" in message
    assert "row 1: field 'answers' should be list, got NoneType" in message
    assert "row 5: missing field 'question'" in message


def test_duplicate_qids(tmp_path: Path) -> None:
    rows = _read_jsonl_rows(LOCAL)
    rows.append({**rows[0], "question": "Another question?"})
    path = _write_jsonl(tmp_path / "local.jsonl", rows)
    out = adapt_jsonl(path)
    with pytest.raises(DataError, match="duplicate question id 'loc-001'"):
        build_dataset(out, n_questions=2, seed=0)

    # An int qid and the same id as a string are the same question id.
    rows = _read_jsonl_rows(LOCAL)
    rows.append({**rows[6], "qid": "7"})
    path = _write_jsonl(tmp_path / "local.jsonl", rows)
    with pytest.raises(DataError, match="duplicate question id '7'"):
        build_dataset(adapt_jsonl(path), n_questions=2, seed=0)


def test_duplicate_qids_in_squad(tmp_path: Path) -> None:
    data = json.loads(SQUAD.read_text("utf-8"))
    data["data"][1]["paragraphs"][0]["qas"][0]["id"] = "56be4db0acb8001400a502ec"
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(data), "utf-8")
    with pytest.raises(DataError, match="duplicate question id '56be4db0acb8001400a502ec'"):
        build_dataset(adapt_squad_v1(path), n_questions=5, seed=0)


def test_duplicate_qid_of_an_excluded_question_is_still_an_error(tmp_path: Path) -> None:
    rows = _read_jsonl_rows(LOCAL)
    rows.append({**rows[2], "question": "Same id, also without gold?"})  # loc-003 twice
    path = _write_jsonl(tmp_path / "local.jsonl", rows)
    with pytest.raises(DataError, match="duplicate question id 'loc-003'"):
        build_dataset(adapt_jsonl(path), n_questions=2, seed=0)


def test_no_eligible_question(tmp_path: Path) -> None:
    rows = [r for r in _read_jsonl_rows(LOCAL) if r["qid"] in {"loc-003", "loc-005", "loc-008"}]
    path = _write_jsonl(tmp_path / "local.jsonl", rows)
    with pytest.raises(DataError, match="no question passed the filters") as info:
        build_dataset(adapt_jsonl(path), n_questions=2, seed=0)
    message = str(info.value)
    assert "'no_gold_passage': 1" in message
    assert "'no_answer': 1" in message
    assert "'yes_no_answer': 1" in message


def test_no_eligible_question_in_hotpot_yes_no_only(tmp_path: Path) -> None:
    rows = _read_jsonl_rows(HOTPOT)[:1]
    path = _write_jsonl(tmp_path / "hotpot.jsonl", rows)
    with pytest.raises(
        DataError, match=r"no question passed the filters \(\{'yes_no_answer': 1\}\)"
    ):
        build_dataset(adapt_hf_hotpotqa_distractor(path), n_questions=1, seed=0)


def test_empty_jsonl_has_no_eligible_question(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n", "utf-8")
    out = adapt_jsonl(path)
    assert out.examples == [] and out.malformed == []
    with pytest.raises(DataError, match="no question passed the filters"):
        build_dataset(out, n_questions=1, seed=0)


def test_hotpot_context_lengths_must_match(tmp_path: Path) -> None:
    rows = _read_jsonl_rows(HOTPOT)
    rows[1]["context"]["sentences"].pop()
    path = _write_jsonl(tmp_path / "hotpot.jsonl", rows)
    with pytest.raises(DataError, match="context.title and context.sentences differ in length"):
        adapt_hf_hotpotqa_distractor(path)


def test_data_error_is_a_grabrag_error() -> None:
    assert issubclass(DataError, GrabragError)


# The shape check looks for "Question:" before "\nContext:", where the question is read.
def test_bigbench_question_after_context_is_a_data_error(tmp_path: Path) -> None:
    task = {
        "name": "contextual_parametric_knowledge_conflicts",
        "examples": [
            {
                "input": "\nContext: Candace has a crush on Griselda Blanco ."
                "\nQuestion: who does candace like ?",
                "target": "Griselda Blanco",
                "target_scores": {"Griselda Blanco": 1, "Jeremy Johnson": 0},
            }
        ],
    }
    path = tmp_path / "task.json"
    path.write_text(json.dumps(task, indent=4), "utf-8")
    with pytest.raises(DataError, match=r"examples\[0\]"):
        adapt_bigbench_knowledge_conflicts(path)


@pytest.mark.parametrize(
    ("fixture", "adapter"),
    [(HOTPOT, adapt_hf_hotpotqa_distractor), (NQ, adapt_hf_nq_open_gold)],
)
def test_hub_export_round_trips_through_the_adapter(fixture: Path, adapter, tmp_path) -> None:
    """What the hub path writes (a ``datasets.Dataset`` exported as JSONL) reads back the same."""
    import datasets

    from grabrag.data.asset_hub import export_split

    rows = _read_jsonl_rows(fixture)
    exported = export_split(datasets.Dataset.from_list(rows), tmp_path / "validation.jsonl")
    direct, via_hub = adapter(fixture), adapter(exported)
    assert [e.qid for e in via_hub.examples] == [e.qid for e in direct.examples]
    assert [e.answers for e in via_hub.examples] == [e.answers for e in direct.examples]
    assert [[p.pid for p in e.gold_passages] for e in via_hub.examples] == [
        [p.pid for p in e.gold_passages] for e in direct.examples
    ]
    assert [p.pid for p in via_hub.other_passages] == [p.pid for p in direct.other_passages]


def test_dataset_gold_texts_cover_the_whole_split_not_only_the_sample() -> None:
    """The paper's entity pool: every gold passage of the dataset, sampled or not."""
    examples = [
        RawExample("q1", "Q1?", ["Paris"], [Passage("A", "Paris text."), Passage("B", " ")]),
        RawExample("q2", "Q2?", ["yes"], [Passage("C", "Yes-no gold text.")]),
        RawExample("q3", "Q3?", ["Lyon"], [Passage("A", "Paris text."), Passage("D", "Lyon.")]),
    ]
    output = AdapterOutput(examples, [Passage("E", "A distractor.")])
    assert dataset_gold_texts(output) == ["Paris text.", "Yes-no gold text.", "Lyon."]
    questions, _, _ = build_dataset(output, n_questions=1, seed=0)
    assert len(questions) == 1  # the sample is smaller than the pool's source


def _one_question_per_line(path: Path) -> AdapterOutput:
    """An adapter of a module's kind: one question per line, its answer after a tab; a
    line without one is a malformed row."""
    examples, malformed = [], []
    for i, line in enumerate(path.read_text().splitlines(), start=1):
        question, _, answer = line.partition("\t")
        if not answer:
            malformed.append(f"{path}: line {i}: no answer")
            continue
        examples.append(RawExample(f"q{i}", question, [answer], [Passage("", answer)]))
    return AdapterOutput(examples, [], malformed)


def test_a_registered_adapter_is_read_checked_and_its_code_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("grabrag.data.datasets.ADAPTERS", dict(ADAPTERS))
    register_adapter("lines", _one_question_per_line)
    register_adapter("lines", _one_question_per_line)  # the same function again: a no-op
    with pytest.raises(ValueError, match="an adapter named lines is already registered"):
        register_adapter("lines", adapt_jsonl)
    with pytest.raises(ValueError, match="an adapter named jsonl is already registered"):
        register_adapter("jsonl", _one_question_per_line)
    # a module's adapter is code of the dataset build; a built-in one is in the script's
    assert adapter_code_file("lines") == Path(__file__).resolve()
    assert adapter_code_file("squad_v1") is None
    good = tmp_path / "good.txt"
    good.write_text("Who wrote Hamlet?\tShakespeare\n")
    assert [e.answers for e in read_dataset("mine", "lines", good).examples] == [["Shakespeare"]]
    # the malformed-row check applies to every adapter, not only the built-in ones
    bad = tmp_path / "bad.txt"
    bad.write_text("Who wrote Hamlet?\tShakespeare\nWho painted it?\n")
    with pytest.raises(DataError, match=r"(?s)1 of 2 rows are malformed.*line 2: no answer"):
        read_dataset("mine", "lines", bad)


def test_an_empty_dataset_file_names_the_dataset_and_the_file(tmp_path: Path) -> None:
    empty = tmp_path / "dev-v1.1.json"
    empty.write_text("")
    with pytest.raises(DataError, match=f"dataset squad: its file {empty} is empty"):
        read_dataset("squad", "squad_v1", empty)
    # a file the adapter reads but that holds no question
    rows = tmp_path / "questions.jsonl"
    rows.write_text("\n")
    with pytest.raises(DataError, match="dataset mine: the jsonl adapter found no question"):
        read_dataset("mine", "jsonl", rows)
