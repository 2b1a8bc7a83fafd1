"""EvidentialRAG in the workflow: evaluator and generator loops with a stub LLM (resume,
accounting), the sweep aggregation and the efficiency summary, on hand-made rows."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from grabrag.core.errors import DataError
from grabrag.core.io import read_checkpoint_rows
from grabrag.evidential.claims import closed_book_evaluation
from grabrag.evidential.efficiency import efficiency_summary
from grabrag.evidential.evaluator import EVALUATOR_GRAMMAR
from grabrag.evidential.evaluator_pass import (
    evaluate_question,
    evaluation_report,
    preflight_messages,
    run_evaluations,
)
from grabrag.evidential.generator_pass import question_state, run_generation
from grabrag.evidential.stored import EVID, EVID_CB, cb_source, stored_evaluation
from grabrag.evidential.sweep_tables import POOLED, SWEEP_COLUMNS, sweep_table

SETTINGS = {"lam": 0.6, "tau1": 0.35, "tau2": 0.65, "merge_f1": 0.8}


class Killed(Exception):
    pass


class StubLLM:
    """Evaluator calls (EVALUATOR_GRAMMAR) judge a passage by a lookup of its text:
    text -> (value, evidence); generator calls answer the claim the direct route names,
    and abstain otherwise. ``die_after`` raises after that many calls (a killed job)."""

    def __init__(self, judgements: dict[str, tuple[str, int]], die_after: int | None = None):
        self.judgements = judgements
        self.die_after = die_after
        self.calls: list[tuple[list[dict], str | None, int | None]] = []
        self.resets = 0

    def reset(self) -> None:
        self.resets += 1

    def __call__(self, messages, grammar=None, max_tokens=None) -> dict:
        if self.die_after is not None and len(self.calls) >= self.die_after:
            raise Killed
        self.calls.append((messages, grammar, max_tokens))
        user = messages[-1]["content"]
        if grammar == EVALUATOR_GRAMMAR:
            passage = user.split("Passage:\n", 1)[1]
            value, evidence = self.judgements.get(passage.splitlines()[-1], ("", 0))
            stance = "supports" if evidence else "irrelevant"
            raw = json.dumps(
                {
                    "claim": f"It is {value}." if value else "",
                    "value": value,
                    "stance": stance,
                    "rationale": "stub",
                    "evidence": evidence,
                }
            )
        elif "Answer with this highest-mass claim" in user:
            claim = user.split('The evidence agrees on "', 1)[1].split('"', 1)[0]
            raw = json.dumps(
                {"decision": "answer", "answer": claim, "confidence": 80, "reasoning": "r"}
            )
        else:
            raw = json.dumps(
                {"decision": "abstain", "answer": "", "confidence": 5, "reasoning": "r"}
            )
        return {
            "raw": raw,
            "finish_reason": "stop",
            "prompt_tokens": 100,
            "completion_tokens": 20,
            "seconds": 0.5,
        }


def context(qid: str, index: int, texts: list[str], condition: str = "QC") -> dict:
    passages = [
        {"pid": f"{qid}-{k}", "title": f"T{k}", "text": text, "role": "hard_negative"}
        for k, text in enumerate(texts)
    ]
    return {
        "qid": qid,
        "index": index,
        "condition": condition,
        "question": f"Where is {qid}?",
        "answers": ["Paris"],
        "passages": passages,
        "context": "\n\n".join(texts),
    }


JUDGEMENTS = {
    "Paris is it.": ("Paris", 9),
    "paris again.": ("paris", 8),
    "Lyon is it.": ("Lyon", 9),
}
ROWS = [
    context("agree", 0, ["Paris is it.", "Nothing here.", "paris again."]),
    context("misled", 1, ["Nothing here.", "Lyon is it.", "Still nothing."]),
    context("empty", 2, ["Nothing here.", "Still nothing.", "Nope."]),
]


def _without_seconds(rows):
    return json.dumps(rows, sort_keys=True).replace("0.5", "S")


# --- evaluator pass ------------------------------------------------------------------------


def test_evaluate_question_calls_once_per_passage_with_a_growing_inventory() -> None:
    llm = StubLLM(JUDGEMENTS)
    row = evaluate_question(llm, ROWS[0], max_tokens=64)
    assert [e["position"] for e in row["evaluations"]] == [1, 2, 3]
    assert [e["pid"] for e in row["evaluations"]] == ["agree-0", "agree-1", "agree-2"]
    assert [e["value"] for e in row["evaluations"]] == ["Paris", "", "paris"]
    assert [e["evidence"] for e in row["evaluations"]] == [9.0, 0.0, 8.0]
    # the inventory each call saw: none, then the first claim (a repeat is not added twice)
    assert [e["inventory"] for e in row["evaluations"]] == [[], ["Paris"], ["Paris"]]
    assert row["evaluator_passes"] == 3 and row["evaluator_seconds"] == 1.5
    assert all(grammar == EVALUATOR_GRAMMAR and tokens == 64 for _, grammar, tokens in llm.calls)
    # the k calls share their prefix: system message, then the question and the rules
    users = [messages[1]["content"] for messages, _, _ in llm.calls]
    head = users[0].split("Candidate answers")[0]
    assert head.startswith("Question: Where is agree?") and all(u.startswith(head) for u in users)
    assert "Candidate answers already found in other passages:\n- Paris" in users[1]
    assert users[1].endswith("Passage:\nT1\nNothing here.")
    entry = row["evaluations"][0]
    assert set(entry) >= {
        "position", "pid", "role", "claim", "value", "stance", "rationale", "evidence",
        "status", "raw", "finish_reason", "prompt_tokens", "completion_tokens", "seconds",
    }  # fmt: skip
    assert stored_evaluation(entry).value == "Paris"


def test_unparseable_evaluator_output_is_no_evidence() -> None:
    def broken(messages, grammar=None, max_tokens=None):
        return {
            "raw": '{"claim": "x", "val',
            "finish_reason": "length",
            "prompt_tokens": 1,
            "completion_tokens": 1,
            "seconds": 0.1,
        }

    row = evaluate_question(broken, ROWS[0], max_tokens=16)
    assert {e["status"] for e in row["evaluations"]} == {"failed"}
    assert {e["evidence"] for e in row["evaluations"]} == {0.0}
    state = question_state(row, None, 0.6, 0.35, 0.65, 0.8)
    assert (state["route"], state["u_global"], state["frame"]) == ("abstain", 1.0, [])
    assert evaluation_report([row])["status"] == {"failed": 3}


def test_evaluations_resume_redoing_only_the_question_in_flight(tmp_path: Path) -> None:
    reference = run_evaluations(StubLLM(JUDGEMENTS), lambda: None, ROWS, tmp_path / "a", 64)
    checkpoint = tmp_path / "b" / ".checkpoint.jsonl"
    dying = StubLLM(JUDGEMENTS, die_after=4)  # question 0 done (3 calls), question 1 in flight
    with pytest.raises(Killed):
        run_evaluations(dying, dying.reset, ROWS, checkpoint, 64)
    assert list(read_checkpoint_rows(checkpoint)) == [("agree",)]
    with checkpoint.open("a") as handle:
        handle.write('{"qid": "misl')  # a torn line from the kill
    resumed = StubLLM(JUDGEMENTS)
    rows = run_evaluations(resumed, resumed.reset, ROWS, checkpoint, 64)
    assert len(resumed.calls) == 6 and resumed.resets == 2  # questions 1 and 2 only
    assert _without_seconds(rows) == _without_seconds(reference)
    assert [r["qid"] for r in rows] == ["agree", "misled", "empty"]


def test_preflight_reserves_a_full_inventory() -> None:
    calls = list(preflight_messages(ROWS[0], max_tokens=10))
    assert len(calls) == 3
    assert calls[0][1][1]["content"].count("- x x x x x x x x x x") == 2  # k - 1 candidates


# --- fusion, routing and the generator pass ------------------------------------------------


def _evaluations():
    llm = StubLLM(JUDGEMENTS)
    return [evaluate_question(llm, row, 64) for row in ROWS]


CB = [
    {
        "qid": "agree",
        "decision": "answer",
        "answer": "Paris",
        "confidence": 90,
        "parse_status": "ok",
    },
    {
        "qid": "misled",
        "decision": "answer",
        "answer": "Paris",
        "confidence": 90,
        "parse_status": "ok",
    },
    {
        "qid": "empty",
        "decision": None,
        "answer": None,
        "confidence": None,
        "parse_status": "failed",
    },
]


def test_question_state_and_the_closed_book_source() -> None:
    agree, misled, empty = _evaluations()
    state = question_state(agree, None, 0.6, 0.35, 0.65, 0.8)
    assert state["frame"] == ["Paris"] and state["route"] == "direct"
    assert state["n_sources"] == 3 and sum(state["fused_b"]) + state["u_global"] == pytest.approx(1)
    # a lone misleading passage is confident on its own ...
    alone = question_state(misled, None, 0.6, 0.35, 0.65, 0.8)
    assert alone["frame"] == ["Lyon"] and alone["route"] == "direct"
    # ... and meets the closed-book answer as conflict under EVID_CB
    source = cb_source(CB[1])
    assert source == closed_book_evaluation("Paris", 90, "answer")
    with_cb = question_state(misled, source, 0.6, 0.35, 0.65, 0.8)
    assert with_cb["frame"] == ["Lyon", "Paris"] and with_cb["n_sources"] == 4
    assert with_cb["route"] != "direct" and with_cb["mean_conflict"] > 0
    assert cb_source(CB[2]) is None
    assert question_state(empty, None, 0.6, 0.35, 0.65, 0.8)["route"] == "abstain"


def test_generation_rows_routes_and_accounting(tmp_path: Path) -> None:
    evaluations = _evaluations()
    llm = StubLLM(JUDGEMENTS)
    out = run_generation(
        llm, llm.reset, ROWS, evaluations, CB, (EVID, EVID_CB), SETTINGS, tmp_path / "c"
    )
    assert len(llm.calls) == 6 and llm.resets == 3  # one call per question and variant
    assert all(grammar is None and tokens is None for _, grammar, tokens in llm.calls)
    evid = {r["qid"]: r for r in out[EVID]}
    evid_cb = {r["qid"]: r for r in out[EVID_CB]}
    assert evid["agree"]["route"] == "direct" and evid["agree"]["generator_answer"] == "Paris"
    assert evid["misled"]["route"] == "direct" and evid["misled"]["generator_answer"] == "Lyon"
    assert evid_cb["misled"]["route"] in ("conflict_aware", "abstain")
    assert evid_cb["misled"]["generator_decision"] == "abstain"
    assert evid_cb["misled"]["cb_source"] == {"value": "Paris", "evidence": 9.0}
    assert evid_cb["empty"]["cb_source"] is None and "cb_source" not in evid["empty"]
    row = evid["agree"]
    assert (row["evaluator_passes"], row["logical_decisions"], row["executed_passes"]) == (3, 4, 4)
    assert (row["evaluator_seconds"], row["generator_seconds"], row["seconds"]) == (1.5, 0.5, 2.0)
    assert row["policy"] == EVID and row["condition"] == "QC" and row["parse_status"] == "ok"
    # the two variants of a question share the context prefix (run back to back)
    first, second = (llm.calls[k][0][1]["content"] for k in (2, 3))
    assert first.split("Evidence summary")[0] == second.split("Evidence summary")[0]


def test_generation_resumes_and_checks_its_inputs(tmp_path: Path) -> None:
    evaluations = _evaluations()
    checkpoint = tmp_path / ".checkpoint.jsonl"
    reference = run_generation(
        StubLLM({}), lambda: None, ROWS, evaluations, CB, (EVID, EVID_CB), SETTINGS, tmp_path / "r"
    )
    dying = StubLLM({}, die_after=3)  # question 0 done, question 1 half done
    with pytest.raises(Killed):
        run_generation(
            dying, dying.reset, ROWS, evaluations, CB, (EVID, EVID_CB), SETTINGS, checkpoint
        )
    resumed = StubLLM({})
    out = run_generation(
        resumed, resumed.reset, ROWS, evaluations, CB, (EVID, EVID_CB), SETTINGS, checkpoint
    )
    assert len(resumed.calls) == 4  # question 1 redone whole, then question 2
    assert _without_seconds(out) == _without_seconds(reference)
    with pytest.raises(DataError, match="no evaluation row for qid empty"):
        run_generation(StubLLM({}), lambda: None, ROWS, evaluations[:2], CB, (EVID,), SETTINGS,
                       tmp_path / "x")  # fmt: skip
    short = [dict(evaluations[0], evaluations=evaluations[0]["evaluations"][:2]), *evaluations[1:]]
    with pytest.raises(DataError, match="2 evaluations for 3 passages"):
        run_generation(StubLLM({}), lambda: None, ROWS, short, CB, (EVID,), SETTINGS,
                       tmp_path / "y")  # fmt: skip
    with pytest.raises(ValueError, match="closed-book"):
        run_generation(StubLLM({}), lambda: None, ROWS, evaluations, None, (EVID_CB,), SETTINGS,
                       tmp_path / "z")  # fmt: skip


# --- sweep aggregation ---------------------------------------------------------------------


def test_sweep_table_grid_and_hand_computed_values() -> None:
    llm = StubLLM(JUDGEMENTS)
    q100 = [
        evaluate_question(llm, context("a", 0, ["Paris is it.", "paris again."], "Q100"), 64),
    ]
    q0 = [evaluate_question(llm, context("a", 0, ["Nothing here.", "Nope."], "Q0"), 64)]
    gold = {"Q100": {"a": ["Paris"]}, "Q0": {"a": ["Paris"]}}
    cb = [{"qid": "a", "decision": "answer", "answer": "Paris", "confidence": 90}]
    rows = sweep_table({"Q100": q100, "Q0": q0}, gold, cb)
    settings_per_policy = 5 * 3 + 3 + 1  # lambda x tau, no_fusion x tau, no_routing
    assert len(rows) == 2 * settings_per_policy * 3  # (Q100, Q0, pooled) x (EVID, EVID_CB)
    assert all(set(r) == set(SWEEP_COLUMNS) for r in rows)
    assert {r["rule"] for r in rows if r["variant"] == "evid"} == {
        "dempster",
        "0",
        "0.3",
        "0.6",
        "1",
    }
    key = {(r["policy"], r["variant"], r["rule"], r["tau1"], r["condition"]): r for r in rows}
    at_q100 = key[(EVID, "evid", "0.6", 0.35, "Q100")]
    assert (at_q100["n"], at_q100["answered"], at_q100["answer_rate"], at_q100["em"]) == (
        1,
        1,
        1.0,
        1.0,
    )
    at_q0 = key[(EVID, "evid", "0.6", 0.35, "Q0")]
    assert (at_q0["answer_rate"], at_q0["abstain_rate"]) == (0.0, 1.0)
    # EvidentialRAG's ECE (Eqs. 26-27): Q100 fuses (9/10, 1/10) with (8/9, 1/9): the top
    # claim "Paris" (correct) has mass 1 - 1/90 -> |1 - 89/90| = 1/90. Q0 has no claim:
    # confidence 0, nothing selected (not correct) -> |0 - 0| = 0, not GRAB-RAG's 29/30
    assert at_q100["ece_answer_15"] == pytest.approx(1 / 90)
    assert at_q0["ece_answer_15"] == 0.0
    assert (at_q100["route_direct"], at_q0["route_abstain"]) == (1.0, 1.0)
    pooled = key[(EVID, "evid", "0.6", 0.35, POOLED)]
    assert (pooled["n"], pooled["refusal_precision"], pooled["refusal_recall"]) == (2, 1.0, 1.0)
    # two bins, one row each: (1/90 + 0) / 2
    assert pooled["refusal_f1"] == 1.0 and pooled["ece_answer_15"] == pytest.approx(1 / 180)
    assert (pooled["route_direct"], pooled["route_conflict_aware"]) == (0.5, 0.0)
    assert math.isnan(at_q100["refusal_f1"]) and pooled["reason"] is None
    # without routing every question with a claim is answered; an empty frame abstains
    no_routing = key[(EVID, "no_routing", "0.6", None, POOLED)]
    assert no_routing["answer_rate"] == 0.5
    # Dempster at the strictest thresholds still answers the agreeing question
    assert key[(EVID, "evid", "dempster", 0.5, "Q100")]["answer_rate"] == 1.0
    # EVID_CB never answers from memory alone: at Q0 (every passage irrelevant) the
    # closed-book claim is left out even without routing
    cb_no_routing = key[(EVID_CB, "no_routing", "0.6", None, POOLED)]
    assert cb_no_routing["answer_rate"] == 0.5 and cb_no_routing["refusal_precision"] == 1.0
    assert key[(EVID_CB, "evid", "0.6", 0.35, "Q0")]["route_abstain"] == 1.0
    only_q100 = sweep_table({"Q100": q100}, gold, None)
    assert {r["policy"] for r in only_q100} == {EVID}
    dead = [r for r in only_q100 if r["condition"] == POOLED and r["variant"] == "evid"][0]
    assert math.isnan(dead["refusal_precision"]) and "no abstention" in dead["reason"]


# --- efficiency ------------------------------------------------------------------------------


def test_efficiency_summary_numbers() -> None:
    p1 = [{"seconds": 1.0}, {"seconds": 3.0}]
    evid = [
        {"seconds": 4.0, "evaluator_seconds": 3.0, "generator_seconds": 1.0,
         "logical_decisions": 6, "executed_passes": 6},
        {"seconds": 6.0, "evaluator_seconds": 5.0, "generator_seconds": 1.0,
         "logical_decisions": 6, "executed_passes": 6},
    ]  # fmt: skip
    cb = [{"seconds": 0.5}, {"seconds": 1.5}]
    reports = [{"peak_memory_mb": 300.0}, {"peak_memory_mb": 512.5}]
    # EVID_CB rows count their closed-book pass: k + 2 decisions, its seconds included
    evid_cb = [
        {**row, "seconds": row["seconds"] + extra, "cb_seconds": extra,
         "logical_decisions": 7, "executed_passes": 7}
        for row, extra in zip(evid, (0.5, 1.5), strict=True)
    ]  # fmt: skip
    # naive RAG (P0, the base of Eq. 28) at 2.0 s/query; P1 beside it at 1.0 (warm prefix)
    p1_warm = [{"seconds": 0.5}, {"seconds": 1.5}]
    summary = efficiency_summary(
        {"P0": p1, "P1": p1_warm}, {EVID: evid, EVID_CB: evid_cb}, cb, reports
    )
    p0_entry, evid_entry = summary["policies"]["P0"], summary["policies"][EVID]
    assert list(summary["policies"]) == ["P0", "P1", EVID, EVID_CB]
    assert p0_entry["seconds_per_query"] == 2.0 and p0_entry["relative_cost"] == 1.0
    assert (p0_entry["logical_decisions"], p0_entry["executed_passes"]) == (1.0, 1.0)
    assert p0_entry["peak_memory_mb"] is None
    assert summary["policies"]["P1"]["relative_cost"] == 0.5  # 1.0 / 2.0, against P0
    assert evid_entry["seconds_per_query"] == 5.0 and evid_entry["relative_cost"] == 2.5
    assert evid_entry["evaluator_seconds_per_query"] == 4.0
    assert (evid_entry["logical_decisions"], evid_entry["executed_passes"]) == (6.0, 6.0)
    assert evid_entry["peak_memory_mb"] == 512.5
    cb_entry = summary["policies"][EVID_CB]
    assert cb_entry["closed_book_seconds_per_query"] == 1.0
    assert cb_entry["seconds_per_query"] == 6.0 and cb_entry["relative_cost"] == 3.0
    assert (cb_entry["logical_decisions"], cb_entry["executed_passes"]) == (7.0, 7.0)
    assert evid_entry["closed_book_seconds_per_query"] == 0.0
    # no P0 timing: relative cost undefined (None in the JSON), never a division by zero
    empty = efficiency_summary({"P0": []}, {EVID: evid}, cb, [])
    assert empty["policies"]["P0"]["seconds_per_query"] is None
    assert empty["policies"][EVID]["relative_cost"] is None
    assert empty["policies"][EVID]["peak_memory_mb"] is None
    # without naive RAG's rows there is no base: an error that names it
    with pytest.raises(ValueError, match="P0 generation rows"):
        efficiency_summary({"P1": p1}, {EVID: evid}, cb, reports)


def test_a_permuted_context_keeps_the_route() -> None:
    # two passages for "Paris", one for "Lyon", evidence 9 each; the question shares one
    # word ("is") with every passage, so the fold runs by pid: Lyon ("a") first, then
    # Paris ("b", "c"). [X, Y, Y] at lambda 0.6: U = 289.88/1331 -> direct (see
    # test_evidential's hand computation); the context order [Y, Y, X] alone would
    # have given U = 639.8/1331, conflict-aware.
    llm = StubLLM({"Paris is it.": ("Paris", 9), "Paris it is.": ("Paris", 9),
                   "Lyon is it.": ("Lyon", 9)})  # fmt: skip
    passages = [
        {"pid": "b", "title": "", "text": "Paris is it.", "role": "gold"},
        {"pid": "c", "title": "", "text": "Paris it is.", "role": "gold"},
        {"pid": "a", "title": "", "text": "Lyon is it.", "role": "qc_swapped"},
    ]
    states = []
    for order in ((0, 1, 2), (2, 0, 1), (1, 2, 0), (2, 1, 0)):
        row = {**context("q", 0, ["x"], "QX"), "passages": [passages[i] for i in order]}
        evaluated = evaluate_question(llm, row, 64)
        assert [e["pid"] for e in evaluated["evaluations"]] == ["a", "b", "c"]
        assert [e["fold_rank"] for e in evaluated["evaluations"]] == [1, 2, 3]
        states.append(question_state(evaluated, None, 0.6, 0.35, 0.65, 0.8))
    assert {s["route"] for s in states} == {"direct"}
    assert all(s["u_global"] == pytest.approx(289.88 / 1331) for s in states)
    # entries are folded by fold_rank, whatever order they are stored in
    shuffled = {**evaluated, "evaluations": evaluated["evaluations"][::-1]}
    assert question_state(shuffled, None, 0.6, 0.35, 0.65, 0.8)["u_global"] == pytest.approx(
        289.88 / 1331
    )
    # evaluations written before the fold order existed are refused, not misread
    old = {**evaluated, "evaluations": [
        {k: v for k, v in e.items() if k != "fold_rank"} for e in evaluated["evaluations"]
    ]}  # fmt: skip
    with pytest.raises(DataError, match="fold_rank"):
        question_state(old, None, 0.6, 0.35, 0.65, 0.8)


def test_qx_gold_and_twin_fold_the_same_whichever_comes_first() -> None:
    # QX: the gold passage and its swapped twin share a pid and (here) their overlap with
    # the question, so only their text orders them. Another passage "a" (Paris, evidence
    # 9) folds first. In turn, [Paris, Paris, Lyon] gives U = 639.8/1331 (conflict-aware)
    # and [Paris, Lyon, Paris] 289.88/1331 (direct; test_evidential's hand computation).
    # The pair is one fold group: both see the inventory from before it (["Paris"]) and
    # are combined with each other first, so a (+) (Paris (+) Lyon) = 289.88/1331, with
    # Paris as the gold passage's text or as the twin's.
    llm = StubLLM({"Paris is it.": ("Paris", 9), "A Paris it is.": ("Paris", 9),
                   "Lyon it is.": ("Lyon", 9)})  # fmt: skip
    states = []
    for gold_text, twin_text in (
        ("A Paris it is.", "Lyon it is."),
        ("Lyon it is.", "A Paris it is."),
    ):
        passages = [
            {"pid": "g", "title": "", "text": gold_text, "role": "gold"},
            {"pid": "a", "title": "", "text": "Paris is it.", "role": "hard_negative"},
            {"pid": "g", "title": "", "text": twin_text, "role": "swapped_gold"},
        ]
        row = {**context("q", 0, ["x"], "QX"), "passages": passages}
        evaluated = evaluate_question(llm, row, 64)
        entries = evaluated["evaluations"]
        assert [e["fold_group"] for e in entries] == [1, 2, 2]
        assert [e["inventory"] for e in entries] == [[], ["Paris"], ["Paris"]]
        states.append(question_state(evaluated, None, 0.6, 0.35, 0.65, 0.8))
    assert [s["u_global"] for s in states] == pytest.approx([289.88 / 1331] * 2)
    assert {s["route"] for s in states} == {"direct"}
    # identical passages (Q100's reused gold) still fold one by one
    row = context("q", 0, ["Paris is it.", "Paris is it."], "Q100")
    assert [e["fold_group"] for e in evaluate_question(llm, row, 64)["evaluations"]] == [1, 2]


def test_closed_book_source_at_q0_abstains_in_the_workflow_state() -> None:
    llm = StubLLM({})
    row = context("q", 0, ["Nothing here.", "Still nothing.", "Nope."], "Q0")
    evaluated = evaluate_question(llm, row, 64)
    cb = cb_source({"qid": "q", "decision": "answer", "answer": "Paris", "confidence": 100})
    assert cb is not None and cb.evidence == 10.0
    state = question_state(evaluated, cb, 0.6, 0.35, 0.65, 0.8)
    assert (state["route"], state["u_global"], state["frame"]) == ("abstain", 1.0, [])
