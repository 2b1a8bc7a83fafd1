"""The knowledge x context split: every policy's outcomes per quadrant (knows the answer
closed-book or not x supportive, insufficient or misleading context), over-refusal and
misled answers as named rates, computed by hand on planted rows and on the tiny run."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pytest

from grabrag.core.errors import DataError
from grabrag.evaluation.knowledge_context import knowledge_context_rows
from grabrag.report.knowledge_tables import table_knowledge_context
from grabrag.scoring.answers import row_em

QIDS = ["a", "b", "c", "d"]
GOLD = {"a": "Paris", "b": "Rome", "c": "Oslo", "d": "Bern"}


def contexts() -> dict[str, list[dict]]:
    rows = [{"qid": q, "index": i, "answers": [GOLD[q]]} for i, q in enumerate(QIDS)]
    qc = [{**r, "replacement": "Lyon"} for r in rows]
    return {"Q100": rows, "Q0": rows, "QC": qc}


def decision(qid: str, answer: str | None) -> dict:
    if answer is None:
        return {"qid": qid, "decision": "abstain", "answer": None, "confidence": 90}
    return {"qid": qid, "decision": "answer", "answer": answer, "confidence": 90}


# closed book: a and b known (correct), c wrong, d abstained
CLOSED_BOOK = [
    decision("a", "Paris"),
    decision("b", "rome"),
    decision("c", "Lima"),
    decision("d", None),
]
DECISIONS = {
    # Q100: a abstains though known (over-refusal), b answers right; c abstains, d answers
    ("m", "Q100", "P1"): [
        decision("a", None),
        decision("b", "Rome"),
        decision("c", None),
        decision("d", "Bern"),
    ],
    # QC: a follows the swap (misled), b keeps its answer; c follows the swap, d abstains
    ("m", "QC", "P1"): [
        decision("a", "Lyon"),
        decision("b", "Rome"),
        decision("c", "Lyon"),
        decision("d", None),
    ],
    # Q0 is insufficient: no named rate
    ("m", "Q0", "P1"): [decision(q, None) for q in QIDS],
}


def rows() -> list[dict]:
    return knowledge_context_rows(
        "ds",
        DECISIONS,
        {"m": CLOSED_BOOK},
        contexts(),
        n_resamples=200,
        seed=42,
        confidence_level=0.95,
    )


def value(found: list[dict], condition: str, knowledge: str, metric: str) -> dict:
    (row,) = [
        r
        for r in found
        if (r["condition"], r["knowledge"], r["metric"]) == (condition, knowledge, metric)
    ]
    return row


def test_the_quadrants_and_named_rates_by_hand() -> None:
    found = rows()
    assert value(found, "Q100", "knows", "questions")["value"] == 2
    assert value(found, "Q100", "knows", "over_refusal")["value"] == pytest.approx(0.5)
    assert value(found, "Q100", "knows", "em")["value"] == pytest.approx(0.5)
    assert value(found, "Q100", "does not know", "abstain_rate")["value"] == pytest.approx(0.5)
    assert value(found, "QC", "knows", "misled")["value"] == pytest.approx(0.5)
    assert value(found, "QC", "does not know", "echo")["value"] == pytest.approx(0.5)
    assert value(found, "Q0", "knows", "abstain_rate")["value"] == 1.0
    # a named rate lives in its quadrant only
    named = {(r["condition"], r["knowledge"]) for r in found if r["metric"] == "over_refusal"}
    assert named == {("Q100", "knows")}
    named = {(r["condition"], r["knowledge"]) for r in found if r["metric"] == "misled"}
    assert named == {("QC", "knows")}
    # CIs bracket the estimate and are computed from the questions' resamples
    misled = value(found, "QC", "knows", "misled")
    assert 0 <= misled["ci_low"] <= 0.5 <= misled["ci_high"] <= 1
    # each cell's quadrants hold its questions
    questions = Counter()
    for r in found:
        if r["metric"] == "questions":
            questions[r["condition"]] += r["value"]
    assert questions == {"Q100": 4, "Q0": 4, "QC": 4}


def test_the_table_prints_the_named_rates_in_their_quadrants() -> None:
    table = table_knowledge_context(rows())
    assert [r["Condition"] for r in table.rows][:2] == ["Q100", "Q100"]
    first = table.rows[0]
    assert (first["Context"], first["Closed book"], first["n"]) == ("supportive", "knows", 2)
    assert first["Over-refusal %"].startswith("50.0 [") and first["Misled %"] == ""
    qc_known = next(r for r in table.rows if r["Condition"] == "QC" and r["Closed book"] == "knows")
    assert qc_known["Misled %"].estimate == pytest.approx(0.5) and qc_known["Over-refusal %"] == ""


def test_a_question_without_a_closed_book_row_is_named() -> None:
    with pytest.raises(DataError, match=r"dataset ds: 1 questions have no closed-book row"):
        knowledge_context_rows(
            "ds",
            DECISIONS,
            {"m": CLOSED_BOOK[:3]},
            contexts(),
            n_resamples=200,
            seed=42,
            confidence_level=0.95,
        )


def test_the_tiny_runs_quadrants_sum_to_each_cells_questions(tiny_run: Path) -> None:
    """In the tiny run's table, each (model, dataset, policy, condition)'s two quadrants
    hold the cell's questions, and the known quadrant's size is the closed-book pass's
    correct answers among them."""
    results = tiny_run / "results"
    tidy = list(csv.DictReader((results / "tables/knowledge_context.tidy.csv").open()))
    assert tidy
    sizes: Counter[tuple[str, ...]] = Counter()
    known: Counter[tuple[str, ...]] = Counter()
    for line in tidy:
        if line["quantity"] != "n":
            continue
        key = (line["model"], line["dataset"], line["policy"], line["condition"])
        sizes[key] += int(float(line["estimate"]))
        if line["row"].endswith("Closed book=knows"):
            known[key] += int(float(line["estimate"]))
    for (model, dataset, policy, condition), n in sizes.items():
        path = results / "policies" / model / dataset / condition / f"{policy}.jsonl"
        qids = [json.loads(line)["qid"] for line in path.read_text().splitlines()]
        assert n == len(qids), (model, dataset, policy, condition)
        gold = {
            json.loads(line)["qid"]: json.loads(line)["answers"]
            for line in (results / "contexts" / dataset / f"{condition}.jsonl").open()
        }
        cb = results / "generation" / model / dataset / "Qclosed" / "CB.jsonl"
        correct = {
            r["qid"]
            for r in map(json.loads, cb.open())
            if r["qid"] in gold and row_em(r, gold[r["qid"]])
        }
        assert known[(model, dataset, policy, condition)] == len(correct & set(qids))
