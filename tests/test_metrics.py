"""Metrics of GRAB-RAG section 3.5 and Appendix A on hand-made rows; expected values are
computed by hand from the formulas (the arithmetic is in the comments)."""

from __future__ import annotations

import itertools
import json
import math
import pickle

import numpy as np
import pytest

from grabrag.core.text import normalize_answer
from grabrag.scoring.abstention import (
    answer_rate,
    audit_hwsa,
    capability_set,
    decision_rate,
    em_rate,
    f1_rate,
    fac,
    hwsa,
    qc_breakdown,
)
from grabrag.scoring.answers import (
    ECHO,
    HALLUCINATION,
    OVERRIDE,
    classify_qc_answer,
    exact_match,
    row_correct,
    token_f1,
)
from grabrag.scoring.calibration import (
    aurc,
    aurc_from_levels,
    confidence_and_correct,
    ece,
    ece_bin_index,
    ece_from_levels,
    reliability_bins,
    risk_coverage,
)
from grabrag.scoring.value import Value


def row(qid: str, decision: str | None, answer: str | None = "", confidence: int | None = 50):
    return {"qid": qid, "decision": decision, "answer": answer, "confidence": confidence}


# --- the existing answer scoring (behaviour kept) ----------------------------------------


def test_squad_scoring_unchanged() -> None:
    assert normalize_answer("The  U.S. Army!") == "us army"
    assert exact_match("the Beatles", ["Beatles", "The Fab Four"]) == 1.0
    assert exact_match(None, ["x"]) == 0.0
    # pred [carrie], gold [carrie, underwood]: P = 1, R = 1/2, F1 = 2PR/(P+R) = 2/3
    assert token_f1("Carrie", ["Carrie Underwood"]) == pytest.approx(2 / 3)
    assert answer_rate([row("a", "answer"), row("b", None)]) == (2, 0.5)


# --- Value -----------------------------------------------------------------------------


def test_value_is_a_float_with_n_and_reason() -> None:
    v = Value(0.25, 8)
    assert v == 0.25 and v.n == 8 and v.reason is None and v.value == 0.25
    assert isinstance(v + 1, float) and json.dumps([v]) == "[0.25]"
    assert pickle.loads(pickle.dumps(v)).n == 8
    nan = Value.undefined("empty")
    assert math.isnan(nan) and nan.n == 0 and nan.reason == "empty"
    assert "empty" in repr(nan)


# --- rates --------------------------------------------------------------------------------


def test_hwsa_counts_any_answer_and_not_failed_parses() -> None:
    rows = [
        row("q1", "answer", "Paris"),  # a correct answer still counts at QC
        row("q2", "answer", "Lyon"),
        row("q3", "abstain"),
        row("q4", None, None, None),  # unparseable: not answered
    ]
    # 2 answered of 4 rows
    assert hwsa(rows) == 0.5 and hwsa(rows).n == 4
    # on the subset {q1, q3}: 1 of 2
    assert hwsa(rows, {"q1", "q3"}) == 0.5 and hwsa(rows, {"q1", "q3"}).n == 2
    assert decision_rate(rows, "abstain") == 0.25
    assert decision_rate(rows, None) == 0.25  # the parse-failed share
    empty = hwsa(rows, set())
    assert math.isnan(empty) and "QC-eligible" in empty.reason


def test_audit_hwsa_on_the_clean_subset_with_paired_q0() -> None:
    qc = [
        row("q1", "answer", "x"),
        row("q2", "answer", "y"),
        row("q3", "abstain"),
        row("q4", "answer", "z"),
    ]
    # q5 is not QC-eligible: its Q0 row must not enter the paired Q0 rate.
    q0 = [row("q1", "abstain"), row("q2", "answer", "y"), row("q3", "abstain")]
    q0 += [row("q4", "abstain"), row("q5", "answer", "w")]
    values = audit_hwsa(qc, q0, ["q1", "q3"])  # q2, q4 rated broken
    # QC: 3 of 4 answered; clean {q1, q3}: 1 of 2; shift 0.5 - 0.75 = -0.25
    assert values["qc_all"] == 0.75 and values["qc_all"].n == 4
    assert values["qc_clean"] == 0.5 and values["qc_clean"].n == 2
    assert values["shift"] == -0.25
    # Q0 on the QC questions q1-q4: 1 of 4; on {q1, q3}: 0 of 2
    assert values["q0_all"] == 0.25 and values["q0_all"].n == 4
    assert values["q0_clean"] == 0.0 and values["q0_clean"].n == 2
    # QC - Q0: 0.75 - 0.25 = 0.5 (all), 0.5 - 0 = 0.5 (clean)
    assert values["delta_all"] == 0.5 and values["delta_clean"] == 0.5
    none_clean = audit_hwsa(qc, q0, ["q9"])
    assert math.isnan(none_clean["qc_clean"])
    assert "fluent/borderline" in none_clean["qc_clean"].reason
    assert math.isnan(none_clean["shift"]) and none_clean["shift"].reason
    no_q0 = audit_hwsa(qc, None, ["q1"])
    assert math.isnan(no_q0["delta_all"]) and "Q0" in no_q0["delta_all"].reason
    assert no_q0["qc_clean"] == 1.0


def test_fac_on_the_capability_set() -> None:
    gold = {"q1": ["Paris"], "q2": ["1939"], "q3": ["Carrie Underwood"], "q4": ["blue whale"]}
    p1_q100 = [
        row("q1", "answer", "paris."),  # EM 1 after normalisation
        row("q2", "answer", "1939"),  # EM 1
        row("q3", "answer", "Carrie"),  # EM 0
        row("q4", "abstain"),  # EM 0
    ]
    capability = capability_set(p1_q100, gold)
    assert capability == {"q1", "q2"}
    policy = [
        row("q1", "abstain"),
        row("q2", None, None, None),  # a failed parse is not an abstention (Eq. 2)
        row("q3", "abstain"),  # outside C: ignored
        row("q4", "abstain"),
    ]
    # abstentions on C = {q1}: 1 / |C| = 1/2
    assert fac(policy, capability) == 0.5 and fac(policy, capability).n == 2
    none = fac(policy, set())
    assert math.isnan(none) and "capability set" in none.reason


def test_em_and_f1_rates_score_abstentions_and_failures_zero() -> None:
    gold = {"q1": ["Paris"], "q2": ["Carrie Underwood"], "q3": ["x"], "q4": ["y"]}
    rows = [
        row("q1", "answer", "Paris"),  # EM 1, F1 1
        row("q2", "answer", "Carrie"),  # EM 0, F1 2/3
        row("q3", "abstain", "x"),  # an abstention scores 0 even with the gold text
        row("q4", None, None, None),  # unparseable scores 0
    ]
    assert em_rate(rows, gold) == pytest.approx(1 / 4)
    # (1 + 2/3 + 0 + 0) / 4
    assert f1_rate(rows, gold) == pytest.approx((1 + 2 / 3) / 4)
    assert math.isnan(em_rate([], gold)) and em_rate([], gold).reason == "no rows"


def test_row_correct_per_condition() -> None:
    answered_right = row("q", "answer", "Paris", 80)
    abstained = row("q", "abstain", "", 80)
    assert row_correct(answered_right, ["Paris"], "Q100") == 1
    assert row_correct(abstained, ["Paris"], "Q50") == 0
    assert row_correct(answered_right, ["Paris"], "QC") == 0  # should have abstained
    assert row_correct(abstained, ["Paris"], "Q0") == 1
    assert row_correct(row("q", None, None, None), ["Paris"], "Q0") is None
    with pytest.raises(ValueError, match="unknown condition"):
        row_correct(abstained, ["Paris"], "Qclosed")


# --- QC breakdown ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "strict", "lenient"),
    [
        ("1949", ECHO, ECHO),  # equal to the planted replacement
        ("The 1949.", ECHO, ECHO),  # equal after normalisation (article, punctuation)
        ("In 1949.", HALLUCINATION, ECHO),  # contains it on word boundaries
        ("Miriam Margolyes (actress)", HALLUCINATION, ECHO),
        ("miriam margolyes", ECHO, ECHO),
        ("Margolyes", HALLUCINATION, HALLUCINATION),  # only part of the planted entity
        ("19490", HALLUCINATION, HALLUCINATION),  # not on a word boundary
        ("1939", OVERRIDE, OVERRIDE),  # the gold answer
        ("the year 1939", HALLUCINATION, OVERRIDE),
        ("1939 or 1949", HALLUCINATION, OVERRIDE),  # holds both: gold first when lenient
        ("1959", HALLUCINATION, HALLUCINATION),
        ("", HALLUCINATION, HALLUCINATION),
        (None, HALLUCINATION, HALLUCINATION),
    ],
)
def test_classify_qc_answer(answer: str | None, strict: str, lenient: str) -> None:
    """The paper's "matches" is a normalised match; containment is the lenient split."""
    planted = ["1949", "Miriam Margolyes"]
    assert classify_qc_answer(answer, ["1939"], planted) == strict
    assert classify_qc_answer(answer, ["1939"], planted, lenient=True) == lenient


def test_qc_breakdown_counts_and_shares() -> None:
    contexts = {
        "q1": {"answers": ["Paris"], "replacement": "Lyon", "replacement_entity": "Lyon"},
        "q2": {"answers": ["1939"], "replacement": "1949", "replacement_entity": "1949"},
        "q3": {"answers": ["Adams"], "replacement": "John Smith", "replacement_entity": "Smith"},
        "q4": {"answers": ["x"], "replacement": "y", "replacement_entity": "y"},
    }
    rows = [
        row("q1", "answer", "Lyon"),  # echo
        row("q2", "answer", "in 1939"),  # hallucination; lenient: override
        row("q3", "answer", "Smith"),  # echo via replacement_entity
        row("q4", "abstain"),  # not answered
    ]
    out = qc_breakdown(rows, contexts)
    # 3 answered of 4 QC rows; echo 2, override 0, hallucination 1 of 3 answered
    assert out["answered"] == 3 and out["answered"].n == 4
    assert (out["echo"], out["override"], out["hallucination"]) == (2, 0, 1)
    assert out["echo_share"] == pytest.approx(2 / 3) and out["echo_share"].n == 3
    assert out["override_share"] == 0.0
    lenient = qc_breakdown(rows, contexts, lenient=True)
    assert (lenient["echo"], lenient["override"], lenient["hallucination"]) == (2, 1, 0)
    none = qc_breakdown([row("q4", "abstain")], contexts)
    assert none["answered"] == 0
    assert math.isnan(none["echo_share"]) and none["echo_share"].reason == "no answered QC rows"


# --- AURC ----------------------------------------------------------------------------------


def test_aurc_without_ties_matches_appendix_a() -> None:
    # ranked y = 1, 0, 1, 0; risks 1 - S_k/k: 0, 1/2, 1/3, 1/2; AURC = (4/3)/4 = 1/3
    assert aurc([90, 70, 50, 30], [1, 0, 1, 0]) == pytest.approx(1 / 3)
    # input order does not matter without ties
    assert aurc([30, 50, 90, 70], [0, 1, 1, 0]) == pytest.approx(1 / 3)
    # all correct: 0; all wrong: 1
    assert aurc([10, 20], [1, 1]) == 0.0 and aurc([10, 20], [0, 0]) == 1.0


def test_aurc_averages_over_ties() -> None:
    # conf 80, 80, 20 with y 1, 0, 1. Orders within the tie: (1, 0, 1) gives risks
    # 0, 1/2, 1/3 (sum 5/6); (0, 1, 1) gives 1, 1/2, 1/3 (sum 11/6).
    # Expected AURC = ((5/6 + 11/6) / 2) / 3 = 4/9.
    assert aurc([80, 80, 20], [1, 0, 1]) == pytest.approx(4 / 9)
    assert aurc([80, 80, 20], [0, 1, 1]) == pytest.approx(4 / 9)  # order-invariant
    # stable input order, for comparison: (1, 0, 1) -> 5/18, (0, 1, 1) -> 11/18
    assert aurc([80, 80, 20], [1, 0, 1], ties="input") == pytest.approx(5 / 18)
    assert aurc([80, 80, 20], [0, 1, 1], ties="input") == pytest.approx(11 / 18)
    with pytest.raises(ValueError, match="ties"):
        aurc([1], [1], ties="random")


def test_aurc_equals_the_mean_over_all_tie_orders() -> None:
    rng = np.random.default_rng(7)
    for _ in range(100):
        n = int(rng.integers(1, 7))
        conf = rng.integers(0, 3, n) * 40
        y = rng.integers(0, 2, n)
        risks = []
        for perm in itertools.permutations(range(n)):
            if np.all(np.diff(conf[list(perm)]) <= 0):  # a valid descending order
                ranked = y[list(perm)]
                risks.append(np.mean(1 - np.cumsum(ranked) / np.arange(1, n + 1)))
        assert aurc(conf, y) == pytest.approx(np.mean(risks), abs=1e-12)


def test_aurc_from_levels_is_vectorised_over_leading_axes() -> None:
    # levels 90 > 50: rows (2, 1), correct (1, 1); and an empty set of weights
    n_at = np.array([[2.0, 1.0], [0.0, 0.0]])
    correct_at = np.array([[1.0, 1.0], [0.0, 0.0]])
    out = aurc_from_levels(n_at, correct_at)
    # first: tie at 90 (E S_1 = 1/2, S_2 = 1), then S_3 = 2: risks 1/2, 1/2, 1/3 -> 4/9
    assert out[0] == pytest.approx(4 / 9) and math.isnan(out[1])
    assert aurc([90, 90, 50], [1, 0, 1]) == pytest.approx(4 / 9)


def test_risk_coverage_curve_averages_to_aurc() -> None:
    coverage, risk = risk_coverage([80, 80, 20], [1, 0, 1])
    assert coverage.tolist() == pytest.approx([1 / 3, 2 / 3, 1.0])
    # E S_1 = 1/2, S_2 = 1, S_3 = 2: risks 1/2, 1/2, 1/3
    assert risk.tolist() == pytest.approx([0.5, 0.5, 1 / 3])
    assert risk.mean() == pytest.approx(aurc([80, 80, 20], [1, 0, 1]))


# --- ECE -------------------------------------------------------------------------------------


def test_ece_bin_midpoint_form_by_hand() -> None:
    conf = [0, 5, 10, 55, 100, 95]
    y = [0, 0, 1, 1, 1, 0]
    # bins of width 0.1: {0, 5} -> [0, .1) mid .05: |0 - 2*.05| = .1
    # {10} -> [.1, .2) mid .15: |1 - .15| = .85;  {55} -> mid .55: |1 - .55| = .45
    # {100, 95} -> last bin mid .95: |1 - 2*.95| = .9
    # ECE = (.1 + .85 + .45 + .9) / 6 = 2.3 / 6
    assert ece(conf, y) == pytest.approx(2.3 / 6)
    assert ece(conf, y).n == 6


def test_ece_fifteen_bins() -> None:
    # 15 bins of width 1/15: 20 -> floor(20*15/100) = 3 (an edge, goes up), mid 3.5/15;
    # 19 -> floor(2.85) = 2, mid 2.5/15.  ECE = (|1 - 3.5/15| + |0 - 2.5/15|) / 2
    assert ece([20, 19], [1, 0], n_bins=15) == pytest.approx((abs(1 - 3.5 / 15) + 2.5 / 15) / 2)


def test_ece_bin_edges() -> None:
    # left-closed bins: an edge goes to the upper bin; 100 (1.0) to the last bin
    assert ece_bin_index([0, 9.999, 10, 69.99, 70, 99, 100], 10).tolist() == [
        0,
        0,
        1,
        6,
        7,
        9,
        9,
    ]
    # no float trap: 0.7 * 10 is 7.000000000000001 but 70 * 10 / 100 is exactly 7
    assert ece_bin_index(list(range(0, 101, 10)), 10).tolist() == [*range(10), 9]
    assert ece_bin_index([20, 40, 60], 15).tolist() == [3, 6, 9]


def test_ece_from_levels_any_order() -> None:
    levels = np.array([10.0, 95.0, 100.0])  # not sorted
    n_at = np.array([1.0, 1.0, 1.0])
    correct_at = np.array([1.0, 0.0, 1.0])
    # bin 1: |1 - .15| = .85; bin 9: |1 - 2 * .95| = .9  -> 1.75 / 3
    assert ece_from_levels(levels, n_at, correct_at) == pytest.approx(1.75 / 3)
    assert ece([10, 95, 100], [1, 0, 1]) == pytest.approx(1.75 / 3)


def test_reliability_bins() -> None:
    bins = reliability_bins([0, 5, 10, 100], [0, 1, 1, 1])
    assert len(bins) == 10
    assert bins[0]["n"] == 2 and bins[0]["accuracy"] == 0.5
    assert bins[0]["mean_confidence"] == pytest.approx(0.025)
    assert bins[9]["n"] == 1 and bins[9]["mid"] == pytest.approx(0.95)
    assert math.isnan(bins[5]["accuracy"])


def test_zero_size_confidence_metrics_are_nan_with_reason() -> None:
    for value in (aurc([], []), ece([], [])):
        assert math.isnan(value) and value.n == 0 and "no evaluated rows" in value.reason


def test_confidence_inputs_are_checked() -> None:
    with pytest.raises(ValueError, match="0-100"):
        aurc([101], [1])
    with pytest.raises(ValueError, match="0-100"):
        ece([float("nan")], [1])
    with pytest.raises(ValueError, match="values"):
        aurc([1, 2], [1])
    with pytest.raises(ValueError, match="0/1"):
        ece([1], [2])


def test_confidence_and_correct_leaves_out_failed_parses() -> None:
    gold = {"q1": ["Paris"], "q2": ["Rome"], "q3": ["Oslo"]}
    rows = [
        row("q1", "answer", "Paris", 90),
        row("q2", None, None, None),
        row("q3", "abstain", "", 0),
    ]
    assert confidence_and_correct(rows, gold, "Q100") == ([90.0, 0.0], [1, 0])
    assert confidence_and_correct(rows, gold, "QC") == ([90.0, 0.0], [0, 1])


# --- EvidentialRAG's ECE (Eqs. 26-27) -------------------------------------------------------


def test_ece_mean_uses_each_bins_mean_confidence() -> None:
    from grabrag.scoring.calibration import ece, ece_mean

    # A small EVID cell, Eq. 27 confidences (0-100) and whether the selected claim is
    # right. 15 bins of width 1/15: 95 and 94 -> bin 14 (floor(14.25), floor(14.1)),
    # 60 -> bin 9, 0 and 0 -> bin 0.
    #   bin 14: 2 rows, acc 1/2, mean conf 0.945 -> 2/5 * |0.5 - 0.945| = 0.178
    #   bin 9:  1 row,  acc 0,   mean conf 0.60  -> 1/5 * 0.60          = 0.120
    #   bin 0:  2 rows, acc 0,   mean conf 0     -> 0
    confidences = [95, 94, 60, 0, 0]
    correct = [1, 0, 0, 0, 0]
    assert ece_mean(confidences, correct) == pytest.approx(0.298)
    assert ece_mean(confidences, correct).n == 5
    # GRAB-RAG's midpoint form differs: bin 14's midpoint is 14.5/15, bin 0's 0.5/15
    midpoint = (2 * abs(0.5 - 14.5 / 15) + abs(0 - 9.5 / 15) + 2 * abs(0 - 0.5 / 15)) / 5
    assert ece(confidences, correct, 15) == pytest.approx(midpoint)
    # an all-abstain Q0 cell without any claim: confidence 0, nothing selected -> 0
    assert ece_mean([0, 0, 0], [0, 0, 0]) == 0.0
    assert math.isnan(ece_mean([], []))
    with pytest.raises(ValueError):
        ece_mean([50], [1], n_bins=0)


def test_selected_answer_score() -> None:
    from grabrag.scoring.calibration import selected_answer_score

    # EVID rows: Eq. 27 on every route, the selected claim against gold
    routed = {"decision": "abstain", "confidence": 0, "fused_confidence": 61.0,
              "selected_claim": "paris"}  # fmt: skip
    assert selected_answer_score(routed, ["Paris"]) == (61.0, 1)
    empty = {"decision": "abstain", "confidence": 0, "fused_confidence": 0.0,
             "selected_claim": None}  # fmt: skip
    assert selected_answer_score(empty, ["Paris"]) == (0.0, 0)
    # other rows: their own confidence; an abstention selects nothing
    assert selected_answer_score({"decision": "answer", "answer": "Paris", "confidence": 80},
                                 ["Paris"]) == (80.0, 1)  # fmt: skip
    assert selected_answer_score({"decision": "abstain", "answer": "", "confidence": 30},
                                 ["Paris"]) == (30.0, 0)  # fmt: skip
    assert selected_answer_score({"decision": None, "confidence": None}, ["Paris"]) is None
