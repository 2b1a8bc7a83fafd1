"""The tidy metric table on hand-made cells; expected values computed by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest

from grabrag.core.errors import DataError
from grabrag.core.outputs import read_metrics
from grabrag.evaluation.evaluate import (
    abstention_over_datasets,
    dataset_seed,
    evaluate,
    evaluate_dataset,
)
from grabrag.evaluation.inputs import read_context_files, read_decision_files
from grabrag.evaluation.schema import COLUMNS
from grabrag.report.tabular import rows_csv
from grabrag.scoring.abstention import (
    capability_set,
    em_rate,
    f1_rate,
    fac,
    hwsa,
    qc_breakdown,
    refusal_f1_from,
    refusal_scores,
)
from grabrag.scoring.answers import QC_CATEGORIES
from grabrag.scoring.bootstrap import bootstrap_totals, percentile_interval, ratio, resample_counts
from grabrag.scoring.calibration import aurc, confidence_and_correct, ece

GOLD = {"q1": ["Paris"], "q2": ["1939"], "q3": ["Carrie Underwood"], "q4": ["blue whale"]}
PLANTED = {"q1": "Lyon", "q2": "1949", "q3": "Miriam Margolyes"}  # q4 is not QC-eligible


def contexts(qc_qids=("q1", "q2", "q3")) -> dict[tuple[str, str], list[dict]]:
    out = {}
    for condition in ("Q100", "Q50", "Q0"):
        out[("ds", condition)] = [
            {"qid": q, "index": i, "answers": GOLD[q]} for i, q in enumerate(GOLD)
        ]
    out[("ds", "QC")] = [
        {
            "qid": q,
            "index": list(GOLD).index(q),
            "answers": GOLD[q],
            "replacement": PLANTED[q],
            "replacement_entity": PLANTED[q],
        }
        for q in qc_qids
    ]
    return out


def r(qid, decision, answer="", confidence=0):
    return {"qid": qid, "decision": decision, "answer": answer, "confidence": confidence}


FAIL = {"decision": None, "answer": None, "confidence": None}

P1 = {
    "Q100": [
        r("q1", "answer", "Paris", 90),  # EM 1
        r("q2", "answer", "1939", 80),  # EM 1
        r("q3", "answer", "Carrie", 60),  # EM 0, F1 2/3
        r("q4", "abstain", "", 30),
    ],
    "Q50": [
        r("q1", "answer", "Paris", 70),  # EM 1
        r("q2", "abstain", "", 40),
        {"qid": "q3", **FAIL},  # unparseable
        r("q4", "answer", "orca", 50),  # EM 0
    ],
    "Q0": [
        r("q1", "abstain", "", 20),
        r("q2", "abstain", "", 10),
        r("q3", "answer", "Carrie Underwood", 90),
        r("q4", "abstain", "", 10),
    ],
    "QC": [
        r("q1", "answer", "Lyon", 85),  # echo
        r("q2", "answer", "in 1939", 75),  # hallucination (lenient: override), EM 0, F1 2/3
        r("q3", "answer", "Andrew Brown", 65),  # hallucination
    ],
}
P3 = {
    "Q100": [
        r("q1", "answer", "Paris", 90),
        r("q2", "abstain"),
        r("q3", "abstain"),
        r("q4", "abstain"),
    ],
    "Q50": [
        r("q1", "abstain"),
        r("q2", "abstain"),
        {"qid": "q3", **FAIL},
        r("q4", "answer", "orca", 50),
    ],
    "Q0": [r(q, "abstain") for q in GOLD],
    "QC": [r("q1", "answer", "Lyon", 85), r("q2", "abstain"), r("q3", "abstain")],
}


def decisions(policies=None) -> dict[tuple[str, str, str, str], list[dict]]:
    policies = policies or {"P1": P1, "P3": P3}
    return {
        ("m", "ds", condition, policy): rows
        for policy, cells in policies.items()
        for condition, rows in cells.items()
    }


@pytest.fixture(scope="module")
def table() -> dict[tuple[str, str, str], dict]:
    rows = evaluate(decisions(), contexts(), n_resamples=500, seed=1)
    assert all(set(row) == set(COLUMNS) for row in rows)
    keyed = {(row["policy"], row["condition"], row["metric"]): row for row in rows}
    assert len(keyed) == len(rows)  # one row per (policy, condition, metric)
    return keyed


def value(table, policy, condition, metric):
    return table[(policy, condition, metric)]["value"]


def test_rates_em_and_f1_per_cell(table) -> None:
    # P1 Q100: answered 3/4; abstained 1/4; EM (1+1+0+0)/4; F1 (1+1+2/3+0)/4
    assert value(table, "P1", "Q100", "answer_rate") == 0.75
    assert value(table, "P1", "Q100", "abstain_rate") == 0.25
    assert value(table, "P1", "Q100", "em") == 0.5
    assert value(table, "P1", "Q100", "f1") == pytest.approx((2 + 2 / 3) / 4)
    # P1 Q50: answered 2/4; failed parse 1/4 (counted as not answered, scored 0)
    assert value(table, "P1", "Q50", "answer_rate") == 0.5
    assert value(table, "P1", "Q50", "parse_failed_rate") == 0.25
    assert value(table, "P1", "Q50", "em") == 0.25
    # P1 QC: EM 0 ("in 1939" is not exact); F1 (0 + 2/3 + 0)/3
    assert value(table, "P1", "QC", "em") == 0.0
    assert value(table, "P1", "QC", "f1") == pytest.approx(2 / 9)
    assert table[("P1", "QC", "answer_rate")]["n"] == 3  # the QC-eligible questions


def test_fac_on_the_p1_capability_set(table) -> None:
    # C = {q1, q2} (P1 EM 1 at Q100). P1 Q100 abstains on neither: 0/2, CI [0, 0]
    row = table[("P1", "Q100", "fac")]
    assert (row["value"], row["n"], row["ci_low"], row["ci_high"]) == (0.0, 2, 0.0, 0.0)
    assert value(table, "P1", "Q50", "fac") == 0.5  # q2 abstains at Q50
    assert value(table, "P3", "Q100", "fac") == 0.5  # q2 abstains
    assert value(table, "P3", "Q50", "fac") == 1.0  # q1, q2 abstain


def test_hwsa_on_the_paired_subset_and_the_difference(table) -> None:
    # eligible = {q1, q2, q3}. P1 Q0 answers q3: 1/3; QC answers all: 3/3; diff 2/3
    assert value(table, "P1", "Q0", "hwsa") == pytest.approx(1 / 3)
    assert value(table, "P1", "QC", "hwsa") == 1.0
    assert value(table, "P1", "QC-Q0", "hwsa_diff") == pytest.approx(2 / 3)
    assert table[("P1", "QC-Q0", "hwsa_diff")]["n"] == 3
    # Q0's plain answer rate is over all 4 questions: 1/4
    assert value(table, "P1", "Q0", "answer_rate") == 0.25
    # P3: Q0 0/3, QC 1/3
    assert value(table, "P3", "QC-Q0", "hwsa_diff") == pytest.approx(1 / 3)


def test_qc_breakdown(table) -> None:
    # P1: echo q1, hallucination q2 ("in 1939" is no normalised match) and q3
    expected = {"echo": 1, "override": 0, "hallucination": 2}
    for category, count in expected.items():
        assert value(table, "P1", "QC", f"qc_{category}") == count
        assert value(table, "P1", "QC", f"qc_{category}_share") == pytest.approx(count / 3)
    # the lenient (containment) split: q2 contains the gold, an override
    for category in ("echo", "override", "hallucination"):
        assert value(table, "P1", "QC", f"qc_{category}_lenient") == 1
        assert value(table, "P1", "QC", f"qc_{category}_lenient_share") == pytest.approx(1 / 3)
    assert value(table, "P1", "QC", "qc_answered") == 3
    # P3: one answer, an echo
    assert value(table, "P3", "QC", "qc_echo_share") == 1.0
    assert value(table, "P3", "QC", "qc_override_share") == 0.0
    assert table[("P3", "QC", "qc_echo_share")]["n"] == 1


def test_aurc_and_ece_per_cell(table) -> None:
    # P1 Q100 (conf, y): (90,1) (80,1) (60,0) (30,0 abstained at Q100)
    # risks: 0, 0, 1/3, 1/2 -> AURC = (5/6)/4
    assert value(table, "P1", "Q100", "aurc") == pytest.approx(5 / 24)
    # ECE: |1-.95| + |1-.85| + |0-.65| + |0-.35| = 1.2 -> 1.2/4
    assert value(table, "P1", "Q100", "ece") == pytest.approx(0.3)
    # P1 Q50 (the failed parse is left out): (70,1) (50,0) (40,0)
    # risks 0, 1/2, 2/3 -> 7/18 ;  ECE (.25 + .55 + .45)/3
    assert value(table, "P1", "Q50", "aurc") == pytest.approx(7 / 18)
    assert table[("P1", "Q50", "aurc")]["n"] == 3
    assert value(table, "P1", "Q50", "ece") == pytest.approx(1.25 / 3)
    # P1 Q0 (correct = abstained): (90,0) (20,1) (10,1) (10,1)
    # risks 1, 1/2, 1/3, 1/4 -> (25/12)/4 ;  ECE (.95 + .75 + |2 - 2*.15|)/4 = 3.4/4
    assert value(table, "P1", "Q0", "aurc") == pytest.approx(25 / 48)
    assert value(table, "P1", "Q0", "ece") == pytest.approx(0.85)
    # P1 QC: every row answered, so nothing is correct: AURC 1; ECE (.85+.75+.65)/3
    assert value(table, "P1", "QC", "aurc") == 1.0
    assert value(table, "P1", "QC", "ece") == pytest.approx(0.75)
    # 15 bins at QC: 85 -> floor(12.75)=12, 75 -> 11, 65 -> 9; mids (k+.5)/15, y = 0
    assert value(table, "P1", "QC", "ece_15") == pytest.approx((12.5 + 11.5 + 9.5) / 15 / 3)


def test_pooled_aurc_averages_the_tie(table) -> None:
    # all 14 scored P1 rows, by confidence: 90 {Q100 y1, Q0 y0} (a tie: E S_1 = 1/2),
    # 85 y0, 80 y1, 75 y0, 70 y1, 65 y0, 60 y0, 50 y0, 40 y0, 30 y0, 20 y1, 10 {y1, y1}
    cumulative = [0.5, 1, 1, 2, 2, 3, 3, 3, 3, 3, 3, 4, 5, 6]
    expected = sum(1 - s / k for k, s in enumerate(cumulative, start=1)) / 14
    row = table[("P1", "all", "aurc")]
    assert row["value"] == pytest.approx(expected) and row["n"] == 14
    conf, correct = [], []
    for condition, rows in P1.items():
        c, y = confidence_and_correct(rows, GOLD, condition)
        conf += c
        correct += y
    assert row["value"] == pytest.approx(aurc(conf, correct))
    assert value(table, "P1", "all", "ece") == pytest.approx(ece(conf, correct))


def test_normalised_hwsa_and_policy_mean(table) -> None:
    # P1: HwSA@QC 1 / Ans@Q100 0.75 ; P3: (1/3) / 0.25
    assert value(table, "P1", "QC", "normalised_hwsa") == pytest.approx(4 / 3)
    assert value(table, "P3", "QC", "normalised_hwsa") == pytest.approx(4 / 3)
    # mean over P1, P3: HwSA@QC (1 + 1/3)/2 = 2/3; Ans@Q100 (.75 + .25)/2 = .5 -> 4/3
    assert value(table, "mean", "QC", "hwsa") == pytest.approx(2 / 3)
    assert value(table, "mean", "Q100", "answer_rate") == 0.5
    assert value(table, "mean", "QC", "normalised_hwsa") == pytest.approx(4 / 3)


def test_selection_bias_em_gap(table) -> None:
    # P1 Q100 EM: eligible {q1, q2, q3} = 2/3; excluded {q4} = 0; gap 2/3
    assert value(table, "P1", "Q100", "em_eligible") == pytest.approx(2 / 3)
    assert value(table, "P1", "Q100", "em_excluded") == 0.0
    assert value(table, "P1", "Q100", "em_gap") == pytest.approx(2 / 3)
    assert table[("P1", "Q100", "em_excluded")]["n"] == 1


def test_refusal_precision_recall_f1_pooled_over_conditions(table) -> None:
    # P1 refusals: Q100 q4, Q50 q2 (the failed q3 is no refusal), Q0 q1 q2 q4, QC none:
    # R = 5, R and U = 3 (Q0), U = 4 (Q0) + 3 (QC) = 7 -> P 3/5, R 3/7, F1 1/2
    assert value(table, "P1", "pooled", "refusal_precision") == pytest.approx(3 / 5)
    assert value(table, "P1", "pooled", "refusal_recall") == pytest.approx(3 / 7)
    assert value(table, "P1", "pooled", "refusal_f1") == pytest.approx(0.5)
    assert table[("P1", "pooled", "refusal_precision")]["n"] == 5
    assert table[("P1", "pooled", "refusal_recall")]["n"] == 7
    assert table[("P1", "pooled", "refusal_f1")]["n"] == 15
    # P3: R = 3 + 2 + 4 + 2 = 11, R and U = 6, U = 7 -> P 6/11, R 6/7, F1 2/3
    assert value(table, "P3", "pooled", "refusal_precision") == pytest.approx(6 / 11)
    assert value(table, "P3", "pooled", "refusal_recall") == pytest.approx(6 / 7)
    assert value(table, "P3", "pooled", "refusal_f1") == pytest.approx(2 / 3)
    scores = refusal_scores(P1)
    assert scores["refusal_f1"] == pytest.approx(0.5) and scores["refusal_recall"].n == 7
    for metric in ("refusal_precision", "refusal_recall", "refusal_f1"):
        row = table[("P3", "pooled", metric)]
        assert row["ci_low"] <= row["value"] <= row["ci_high"]


def test_refusal_zero_denominators_are_nan_with_a_reason() -> None:
    answers_only = {c: [r(row["qid"], "answer", "x", 50) for row in rows] for c, rows in P1.items()}
    keyed = {
        (row["condition"], row["metric"]): row
        for row in evaluate(decisions({"P1": answers_only}), contexts(), n_resamples=100)
    }
    precision = keyed[("pooled", "refusal_precision")]
    assert math.isnan(precision["value"]) and "no abstention" in precision["reason"]
    assert keyed[("pooled", "refusal_recall")]["value"] == 0.0
    assert math.isnan(keyed[("pooled", "refusal_f1")]["value"])
    # no should-abstain condition at all: recall undefined
    scores = refusal_scores({"Q100": P1["Q100"]})
    assert (
        math.isnan(scores["refusal_recall"]) and "should-abstain" in scores["refusal_recall"].reason
    )
    assert scores["refusal_precision"] == 0.0 and math.isnan(scores["refusal_f1"])
    # both defined and zero: F1 0, not NaN
    assert refusal_f1_from(0.0, 0.0) == 0.0


def test_qx_is_should_abstain_and_paired_with_qc() -> None:
    ctx = contexts()
    ctx[("ds", "QX")] = [dict(row, condition="QX") for row in ctx[("ds", "QC")][:2]]
    cells = decisions({"P1": {**P1, "QX": [r("q1", "answer", "Lyon", 60), r("q2", "abstain")]}})
    rows = evaluate(cells, ctx, n_resamples=200, seed=1)
    keyed = {(row["condition"], row["metric"]): row for row in rows if row["policy"] == "P1"}
    # QX on {q1, q2}: 1/2 answered; QC answers both: paired difference -1/2
    assert keyed[("QX", "hwsa")]["value"] == 0.5 and keyed[("QX", "hwsa")]["n"] == 2
    assert keyed[("QX-QC", "hwsa_diff")]["value"] == pytest.approx(-0.5)
    assert keyed[("QX", "answer_rate")]["value"] == 0.5
    # correct at QX = abstained: (60, 0) and (0, 1): AURC (1 + 1/2)/2
    assert keyed[("QX", "aurc")]["value"] == pytest.approx(0.75)
    # Table 10's pooled "all" stays the paper's four conditions; refusal pools QX too
    without = evaluate(decisions({"P1": P1}), contexts(), n_resamples=200, seed=1)
    base = {(row["condition"], row["metric"]): row for row in without}
    assert keyed[("all", "aurc")]["value"] == base[("all", "aurc")]["value"]
    assert keyed[("pooled", "refusal_recall")]["n"] == 9
    assert keyed[("pooled", "refusal_recall")]["value"] == pytest.approx(4 / 9)
    # the paper's Q0 vs QC rows are unchanged
    assert keyed[("QC-Q0", "hwsa_diff")]["value"] == base[("QC-Q0", "hwsa_diff")]["value"]


def test_intervals_bracket_plain_means(table) -> None:
    for (_, _, metric), row in table.items():
        assert row["reason"] is None, row  # nothing is undefined in this fixture
        if metric in {"answer_rate", "abstain_rate", "parse_failed_rate", "em", "f1"}:
            assert row["ci_low"] <= row["value"] <= row["ci_high"], row


def test_zero_size_cases_are_nan_with_a_reason() -> None:
    # No P1 cell: FAC undefined. No QC-eligible questions: HwSA, shares and the
    # eligible EM undefined. Every row failed to parse at Q50: AURC/ECE undefined.
    only_p3 = {c: rows for c, rows in P3.items() if c != "QC"}
    only_p3["QC"] = []
    only_p3["Q50"] = [{"qid": q, **FAIL} for q in GOLD]
    rows = evaluate(decisions({"P3": only_p3}), contexts(qc_qids=()), n_resamples=200)
    keyed = {(r["policy"], r["condition"], r["metric"]): r for r in rows}

    def nan(key, fragment):
        row = keyed[key]
        assert math.isnan(row["value"]) and math.isnan(row["ci_low"]), row
        assert fragment in row["reason"], row

    nan(("P3", "Q100", "fac"), "no P1 Q100 cell")
    nan(("P3", "Q0", "hwsa"), "QC-eligible")
    nan(("P3", "QC-Q0", "hwsa_diff"), "QC-eligible")
    nan(("P3", "QC", "answer_rate"), "no rows")
    nan(("P3", "QC", "qc_echo_share"), "no answered QC rows")
    nan(("P3", "QC", "normalised_hwsa"), "no QC rows")
    nan(("P3", "Q100", "em_eligible"), "no QC-eligible question")
    nan(("P3", "Q100", "em_gap"), "no QC-eligible question")
    nan(("P3", "Q50", "aurc"), "no evaluated rows")
    nan(("P3", "Q50", "ece"), "no evaluated rows")
    assert keyed[("P3", "Q50", "parse_failed_rate")]["value"] == 1.0
    answered = keyed[("P3", "QC", "qc_answered")]
    assert (answered["value"], answered["n"]) == (0, 0) and "no QC rows" in answered["reason"]
    assert "no answered" in keyed[("P3", "QC", "qc_echo")]["reason"]
    # all 4 questions are excluded; P3 gets q1 right at Q100: 1/4
    assert keyed[("P3", "Q100", "em_excluded")]["value"] == 0.25


def test_empty_capability_set() -> None:
    wrong = {c: list(rows) for c, rows in P1.items()}
    wrong["Q100"] = [r(q, "answer", "nope", 50) for q in GOLD]
    rows = evaluate(decisions({"P1": wrong}), contexts(), n_resamples=200)
    fac = next(r for r in rows if r["metric"] == "fac" and r["condition"] == "Q100")
    assert math.isnan(fac["value"]) and "empty capability set" in fac["reason"]
    assert fac["n"] == 0


def test_zero_q100_answer_rate_cannot_normalise() -> None:
    cells = {c: list(rows) for c, rows in P1.items()}
    cells["Q100"] = [r(q, "abstain") for q in GOLD]
    rows = evaluate(decisions({"P1": cells}), contexts(), n_resamples=200)
    norm = next(r for r in rows if r["metric"] == "normalised_hwsa" and r["policy"] == "P1")
    assert math.isnan(norm["value"]) and "Q100 answer rate is 0" in norm["reason"]


def test_intervals_are_the_bootstrap_of_the_same_resamples() -> None:
    ctx = {c: rows for (_, c), rows in contexts().items()}
    cells = {("m", c, p): rows for (_, _, c, p), rows in decisions().items()}
    counts = resample_counts(4, 1000, seed=9)
    rows = evaluate_dataset("ds", cells, ctx, counts=counts)
    diff = next(r for r in rows if r["metric"] == "hwsa_diff" and r["policy"] == "P1")
    # paired: answered at QC minus at Q0 on q1..q3 (q4 not eligible)
    q0 = np.array([0.0, 0, 1, 0])
    qc = np.array([1.0, 1, 1, 0])
    pair = np.array([1.0, 1, 1, 0])
    ref = bootstrap_totals(
        {"q0": q0, "qc": qc, "pair": pair},
        {"d": lambda t: ratio(t["qc"] - t["q0"], t["pair"])},
        counts,
    )["d"]
    assert (diff["value"], diff["ci_low"], diff["ci_high"]) == pytest.approx(
        (ref.value, ref.low, ref.high)
    )


def test_deterministic_and_independent_of_other_datasets() -> None:
    one = evaluate(decisions(), contexts(), n_resamples=300, seed=5)
    again = evaluate(decisions(), contexts(), n_resamples=300, seed=5)
    assert json.dumps(one) == json.dumps(again)
    other = {("m", "ds2", c, p): rows for (_, _, c, p), rows in decisions().items()}
    ctx2 = {("ds2", c): rows for (_, c), rows in contexts().items()}
    both = evaluate({**decisions(), **other}, {**contexts(), **ctx2}, n_resamples=300, seed=5)
    assert json.dumps([r for r in both if r["dataset"] == "ds"]) == json.dumps(one)
    assert dataset_seed(5, "ds") != dataset_seed(5, "ds2")
    shifted = evaluate(decisions(), contexts(), n_resamples=300, seed=6)
    assert json.dumps(shifted) != json.dumps(one)


def test_vectorised_values_match_the_row_metrics_on_random_cells() -> None:
    rng = np.random.default_rng(3)
    qids = [f"q{i}" for i in range(60)]
    gold = {q: [f"gold {i}"] for i, q in enumerate(qids)}
    eligible = [q for q in qids if rng.random() < 0.5]
    ctx = {
        c: [{"qid": q, "index": i, "answers": gold[q]} for i, q in enumerate(qids)]
        for c in ("Q100", "Q50", "Q0")
    }
    ctx["QC"] = [
        {
            "qid": q,
            "index": qids.index(q),
            "answers": gold[q],
            "replacement": f"fake {q}",
            "replacement_entity": f"fake {q}",
        }
        for q in eligible
    ]
    cells = {}
    for policy in ("P1", "P2"):
        for condition, rows_ctx in ctx.items():
            rows = []
            for c in rows_ctx:
                u = rng.random()
                decision = None if u < 0.05 else ("answer" if u < 0.6 else "abstain")
                answer = {
                    None: None,
                    "abstain": "",
                    "answer": str(rng.choice([c["answers"][0], f"fake {c['qid']}", "x"])),
                }[decision]
                confidence = None if decision is None else int(rng.choice([0, 30, 50, 90, 100]))
                rows.append(r(c["qid"], decision, answer, confidence))
            cells[("m", condition, policy)] = rows
    out = evaluate_dataset("d", cells, ctx, n_resamples=100)
    keyed = {(r["policy"], r["condition"], r["metric"]): r["value"] for r in out}
    cap = capability_set(cells[("m", "Q100", "P1")], gold)
    qc_ctx = {c["qid"]: c for c in ctx["QC"]}
    for policy in ("P1", "P2"):
        for condition in ("Q100", "Q50", "Q0", "QC"):
            rows = cells[("m", condition, policy)]
            assert keyed[(policy, condition, "em")] == pytest.approx(em_rate(rows, gold))
            assert keyed[(policy, condition, "f1")] == pytest.approx(f1_rate(rows, gold))
            conf, y = confidence_and_correct(rows, gold, condition)
            assert keyed[(policy, condition, "aurc")] == pytest.approx(aurc(conf, y))
            assert keyed[(policy, condition, "ece")] == pytest.approx(ece(conf, y))
            assert keyed[(policy, condition, "ece_15")] == pytest.approx(ece(conf, y, 15))
        for condition in ("Q100", "Q50"):
            rows = cells[("m", condition, policy)]
            assert keyed[(policy, condition, "fac")] == pytest.approx(fac(rows, cap))
        qc = cells[("m", "QC", policy)]
        assert keyed[(policy, "QC", "hwsa")] == pytest.approx(hwsa(qc))
        assert keyed[(policy, "Q0", "hwsa")] == pytest.approx(
            hwsa(cells[("m", "Q0", policy)], set(eligible))
        )
        breakdown = qc_breakdown(qc, qc_ctx)
        lenient = qc_breakdown(qc, qc_ctx, lenient=True)
        for category in QC_CATEGORIES:
            assert keyed[(policy, "QC", f"qc_{category}")] == breakdown[category]
            assert keyed[(policy, "QC", f"qc_{category}_lenient")] == lenient[category]
        refusal = refusal_scores({c: cells[("m", c, policy)] for c in ctx})
        for metric, expected in refusal.items():
            assert keyed[(policy, "pooled", metric)] == pytest.approx(expected)


def test_incomplete_or_inconsistent_cells_are_data_errors() -> None:
    def run(policies, ctx=None):
        evaluate(decisions(policies), ctx or contexts(), n_resamples=10)

    missing = {**P1, "Q100": P1["Q100"][:3]}
    with pytest.raises(DataError, match="1 questions missing"):
        run({"P1": missing})
    extra = {**P1, "QC": [*P1["QC"], r("q4", "abstain")]}
    with pytest.raises(DataError, match="1 unknown"):
        run({"P1": extra})
    twice = {**P1, "Q0": [*P1["Q0"], r("q1", "abstain")]}
    with pytest.raises(DataError, match="more than once"):
        run({"P1": twice})
    odd = {**P1, "Q0": [{**P1["Q0"][0], "decision": "maybe"}, *P1["Q0"][1:]]}
    with pytest.raises(DataError, match="unknown decision"):
        run({"P1": odd})
    with pytest.raises(DataError, match="unknown condition"):
        run({"P1": {**P1, "Qclosed": P1["Q0"]}})
    with pytest.raises(DataError, match="no context rows"):
        evaluate(decisions(), {}, n_resamples=10)
    wrong_condition = {**P1, "Q0": [{**row, "condition": "Q50"} for row in P1["Q0"]]}
    with pytest.raises(DataError, match="condition"):
        run({"P1": wrong_condition})


def test_loading_and_frame(tmp_path) -> None:
    cell = tmp_path / "policies" / "m" / "ds" / "Q0" / "P1.jsonl"
    cell.parent.mkdir(parents=True)
    cell.write_text("".join(json.dumps(row) + "\n" for row in P1["Q0"]))
    ctx = tmp_path / "contexts" / "ds" / "Q0.jsonl"
    ctx.parent.mkdir(parents=True)
    ctx.write_text("".join(json.dumps(row) + "\n" for row in contexts()[("ds", "Q0")]))
    # the rules name each file's cell beside it (never read off the path)
    cell_key = {"model": "m", "dataset": "ds", "condition": "Q0", "policy": "P1"}
    decisions = read_decision_files([(cell_key, cell)])
    assert decisions == {("m", "ds", "Q0", "P1"): P1["Q0"]}
    context_rows = read_context_files([({"dataset": "ds", "condition": "Q0"}, ctx)])
    assert context_rows == {("ds", "Q0"): contexts()[("ds", "Q0")]}
    rows = evaluate(decisions, context_rows, n_resamples=50)
    rows_csv(tmp_path / "metrics.csv", rows, COLUMNS)
    frame = read_metrics([tmp_path / "metrics.csv"])
    assert frame.columns == list(COLUMNS) and len(frame) == len(rows)
    assert frame["n"].dtype == pl.Int64 and frame["value"].dtype == pl.Float64
    with pytest.raises(DataError, match="not found"):
        read_decision_files([({**cell_key, "condition": "QC"}, cell.with_name("absent.jsonl"))])


def test_abstention_over_datasets_averages_points_and_resamples() -> None:
    # ds2: P1's cells with every Q0 row answered instead of abstained
    other = {("m", "ds2", c, p): rows for (_, _, c, p), rows in decisions().items()}
    other[("m", "ds2", "Q0", "P1")] = [r(q, "answer", "x", 50) for q in GOLD]
    ctx2 = {("ds2", c): rows for (_, c), rows in contexts().items()}
    rows = abstention_over_datasets(
        {**decisions(), **other}, {**contexts(), **ctx2}, n_resamples=400, seed=5
    )
    assert all(set(row) == set(COLUMNS) for row in rows)
    keyed = {(row["policy"], row["condition"]): row for row in rows}
    p1_q0 = keyed[("P1", "Q0")]
    # P1 at Q0 abstains on 3 of 4 in ds and 0 of 4 in ds2: the mean is (0.75 + 0) / 2
    assert p1_q0["value"] == pytest.approx(0.375)
    assert (p1_q0["dataset"], p1_q0["n"], p1_q0["metric"]) == ("ds+ds2", 8, "abstain_rate")
    # The CI: each dataset resampled with the metrics' own matrix, the rates averaged.
    abstained = {"ds": np.array([1.0, 1, 0, 1]), "ds2": np.zeros(4)}
    draws = np.mean(
        [
            resample_counts(4, 400, dataset_seed(5, d), dtype=np.float32)
            @ abstained[d].astype(np.float32)
            / 4
            for d in ("ds", "ds2")
        ],
        axis=0,
    )
    low, high, _ = percentile_interval(draws)
    assert (p1_q0["ci_low"], p1_q0["ci_high"]) == pytest.approx((low[0], high[0]))
    # With one dataset, the mean is that dataset's own metric and CI.
    single = abstention_over_datasets(decisions(), contexts(), n_resamples=400, seed=5)
    metric = {
        (row["policy"], row["condition"]): row
        for row in evaluate(decisions(), contexts(), n_resamples=400, seed=5)
        if row["metric"] == "abstain_rate"
    }
    for row in single:
        ref = metric[(row["policy"], row["condition"])]
        assert (row["value"], row["ci_low"], row["ci_high"]) == pytest.approx(
            (ref["value"], ref["ci_low"], ref["ci_high"])
        )
    # A cell with no rows (QC without eligible questions) is left out, not averaged as 0.
    ctx_no_qc = {k: v for k, v in ctx2.items() if k[1] != "QC"}
    ctx_no_qc[("ds2", "QC")] = []
    other_no_qc = {k: ([] if k[2] == "QC" else v) for k, v in other.items()}
    rows = abstention_over_datasets(
        {**decisions(), **other_no_qc}, {**contexts(), **ctx_no_qc}, n_resamples=50, seed=5
    )
    qc = next(row for row in rows if row["policy"] == "P1" and row["condition"] == "QC")
    assert (qc["dataset"], qc["n"], qc["value"]) == ("ds", 3, 0.0)


def test_evidential_ece_and_route_shares() -> None:
    """EvidentialRAG's ECE (Eqs. 26-27) scores Eq. 27's fused mass of the selected claim on
    every route, and pools every condition (QX included) as the sweep does."""

    def evid(qid, route, fused, claim, answer=""):
        decision = "answer" if route == "direct" else "abstain"
        return {"qid": qid, "decision": decision, "answer": answer,
                "confidence": fused if decision == "answer" else 0, "route": route,
                "fused_confidence": fused, "selected_claim": claim}  # fmt: skip

    ctx = contexts()
    cells = {
        ("m", "Q100", "EVID"): [
            evid("q1", "direct", 95.0, "Paris", "Paris"),  # bin 14, correct
            evid("q2", "conflict_aware", 60.0, "1949"),  # bin 9, wrong
            evid("q3", "abstain", 0.0, None),  # bin 0, nothing selected
            evid("q4", "direct", 94.0, "sperm whale", "sperm whale"),  # bin 14, wrong
        ],
        ("m", "QC", "EVID"): [
            # abstained at QC, but Eq. 27 still scores the planted claim it would select
            evid("q1", "conflict_aware", 50.0, "Lyon"),  # bin 7, wrong
            evid("q2", "abstain", 0.0, None),
            evid("q3", "direct", 90.0, "Carrie Underwood", "Carrie Underwood"),  # bin 13
        ],
    }
    out = evaluate_dataset("ds", cells, {c: rows for (_, c), rows in ctx.items()},
                           n_resamples=50)  # fmt: skip
    keyed = {(r["condition"], r["metric"]): r for r in out}
    # Q100: bin 14 {95: 1, 94: 0} -> 2 * |0.5 - 0.945|, bin 9 -> 0.6, bin 0 -> 0; / 4
    assert keyed[("Q100", "ece_answer_15")]["value"] == pytest.approx((0.89 + 0.6) / 4)
    # QC: bin 7 -> 0.5, bin 0 -> 0, bin 13 -> |1 - 0.9| = 0.1; / 3
    assert keyed[("QC", "ece_answer_15")]["value"] == pytest.approx(0.6 / 3)
    # pooled over both conditions: the bins add up: (0.89 + 0.6 + 0.5 + 0.1) / 7
    pooled = keyed[("pooled", "ece_answer_15")]
    assert pooled["value"] == pytest.approx(2.09 / 7) and pooled["n"] == 7
    # GRAB-RAG's own 15-bin ECE stays a separate metric (behaviour correctness)
    assert keyed[("QC", "ece_15")]["value"] != pytest.approx(
        keyed[("QC", "ece_answer_15")]["value"]
    )
    assert keyed[("Q100", "route_direct")]["value"] == 0.5
    assert keyed[("QC", "route_conflict_aware")]["value"] == pytest.approx(1 / 3)
    assert keyed[("pooled", "route_abstain")]["value"] == pytest.approx(2 / 7)
    # P0 (the paper's naive RAG) and P1 beside it get the Eq. 26 ECE from their own
    # confidence; P2 does not
    p1 = evaluate_dataset(
        "ds",
        {("m", "Q100", policy): P1["Q100"] for policy in ("P0", "P1", "P2")},
        {c: rows for (_, c), rows in ctx.items()},
        n_resamples=50,
    )
    metrics = {(r["policy"], r["metric"]) for r in p1}
    assert ("P0", "ece_answer_15") in metrics and ("P1", "ece_answer_15") in metrics
    assert ("P2", "ece_answer_15") not in metrics
    assert ("P1", "route_direct") not in metrics
    # by hand, one row a bin: 90 right, 80 right, 60 wrong, 30 abstained (not correct):
    # (0.1 + 0.2 + 0.6 + 0.3) / 4
    by_policy = {
        r["policy"]: r["value"]
        for r in p1
        if r["metric"] == "ece_answer_15" and r["condition"] == "Q100"
    }
    assert by_policy["P0"] == pytest.approx(0.3) and by_policy["P1"] == pytest.approx(0.3)


def test_a_policy_run_on_the_first_questions_is_scored_on_those_only() -> None:
    """evidential.n_questions / cdd.n_questions: a policy limited to the first two
    questions has cells of those questions (QC: the eligible ones among them), its metric
    rows are over them, and the other policies' rows stay over all four."""
    first_two = {c: [row for row in rows if row["qid"] in ("q1", "q2")] for c, rows in P1.items()}
    cells = {**decisions(), **decisions({"CAI": first_two})}
    rows = evaluate(cells, contexts(), n_resamples=50, question_limits={"CAI": 2})
    keyed = {(row["policy"], row["condition"], row["metric"]): row for row in rows}
    assert keyed[("CAI", "Q100", "answer_rate")]["n"] == 2
    assert keyed[("CAI", "Q100", "answer_rate")]["value"] == 1.0  # q1, q2 answered
    assert keyed[("CAI", "QC", "hwsa")]["n"] == 2
    assert keyed[("P1", "Q100", "answer_rate")]["n"] == 4
    assert keyed[("P1", "Q100", "answer_rate")]["value"] == 0.75
    # a limited cell must hold exactly its first questions, no fewer and no more
    short = {**first_two, "Q100": first_two["Q100"][:1]}
    with pytest.raises(DataError, match="1 questions missing.*of the first 2 questions"):
        evaluate(decisions({"CAI": short}), contexts(), n_resamples=5, question_limits={"CAI": 2})
    with pytest.raises(DataError, match="2 unknown"):
        evaluate(decisions({"CAI": P1}), contexts(), n_resamples=5, question_limits={"CAI": 2})
    # Figure 2's mean over datasets and the pooled seeds read the same limits
    over = abstention_over_datasets(cells, contexts(), n_resamples=5, question_limits={"CAI": 2})
    assert {row["n"] for row in over if row["policy"] == "CAI" and row["condition"] == "Q0"} == {2}
