"""Abstention policies P0-P4: the Appendix B rule table, P4's NLI veto, the Table 12 sweep."""

from __future__ import annotations

import math

import pytest

from grabrag.core.errors import DataError
from grabrag.core.registry import decide
from grabrag.policies.paper import (
    SWEEP_CUTOFFS,
    SWEEP_THRESHOLDS,
    agreement_f1,
    p3_decision,
    p3_decisions,
    p3_sweep,
    p3_sweep_decisions,
    p4_decision,
    p4_decisions,
    single_pass_decisions,
)
from grabrag.policies.rows import (
    CB_UNRELIABLE,
    F1_AGREE,
    F1_CONFLICT,
    GENERATED,
    NLI_CONSISTENT,
    NLI_CONTRADICTION,
    P1_ABSTAINED,
    RULE_CB_PARSE_FAILED,
    RULE_PARSE_FAILED,
)
from grabrag.scoring.abstention import answer_rate


def gen(
    qid: str,
    decision: str | None,
    answer: str | None = "",
    confidence: int | None = 90,
    prompt: str = "P1",
    index: int = 0,
) -> dict:
    """A generation row as rules/generate.smk writes it."""
    failed = decision is None
    return {
        "qid": qid,
        "index": index,
        "condition": "Qclosed" if prompt == "CB" else "QC",
        "prompt": prompt,
        "decision": decision,
        "answer": None if failed else answer,
        "confidence": None if failed else confidence,
        "reasoning": None if failed else "r",
        "parse_status": "failed" if failed else "ok",
        "raw": "",
        "finish_reason": "stop",
        "prompt_tokens": 1,
        "completion_tokens": 1,
        "seconds": 0.0,
    }


def cb(qid: str, decision: str | None, answer: str | None = "", confidence: int | None = 90):
    return gen(qid, decision, answer, confidence, prompt="CB")


def nli(qid: str, labels: list[str], **extra) -> dict:
    return {
        "qid": qid,
        "labels": labels,
        "pids": [f"p{k}" for k in range(len(labels))],
        "skipped_reason": None,
        **extra,
    }


# --- the Appendix B rule table, row by row --------------------------------------------

# Exact ties: 4 context tokens, all among 6 CB tokens: F1 = 2*4/(4+6) = 0.8 on paper.
TIE_CTX, TIE_CB = "w1 w2 w3 w4", "w1 w2 w3 w4 w5 w6"


@pytest.mark.parametrize(
    ("p1_row", "cb_row", "decision", "answer", "confidence", "rule"),
    [
        # row 1: the context pass abstains -> abstain, confidence 0 (whatever CB says)
        (
            gen("q", "abstain", "", 80),
            cb("q", "answer", "Paris", 99),
            "abstain",
            "",
            0,
            P1_ABSTAINED,
        ),
        (gen("q", "abstain", "", 80), cb("q", "abstain", "", 10), "abstain", "", 0, P1_ABSTAINED),
        # row 2: CB abstains -> P1's answer and confidence
        (
            gen("q", "answer", "Lyon", 70),
            cb("q", "abstain", "", 95),
            "answer",
            "Lyon",
            70,
            CB_UNRELIABLE,
        ),
        # row 2: CB confidence below the cutoff -> P1's answer, even when they conflict
        (
            gen("q", "answer", "Lyon", 70),
            cb("q", "answer", "Paris", 49),
            "answer",
            "Lyon",
            70,
            CB_UNRELIABLE,
        ),
        (
            gen("q", "answer", "Lyon", 70),
            cb("q", "answer", "Paris", 0),
            "answer",
            "Lyon",
            70,
            CB_UNRELIABLE,
        ),
        # tie: CB confidence exactly 50 is not < 50, so the F1 check decides
        (
            gen("q", "answer", "Lyon", 70),
            cb("q", "answer", "Paris", 50),
            "abstain",
            "",
            0,
            F1_CONFLICT,
        ),
        (
            gen("q", "answer", "Paris", 70),
            cb("q", "answer", "Paris", 50),
            "answer",
            "Paris",
            70,
            F1_AGREE,
        ),
        # row 3: agreement after the metric's normalisation (case, articles, punctuation)
        (
            gen("q", "answer", "The Eiffel Tower!", 60),
            cb("q", "answer", "eiffel tower", 90),
            "answer",
            "The Eiffel Tower!",
            60,
            F1_AGREE,
        ),
        # tie: F1 exactly 0.8 agrees
        (
            gen("q", "answer", TIE_CTX, 65),
            cb("q", "answer", TIE_CB, 90),
            "answer",
            TIE_CTX,
            65,
            F1_AGREE,
        ),
        # row 4: conflict -> abstain, confidence 0
        (
            gen("q", "answer", "Lyon", 70),
            cb("q", "answer", "Paris", 90),
            "abstain",
            "",
            0,
            F1_CONFLICT,
        ),
        # just under 0.8: "w1 w2 w3" vs TIE_CB: 2*3/(3+6) = 0.667
        (
            gen("q", "answer", "w1 w2 w3", 65),
            cb("q", "answer", TIE_CB, 90),
            "abstain",
            "",
            0,
            F1_CONFLICT,
        ),
    ],
)
def test_p3_rule_table(p1_row, cb_row, decision, answer, confidence, rule) -> None:
    out = p3_decision(p1_row, cb_row, cutoff=50, threshold=0.8)
    assert (out["decision"], out["answer"], out["confidence"], out["rule"]) == (
        decision,
        answer,
        confidence,
        rule,
    )
    assert out["qid"] == "q" and out["policy"] == "P3"


def test_the_tie_cases_are_real_ties() -> None:
    assert agreement_f1(TIE_CTX, TIE_CB) == pytest.approx(0.8, abs=1e-12)
    # Floating point may land on either side of 0.8; the rule must not depend on it.
    out = p3_decision(gen("q", "answer", TIE_CTX), cb("q", "answer", TIE_CB), threshold=0.8)
    assert out["rule"] == F1_AGREE and out["f1"] == pytest.approx(0.8)
    # another exact 0.8: 2 tokens vs 3 tokens sharing 2 -> 2*2/(2+3)
    assert agreement_f1("x y", "x y z") == pytest.approx(0.8)
    assert p3_decision(gen("q", "answer", "x y"), cb("q", "answer", "x y z"))["rule"] == F1_AGREE
    # 7 vs 8 tokens sharing 6: 2*6/15 = 0.8 on paper, 0.7999999999999999 in floating point
    ctx, cb_answer = "t1 t2 t3 t4 t5 t6 x7", "t1 t2 t3 t4 t5 t6 y7 y8"
    assert agreement_f1(ctx, cb_answer) < 0.8
    assert p3_decision(gen("q", "answer", ctx), cb("q", "answer", cb_answer))["rule"] == F1_AGREE


def test_p3_thresholds_and_cutoff_are_parameters() -> None:
    p1_row, cb_row = gen("q", "answer", "Lyon", 70), cb("q", "answer", "Paris", 55)
    assert p3_decision(p1_row, cb_row, cutoff=60)["rule"] == CB_UNRELIABLE
    assert p3_decision(p1_row, cb_row, cutoff=50)["rule"] == F1_CONFLICT
    assert p3_decision(p1_row, cb_row, threshold=0.0)["rule"] == F1_AGREE  # F1 0 >= 0


def test_p3_rules_apply_in_order() -> None:
    # P1 abstains AND CB unreliable: row 1 wins
    assert p3_decision(gen("q", "abstain"), cb("q", "abstain"))["rule"] == P1_ABSTAINED
    # CB unreliable AND the answers agree: row 2 wins (the F1 is never computed)
    out = p3_decision(gen("q", "answer", "Paris"), cb("q", "answer", "Paris", 10))
    assert out["rule"] == CB_UNRELIABLE and out["f1"] is None


def test_failed_parses_are_neither_answer_nor_abstention() -> None:
    out = p3_decision(gen("q", None), cb("q", "answer", "Paris"))
    assert (out["decision"], out["answer"], out["confidence"], out["rule"]) == (
        None,
        None,
        None,
        RULE_PARSE_FAILED,
    )
    # a failed CB pass gives no parametric signal: defer to P1, under its own rule
    out = p3_decision(gen("q", "answer", "Lyon", 70), cb("q", None))
    assert (out["decision"], out["answer"], out["confidence"], out["rule"]) == (
        "answer",
        "Lyon",
        70,
        RULE_CB_PARSE_FAILED,
    )
    rows = single_pass_decisions(
        [gen("a", "answer", "x", 80, "P0"), gen("b", None, prompt="P0")], "P0"
    )
    assert [r["rule"] for r in rows] == [GENERATED, RULE_PARSE_FAILED]
    assert rows[1]["decision"] is None and rows[1]["confidence"] is None
    assert answer_rate(rows) == (2, 0.5)  # a failed parse did not answer


def test_single_pass_policies_pass_rows_through() -> None:
    rows = [gen("a", "answer", "Paris", 80, "P2", 0), gen("b", "abstain", "", 30, "P2", 1)]
    out = single_pass_decisions(rows, "P2")
    assert out == [
        {
            "qid": "a",
            "index": 0,
            "condition": "QC",
            "policy": "P2",
            "decision": "answer",
            "answer": "Paris",
            "confidence": 80,
            "rule": GENERATED,
        },
        {
            "qid": "b",
            "index": 1,
            "condition": "QC",
            "policy": "P2",
            "decision": "abstain",
            "answer": "",
            "confidence": 30,
            "rule": GENERATED,
        },
    ]
    with pytest.raises(DataError, match="prompt 'P2', expected 'P1'"):
        single_pass_decisions(rows, "P1")


def test_p3_matches_rows_by_qid_and_keeps_the_p1_order() -> None:
    p1_rows = [gen("a", "answer", "Paris", 70, index=0), gen("b", "answer", "Rome", 60, index=1)]
    cb_rows = [cb("b", "answer", "Milan"), cb("z", "answer", "x"), cb("a", "answer", "paris")]
    out = p3_decisions(p1_rows, cb_rows)
    assert [(r["qid"], r["index"], r["rule"]) for r in out] == [
        ("a", 0, F1_AGREE),
        ("b", 1, F1_CONFLICT),
    ]


def test_missing_cb_row_is_a_data_error_naming_qid_and_file() -> None:
    with pytest.raises(DataError, match=r"no closed-book \(CB\) generation row for qid b "):
        p3_decisions([gen("a", "answer"), gen("b", "abstain")], [cb("a", "answer")])
    with pytest.raises(DataError, match="qid a appears more than once"):
        p3_decisions([gen("a", "answer")], [cb("a", "answer"), cb("a", "abstain")])
    with pytest.raises(DataError, match="prompt 'P1', expected 'CB'"):
        p3_decisions([gen("a", "answer")], [gen("a", "answer")])


# --- P4 -------------------------------------------------------------------------------


def test_p4_one_contradicting_passage_among_five_vetoes() -> None:
    p1_row, cb_row = gen("q", "answer", "Anne Archer", 85), cb("q", "answer", "Tami Lynn", 95)
    labels = ["neutral", "neutral", "contradiction", "entailment", "neutral"]
    out = p4_decision(p1_row, cb_row, nli("q", labels))
    assert (out["decision"], out["answer"], out["confidence"], out["rule"]) == (
        "abstain",
        "",
        0,
        NLI_CONTRADICTION,
    )
    assert out["nli_labels"] == labels
    consistent = ["neutral", "neutral", "entailment", "entailment", "neutral"]
    out = p4_decision(p1_row, cb_row, nli("q", consistent))
    assert (out["decision"], out["answer"], out["confidence"], out["rule"]) == (
        "answer",
        "Anne Archer",
        85,
        NLI_CONSISTENT,
    )


def test_p4_shares_p3s_gates_and_they_come_first() -> None:
    contra = nli("q", ["contradiction"] * 5)
    out = p4_decision(gen("q", "abstain", "", 90), cb("q", "answer", "x", 99), contra)
    assert (out["decision"], out["confidence"], out["rule"]) == ("abstain", 0, P1_ABSTAINED)
    for cb_row in (cb("q", "abstain", "", 99), cb("q", "answer", "x", 49)):
        out = p4_decision(gen("q", "answer", "Lyon", 70), cb_row, contra)
        assert (out["decision"], out["answer"], out["confidence"], out["rule"]) == (
            "answer",
            "Lyon",
            70,
            CB_UNRELIABLE,
        )
        assert out["nli_labels"] is None
    # confidence exactly 50 is confident: the NLI labels decide
    out = p4_decision(gen("q", "answer", "Lyon", 70), cb("q", "answer", "x", 50), contra)
    assert out["rule"] == NLI_CONTRADICTION
    assert p4_decision(gen("q", None), cb("q", "answer", "x"), contra)["rule"] == RULE_PARSE_FAILED


def test_p4_files_and_errors() -> None:
    p1_rows = [gen("a", "answer", "Lyon", 70), gen("b", "answer", "Rome", 60)]
    cb_rows = [cb("a", "answer", "Paris", 90), cb("b", "abstain", "", 0)]
    skipped = {**nli("b", []), "skipped_reason": "cb_abstained"}
    out = p4_decisions(p1_rows, cb_rows, [nli("a", ["neutral"] * 5), skipped])
    assert [r["rule"] for r in out] == [NLI_CONSISTENT, CB_UNRELIABLE]
    with pytest.raises(DataError, match="no NLI row for qid b "):
        p4_decisions(p1_rows, cb_rows, [nli("a", ["neutral"])])
    # an NLI file made with a higher cutoff skipped a question P4 needs
    late = {**nli("a", []), "skipped_reason": "cb_low_confidence"}
    with pytest.raises(DataError, match="qid a was skipped .*cutoff"):
        p4_decisions(p1_rows, cb_rows, [late, skipped])
    stale = nli("a", ["neutral"], cb_answer="Marseille")
    with pytest.raises(DataError, match="closed-book answer 'Marseille'"):
        p4_decisions(p1_rows, cb_rows, [stale, skipped])


def test_decide_dispatches_by_policy() -> None:
    inputs = {
        "P0": [gen("a", "answer", "x", 10, "P0")],
        "P1": [gen("a", "answer", "Lyon", 70)],
        "P2": [gen("a", "abstain", "", 10, "P2")],
        "CB": [cb("a", "answer", "Paris", 90)],
        "NLI": [nli("a", ["entailment"])],
    }
    rules = {p: decide(p, inputs)[0]["rule"] for p in ("P0", "P1", "P2", "P3", "P4")}
    assert rules == {
        "P0": GENERATED,
        "P1": GENERATED,
        "P2": GENERATED,
        "P3": F1_CONFLICT,
        "P4": NLI_CONSISTENT,
    }
    assert decide("P3", inputs, {"cutoff": 95})[0]["rule"] == CB_UNRELIABLE
    with pytest.raises(ValueError, match="needs inputs NLI"):
        decide("P4", {k: v for k, v in inputs.items() if k != "NLI"})


# --- Table 12 sweep -------------------------------------------------------------------


def _sweep_cells():
    p1_rows = [
        gen("abst", "abstain", "", 90),  # never answers
        gen("cbno", "answer", "Lyon", 70),  # CB abstains: always answers
        gen("agree", "answer", "Paris", 70),  # F1 1.0, CB conf 95
        gen("half", "answer", "w1 w2", 70),  # F1 0.5, CB conf 60
        gen("none", "answer", "Lyon", 70),  # F1 0 against a CB answer at conf 45
        gen("fail", None),  # parse failed: never answers
    ]
    cb_rows = [
        cb("abst", "answer", "x", 99),
        cb("cbno", "abstain", "", 99),
        cb("agree", "answer", "paris", 95),
        cb("half", "answer", "w1 w2 w3 w4 w5 w6", 60),  # F1 = 2*2/8 = 0.5
        cb("none", "answer", "Rome", 45),
        cb("fail", "answer", "x", 99),
    ]
    return p1_rows, cb_rows


def test_p3_sweep_answer_rates() -> None:
    p1_rows, cb_rows = _sweep_cells()
    rows = p3_sweep(p1_rows, cb_rows)
    assert len(rows) == len(SWEEP_THRESHOLDS) * len(SWEEP_CUTOFFS) == 48
    assert [(r["threshold"], r["cutoff"]) for r in rows[:7]] == [
        (0.0, 0),
        (0.0, 20),
        (0.0, 40),
        (0.0, 50),
        (0.0, 60),
        (0.0, 80),
        (0.2, 0),
    ]
    got = {(r["threshold"], r["cutoff"]): r["answered"] for r in rows}
    assert all(r["n"] == 6 for r in rows)

    def expected(threshold: float, cutoff: int) -> int:
        answered = 1 + 1  # cbno (CB abstains) and agree (F1 1.0 or CB below the cutoff)
        answered += cutoff > 60 or 0.5 >= threshold  # half: CB conf 60
        answered += cutoff > 45 or threshold == 0.0  # none: CB conf 45, F1 0
        return answered

    assert got == {(t, c): expected(t, c) for t in SWEEP_THRESHOLDS for c in SWEEP_CUTOFFS}
    paper = next(r for r in rows if (r["threshold"], r["cutoff"]) == (0.8, 50))
    assert paper == {"threshold": 0.8, "cutoff": 50, "n": 6, "answered": 3, "answer_rate": 0.5}
    # F1 threshold 0.0 is P1 itself (Table 12's first row: FAC 0, P1's answer rate)
    p1_rate = answer_rate(p1_rows)[1]
    assert all(r["answer_rate"] == p1_rate for r in rows if r["threshold"] == 0.0)


def test_p3_sweep_matches_p3_and_filters_qids() -> None:
    p1_rows, cb_rows = _sweep_cells()
    decisions = p3_sweep_decisions(p1_rows, cb_rows, thresholds=(0.8,), cutoffs=(50,))
    assert decisions[(0.8, 50)] == p3_decisions(p1_rows, cb_rows)
    rows = p3_sweep(p1_rows, cb_rows, thresholds=(0.8,), cutoffs=(50,), qids={"half", "agree"})
    assert rows == [{"threshold": 0.8, "cutoff": 50, "n": 2, "answered": 1, "answer_rate": 0.5}]
    empty = p3_sweep(p1_rows, cb_rows, thresholds=(0.8,), cutoffs=(50,), qids=set())
    assert empty[0]["n"] == 0 and math.isnan(empty[0]["answer_rate"])


# --- EVID and EVID_CB ----------------------------------------------------------------------


def evid_row(qid, route, decision="answer", answer="Paris", status="ok", policy="EVID", b=None):
    return {
        "qid": qid,
        "index": 0,
        "condition": "QC",
        "policy": policy,
        "route": route,
        "u_global": {"direct": 0.2, "conflict_aware": 0.5, "abstain": 0.9}[route],
        "frame": ["Paris", "Lyon"],
        "fused_b": b if b is not None else [0.62, 0.18],
        "generator_decision": None if status == "failed" else decision,
        "generator_answer": None if status == "failed" else answer,
        "generator_confidence": None if status == "failed" else 95,
        "parse_status": status,
    }


def test_evid_decisions_follow_the_route() -> None:
    from grabrag.evidential.decisions import evidential_decisions
    from grabrag.policies.rows import (
        CONFLICT_AWARE,
        EVIDENTIAL_ABSTAIN,
        EVIDENTIAL_DIRECT,
        EVIDENTIAL_RULES,
        GENERATOR_ABSTAINED,
    )

    rows = [
        evid_row("direct", "direct"),
        evid_row("gen_abstained", "direct", decision="abstain", answer=""),
        evid_row("failed", "direct", status="failed"),
        evid_row("conflict", "conflict_aware"),  # the generator's answer is overruled
        evid_row("abstain", "abstain", status="failed"),  # a failed parse does not matter
    ]
    out = {r["qid"]: r for r in evidential_decisions(rows, "EVID")}
    assert [r["qid"] for r in evidential_decisions(rows, "EVID")] == [r["qid"] for r in rows]
    direct = out["direct"]
    assert (direct["decision"], direct["answer"], direct["rule"]) == (
        "answer",
        "Paris",
        EVIDENTIAL_DIRECT,
    )
    # Eq. 27: 100 x the largest fused singleton mass, not the generator's own 95
    assert direct["confidence"] == pytest.approx(62.0)
    assert (direct["policy"], direct["route"], direct["u_global"]) == ("EVID", "direct", 0.2)
    assert out["gen_abstained"]["decision"] == "abstain"
    assert (out["gen_abstained"]["rule"], out["gen_abstained"]["confidence"]) == (
        GENERATOR_ABSTAINED,
        0,
    )
    failed = out["failed"]
    assert (failed["decision"], failed["answer"], failed["confidence"], failed["rule"]) == (
        None,
        None,
        None,
        RULE_PARSE_FAILED,
    )
    assert (out["conflict"]["decision"], out["conflict"]["rule"]) == ("abstain", CONFLICT_AWARE)
    assert out["conflict"]["answer"] == "" and out["conflict"]["confidence"] == 0
    assert (out["abstain"]["decision"], out["abstain"]["rule"]) == ("abstain", EVIDENTIAL_ABSTAIN)
    assert {r["rule"] for r in out.values()} <= set(EVIDENTIAL_RULES)
    # Eq. 27 and the selected claim on every route (EvidentialRAG's ECE scores them all)
    for row in out.values():
        assert (row["fused_confidence"], row["selected_claim"]) == (pytest.approx(62.0), "Paris")
    # parse failures count as neither an answer nor an abstention downstream
    assert answer_rate(list(out.values())) == (5, 0.2)


def test_evid_cb_dispatch_and_errors() -> None:
    rows = [evid_row("a", "direct", policy="EVID_CB", b=[0.3, 0.5])]
    decided = decide("EVID_CB", {"EVID_CB": rows})[0]
    assert decided["policy"] == "EVID_CB" and decided["confidence"] == pytest.approx(50.0)
    with pytest.raises(DataError, match="expected 'EVID'"):
        decide("EVID", {"EVID": rows})
    with pytest.raises(DataError, match="unknown route"):
        decide("EVID", {"EVID": [{**evid_row("a", "direct"), "route": "maybe"}]})
    with pytest.raises(DataError, match="more than once"):
        decide("EVID", {"EVID": [evid_row("a", "direct"), evid_row("a", "abstain")]})
    with pytest.raises(DataError, match="'fused_b' is missing"):
        row = evid_row("a", "direct")
        del row["fused_b"]
        decide("EVID", {"EVID": [row]})
    with pytest.raises(ValueError, match="needs inputs EVID"):
        decide("EVID", {"P1": []})


def test_decision_rows_name_their_cell() -> None:
    from grabrag.core.registry import with_cell

    rows = [{"qid": "q1", "index": 0, "condition": "QC", "policy": "P1", "decision": "abstain"}]
    (row,) = with_cell(rows, "m", "nq", "QC", "P1")
    assert list(row)[:6] == ["model", "dataset", "condition", "policy", "qid", "index"]
    assert (row["model"], row["dataset"], row["decision"]) == ("m", "nq", "abstain")
    # a policy that returns another cell's rows is a bug, named as such
    with pytest.raises(ValueError, match="policy P1: .* question 'q1' says condition 'QC'"):
        with_cell(rows, "m", "nq", "Q0", "P1")


def test_p3_sweep_grid_holds_the_configured_setting() -> None:
    from grabrag.policies.paper import SWEEP_CUTOFFS, SWEEP_THRESHOLDS, p3_sweep_grid

    assert p3_sweep_grid(0.8, 50) == {
        "thresholds": list(SWEEP_THRESHOLDS),
        "cutoffs": list(SWEEP_CUTOFFS),
    }
    # a setting off the grid joins it, in order, so Table 12 and the figure find it
    grid = p3_sweep_grid(0.75, 45)
    assert grid["thresholds"] == [0.0, 0.2, 0.4, 0.6, 0.7, 0.75, 0.8, 0.9, 1.0]
    assert grid["cutoffs"] == [0, 20, 40, 45, 50, 60, 80]
