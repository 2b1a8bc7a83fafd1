"""EvidentialRAG: mass functions and fusion (Eqs. 2-14), the evaluator's output contract,
claim alignment, routing (Eq. 15) and decisions from stored evaluations. No models."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from grabrag.evidential.claims import (
    align_claims,
    closed_book_evaluation,
    evidence_vectors,
    normalize_number_or_date,
    passage_claim_count,
    question_masses,
)
from grabrag.evidential.evaluator import (
    EVAL_FAILED,
    EVAL_OK,
    EVAL_REPAIRED,
    EVALUATOR_GRAMMAR,
    EVALUATOR_SYSTEM,
    FALLBACK_EVIDENCE,
    STANCES,
    Evaluation,
    evaluator_messages,
    fold_groups,
    fold_order,
    parse_evaluation,
)
from grabrag.evidential.fusion import (
    LAMBDA,
    average_evidence,
    combine,
    conflict,
    dempster,
    from_evidence,
    fuse,
    mean_pairwise_conflict,
)
from grabrag.evidential.routing import (
    TAU1,
    TAU2,
    decide,
    evid_confidence,
    guarded_route,
    route,
    route_messages,
    sweep,
    sweep_grid,
)
from grabrag.generation.generator import parse_output
from grabrag.generation.prompts import GBNF_GRAMMAR, RESPONSE_FORMAT

SUM_TOL = 1e-9
LAMS = (0.0, 0.3, 0.6, 1.0)

# Two-source example used below (M = 2 claims):
#   m_a = (b=[0.6, 0.2], u=0.2), m_b = (b=[0.1, 0.7], u=0.2)
#   K   = 0.6*0.7 + 0.2*0.1                 = 0.42 + 0.02        = 0.44   (Eq. 7)
#   n_1 = 0.6*0.1 + 0.6*0.2 + 0.2*0.1       = 0.06 + 0.12 + 0.02 = 0.20   (Eq. 8)
#   n_2 = 0.2*0.7 + 0.2*0.2 + 0.2*0.7       = 0.14 + 0.04 + 0.14 = 0.32
#   h   = 0.2*0.2                           = 0.04                        (Eq. 9)
#   check: 0.20 + 0.32 + 0.04 + 0.44 = 1
M_A = (np.array([0.6, 0.2]), 0.2)
M_B = (np.array([0.1, 0.7]), 0.2)


def total(mass: tuple[np.ndarray, float]) -> float:
    return float(np.sum(mass[0])) + mass[1]


def random_evidence(rng: np.random.Generator, m: int) -> np.ndarray:
    """Evidence 0..10 with many zeros (irrelevant passages, one-claim passages)."""
    e = rng.integers(0, 11, size=m).astype(float)
    e[rng.random(m) < 0.5] = 0.0
    return e


def random_mass(rng: np.random.Generator, m: int) -> tuple[np.ndarray, float]:
    """A random mass function, sometimes with zero frame mass or zero singletons."""
    weights = rng.dirichlet(np.ones(m + 1))
    weights[rng.random(m + 1) < 0.3] = 0.0
    if weights.sum() == 0:
        weights[-1] = 1.0
    weights /= weights.sum()
    return weights[:m], float(weights[m])


# --- Eqs. 2-6 ----------------------------------------------------------------------------


def test_from_evidence_matches_eqs_2_to_6() -> None:
    b, u = from_evidence([8, 0, 2])
    # alpha = [9, 1, 3], S = 13, b = e / 13, u = 3 / 13.
    np.testing.assert_allclose(b, [8 / 13, 0.0, 2 / 13])
    assert u == pytest.approx(3 / 13)


def test_irrelevant_chunks_have_no_singleton_mass() -> None:
    b, u = from_evidence([0, 0, 0])
    assert u == 1.0 and not b.any()
    # and fusing irrelevant chunks leaves the question at total ignorance
    for lam in (None, *LAMS):
        assert fuse([from_evidence([0, 0])] * 3, lam)[1] == pytest.approx(1.0)


def test_from_evidence_without_claims_is_vacuous() -> None:
    b, u = from_evidence([])
    assert b.shape == (0,) and u == 1.0


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_from_evidence_rejects_bad_evidence(bad: float) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(bad))):
        from_evidence([1.0, bad])


def test_masses_sum_to_one_after_every_operation() -> None:
    rng = np.random.default_rng(42)
    for _ in range(300):
        m = int(rng.integers(1, 7))
        k = int(rng.integers(1, 7))
        masses = [from_evidence(random_evidence(rng, m)) for _ in range(k)]
        masses += [random_mass(rng, m) for _ in range(2)]
        for mass in masses:
            assert total(mass) == pytest.approx(1.0, abs=SUM_TOL)
        a, b = masses[0], masses[-1]
        results = [dempster(a, b), average_evidence([random_evidence(rng, m)]), fuse(masses, None)]
        results += [combine(a, b, lam) for lam in LAMS]
        results += [fuse(masses, lam) for lam in LAMS]
        for b_out, u_out in results:
            assert abs(float(b_out.sum()) + u_out - 1.0) <= SUM_TOL
            assert b_out.min() >= 0.0 and 0.0 <= u_out <= 1.0
        assert 0.0 <= conflict(a, b) <= 1.0
        assert 0.0 <= mean_pairwise_conflict(masses) <= 1.0


# --- Eqs. 7-11 ---------------------------------------------------------------------------


def test_conflict_eq_7() -> None:
    assert conflict(M_A, M_B) == pytest.approx(0.44)
    assert conflict(M_A, from_evidence([0, 0])) == 0.0


def test_combine_hand_example() -> None:
    # lam = 0.6: frame = 0.04 + 0.6*0.44 = 0.304; singletons 0.696 * [0.20, 0.32] / 0.52
    b, u = combine(M_A, M_B, 0.6)
    assert u == pytest.approx(0.304)
    np.testing.assert_allclose(b, [0.696 * 0.20 / 0.52, 0.696 * 0.32 / 0.52])
    # lam = 0: frame = h = 0.04; singletons 0.96 * [0.20, 0.32] / 0.52
    b, u = combine(M_A, M_B, 0.0)
    assert u == pytest.approx(0.04)
    np.testing.assert_allclose(b, [0.96 * 0.20 / 0.52, 0.96 * 0.32 / 0.52])


def test_lambda_one_is_yager_full_transfer() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        m = int(rng.integers(1, 6))
        (b_a, u_a), (b_b, u_b) = random_mass(rng, m), random_mass(rng, m)
        n = b_a * b_b + b_a * u_b + u_a * b_b  # Eq. 8, by hand
        h = u_a * u_b
        k = sum(b_a[r] * b_b[s] for r in range(m) for s in range(m) if r != s)
        b, u = combine((b_a, u_a), (b_b, u_b), 1.0)
        if n.sum() > 0:
            # frame = h + K, singletons keep their unnormalised conjunctive support
            assert u == pytest.approx(h + k, abs=1e-12)
            np.testing.assert_allclose(b, n, atol=1e-12)
        else:
            assert u == 1.0


def test_combine_total_conflict_puts_remainder_on_frame() -> None:
    a, b = (np.array([1.0, 0.0]), 0.0), (np.array([0.0, 1.0]), 0.0)
    for lam in LAMS:
        b_out, u_out = combine(a, b, lam)
        assert u_out == 1.0 and not b_out.any()


@pytest.mark.parametrize("lam", [-0.1, 1.5, float("nan")])
def test_combine_rejects_lambda_outside_unit_interval(lam: float) -> None:
    with pytest.raises(ValueError, match="lam"):
        combine(M_A, M_B, lam)


def test_combine_rejects_mismatched_frames_and_invalid_masses() -> None:
    with pytest.raises(ValueError, match="different frames"):
        combine(M_A, (np.array([0.5]), 0.5), 0.6)
    with pytest.raises(ValueError, match="sum"):
        combine(M_A, (np.array([0.5, 0.5]), 0.5), 0.6)


def test_vacuous_source_is_neutral() -> None:
    for lam in LAMS:
        b, u = combine(M_A, from_evidence([0, 0]), lam)
        np.testing.assert_allclose(b, M_A[0])
        assert u == pytest.approx(M_A[1])


# --- Dempster ----------------------------------------------------------------------------


def test_dempster_two_claim_hand_example() -> None:
    # Divide n and h by 1 - K = 0.56: b = [0.20, 0.32] / 0.56, u = 0.04 / 0.56.
    b, u = dempster(M_A, M_B)
    np.testing.assert_allclose(b, [0.20 / 0.56, 0.32 / 0.56])
    assert u == pytest.approx(0.04 / 0.56)


def test_dempster_three_claim_hand_example() -> None:
    # m_a = (b=[0.5, 0, 0.3], u=0.2), m_b = (b=[0.5, 0.3, 0], u=0.2)
    # K   = a1*b2 + a3*b1 + a3*b2 = 0.15 + 0.15 + 0.09 = 0.39
    # n_1 = 0.5*0.5 + 0.5*0.2 + 0.2*0.5 = 0.45
    # n_2 = 0 + 0 + 0.2*0.3 = 0.06;  n_3 = 0 + 0.3*0.2 + 0 = 0.06;  h = 0.04
    # check: 0.45 + 0.06 + 0.06 + 0.04 + 0.39 = 1; Dempster divides by 0.61
    a = (np.array([0.5, 0.0, 0.3]), 0.2)
    b = (np.array([0.5, 0.3, 0.0]), 0.2)
    assert conflict(a, b) == pytest.approx(0.39)
    b_out, u_out = dempster(a, b)
    np.testing.assert_allclose(b_out, [0.45 / 0.61, 0.06 / 0.61, 0.06 / 0.61])
    assert u_out == pytest.approx(0.04 / 0.61)


def test_dempster_total_conflict_is_vacuous() -> None:
    b, u = dempster((np.array([1.0, 0.0]), 0.0), (np.array([0.0, 1.0]), 0.0))
    assert u == 1.0 and not b.any()


def test_dempster_is_more_confident_than_transfer_under_conflict() -> None:
    # The paper's point: normalisation turns conflict into singleton support, while the
    # transfer rule keeps lam * K of it as ignorance (0.304 vs 0.04 / 0.56 = 0.071).
    b_d, u_d = dempster(M_A, M_B)
    b_t, u_t = combine(M_A, M_B, LAMBDA)
    assert u_d < u_t and b_d.max() > b_t.max()


# --- Eqs. 12-14, averaging -----------------------------------------------------------------


def test_fuse_folds_left_to_right() -> None:
    m_c = from_evidence([0, 5])
    expected = combine(combine(M_A, M_B, 0.6), m_c, 0.6)
    b, u = fuse([M_A, M_B, m_c], 0.6)
    np.testing.assert_allclose(b, expected[0])
    assert u == pytest.approx(expected[1])
    b, u = fuse([M_A, M_B, m_c], None)
    expected = dempster(dempster(M_A, M_B), m_c)
    np.testing.assert_allclose(b, expected[0])
    assert u == pytest.approx(expected[1])


def test_fuse_combines_a_fold_group_before_folding_it_in() -> None:
    # y = Paris (9), x = Lyon (9), as in test_fold_order_is_independent_of_the_context_order:
    # in turn, [y, y, x] gives U = 639.8/1331 and [y, x, y] 289.88/1331; with the last two
    # as one group, y (+) (y (+) x) = y (+) (x (+) y) = 289.88/1331 either way (the pairwise
    # rule is commutative, so this is [x, y, y])
    y, x = from_evidence([9, 0]), from_evidence([0, 9])
    assert fuse([y, y, x], LAMBDA)[1] == pytest.approx(639.8 / 1331)
    assert fuse([y, y, x], LAMBDA, [1, 2])[1] == pytest.approx(289.88 / 1331)
    assert fuse([y, x, y], LAMBDA, [1, 2])[1] == pytest.approx(289.88 / 1331)
    np.testing.assert_allclose(
        fuse([y, y, x], LAMBDA, [1, 2])[0], fuse([y, x, y], LAMBDA, [1, 2])[0]
    )
    # groups of one are the plain fold; sources after the groups fold one by one
    np.testing.assert_allclose(fuse([y, y, x], LAMBDA, [1, 1, 1])[0], fuse([y, y, x], LAMBDA)[0])
    assert fuse([y, y, x], LAMBDA, [1])[1] == pytest.approx(639.8 / 1331)
    with pytest.raises(ValueError, match="partition"):
        fuse([y, x], LAMBDA, [3])


def test_fold_groups_tie_only_a_passage_and_its_edit() -> None:
    question = "Where is it?"  # overlap 2 with every passage below
    passages = [
        {"pid": "g", "title": "", "text": "Paris it is."},  # QX's gold ...
        {"pid": "a", "title": "", "text": "Lyon is it."},
        {"pid": "g", "title": "", "text": "Lyon it is."},  # ... and its swapped twin
        {"pid": "b", "title": "", "text": "Rome is it."},
        {"pid": "b", "title": "", "text": "Rome is it."},  # a reused copy
    ]
    # by pid: a, then b's copies one by one, then the g pair (one group, text order inside)
    assert fold_groups(question, passages) == [[1], [3], [4], [2, 0]]
    assert fold_order(question, passages) == [1, 3, 4, 2, 0]


def test_fuse_edge_cases() -> None:
    b, u = fuse([], 0.6)
    assert b.shape == (0,) and u == 1.0
    b, u = fuse([M_A], 0.6)
    np.testing.assert_allclose(b, M_A[0])
    assert u == M_A[1]


def test_agreeing_sources_lower_uncertainty() -> None:
    one = from_evidence([8])
    assert fuse([one, one, one], LAMBDA)[1] < one[1]


def test_mean_pairwise_conflict_eq_14() -> None:
    # K(m_a, m_b) = 0.44, K with a vacuous source = 0: mean over 3 pairs = 0.44 / 3.
    vac = from_evidence([0, 0])
    assert mean_pairwise_conflict([M_A, M_B, vac]) == pytest.approx(0.44 / 3)
    assert mean_pairwise_conflict([M_A]) == 0.0
    assert mean_pairwise_conflict([]) == 0.0


def test_average_evidence_is_eqs_2_6_of_the_mean_evidence() -> None:
    # mean of (8, 0) and (2, 6) = (5, 3); S = 8 + 2 = 10: b = (0.5, 0.3), u = 0.2
    b, u = average_evidence([[8.0, 0.0], [2.0, 6.0]])
    np.testing.assert_allclose(b, [0.5, 0.3])
    assert u == pytest.approx(0.2)
    # averaging does not see conflict: (10, 0) and (0, 10) average to (5, 5), S = 12
    b, u = average_evidence([[10.0, 0.0], [0.0, 10.0]])
    np.testing.assert_allclose(b, [5 / 12, 5 / 12])
    assert u == pytest.approx(2 / 12)
    assert average_evidence([])[1] == 1.0
    with pytest.raises(ValueError):
        average_evidence([[1.0], [1.0, 2.0]])


# --- evaluator -------------------------------------------------------------------------------

VALID = (
    '{"claim": "Denver won Super Bowl 50.", "value": "Denver Broncos", '
    '"stance": "supports", "rationale": "stated directly", "evidence": 9}'
)


def evaluation_json(**fields: object) -> str:
    base: dict[str, object] = json.loads(VALID)
    base.update(fields)
    return json.dumps(base)


def test_parse_valid_evaluation() -> None:
    ev = parse_evaluation(VALID, "stop")
    assert ev == Evaluation(
        "Denver won Super Bowl 50.",
        "Denver Broncos",
        "supports",
        "stated directly",
        9.0,
        EVAL_OK,
    )


@pytest.mark.parametrize(
    "raw",
    [
        "not json",
        "",
        "[1, 2]",
        evaluation_json(stance="maybe"),
        evaluation_json(stance="Supports"),
        evaluation_json(evidence=11),
        evaluation_json(evidence=-1),
        evaluation_json(evidence=5.5),
        evaluation_json(evidence="5"),
        evaluation_json(evidence=True),
        evaluation_json(value=None),
        json.dumps({k: v for k, v in json.loads(VALID).items() if k != "rationale"}),
        json.dumps({k: v for k, v in json.loads(VALID).items() if k != "evidence"}),
    ],
)
def test_parse_failure_means_no_evidence(raw: str) -> None:
    ev = parse_evaluation(raw, "stop")
    assert ev.status == EVAL_FAILED
    assert ev.evidence == FALLBACK_EVIDENCE == 0.0
    assert ev.claim == "" and ev.value == ""


def test_cut_off_output_is_repaired_only_by_closing() -> None:
    assert parse_evaluation(VALID[:-1], "length").status == EVAL_REPAIRED
    assert parse_evaluation(VALID[:-1], "length").evidence == 9.0
    assert parse_evaluation(VALID[:-1], "stop").status == EVAL_FAILED
    # cut inside the rationale: evidence was never written, nothing is invented
    cut = VALID[: VALID.index("directly")]
    assert parse_evaluation(cut, "length").status == EVAL_FAILED
    # cut after "1" of a possible "10": read conservatively as 1
    ten = evaluation_json(evidence=10)
    assert parse_evaluation(ten[:-2], "length").evidence == 1.0


def test_irrelevant_stance_or_empty_value_forces_zero_evidence() -> None:
    ev = parse_evaluation(evaluation_json(stance="irrelevant", evidence=7), "stop")
    assert ev.status == EVAL_OK and ev.evidence == 0.0
    ev = parse_evaluation(evaluation_json(value="", evidence=7), "stop")
    assert ev.evidence == 0.0
    ev = parse_evaluation(evaluation_json(value="the", evidence=7), "stop")
    assert ev.evidence == 0.0


def test_evaluator_messages_follow_the_contract() -> None:
    messages = evaluator_messages("Who won?", "Denver won.", ["Denver Broncos", "", "Carolina"])
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"] == EVALUATOR_SYSTEM
    user = messages[1]["content"]
    assert "Question: Who won?" in user and "Passage:\nDenver won." in user
    assert "- Denver Broncos\n- Carolina" in user
    for field in ('"claim"', '"value"', '"stance"', '"rationale"', '"evidence"'):
        assert field in user
    for stance in STANCES:
        assert f'"{stance}"' in user
    assert user.endswith("Passage:\nDenver won.")
    empty = evaluator_messages("Who won?", "Denver won.", [])[1]["content"]
    assert "none yet" in empty
    # the blocks shared by every passage of a question come first (KV-cache reuse)
    other = evaluator_messages("Who won?", "Other text.", ["Carolina"])[1]["content"]
    shared = user[: user.index("Candidate answers already")]
    assert other.startswith(shared)


# --- the grammar, checked by compiling this (non-recursive) GBNF to a regex ------------------

_GBNF_TOKEN = re.compile(
    r'\s*(?:(?P<lit>"(?:[^"\\]|\\.)*")|(?P<cls>\[(?:[^\]\\]|\\.)*\])'
    r"|(?P<name>[a-z][a-z0-9-]*)|(?P<op>[|()*+?]))"
)


def gbnf_to_regex(grammar: str) -> str:
    rules: dict[str, str] = {}
    for line in grammar.strip().splitlines():
        name, body = line.split(" ::= ", 1)
        assert name not in rules, f"rule {name} defined twice"
        rules[name] = body

    def expand(name: str, depth: int = 0) -> str:
        assert depth < 10, "recursive grammar"
        body, out, pos = rules[name], [], 0
        while pos < len(body.rstrip()):
            match = _GBNF_TOKEN.match(body, pos)
            assert match, f"cannot read rule {name} at {body[pos:]!r}"
            pos = match.end()
            if match["lit"]:
                out.append(re.escape(json.loads(match["lit"])))
            elif match["cls"]:
                out.append(match["cls"])  # same escapes in GBNF and Python classes
            elif match["name"]:
                assert match["name"] in rules, f"undefined rule {match['name']}"
                out.append(f"(?:{expand(match['name'], depth + 1)})")
            else:
                out.append(match["op"])
        return "".join(out)

    return expand("root")


RESPONSE_SAMPLE = '{"decision": "abstain", "answer": "", "confidence": 0, "reasoning": "no"}'


def test_grammar_rule_per_line() -> None:
    names = [line.split(" ::= ")[0] for line in EVALUATOR_GRAMMAR.strip().splitlines()]
    assert names == ["root", "ws", "str", "stance", "evidence"]
    # the helper reads the GRAB-RAG grammar too (a check of the helper itself)
    assert re.fullmatch(gbnf_to_regex(GBNF_GRAMMAR), json.dumps(json.loads(RESPONSE_SAMPLE)))


def test_grammar_accepts_exactly_the_schema() -> None:
    pattern = re.compile(gbnf_to_regex(EVALUATOR_GRAMMAR))
    for evidence in range(11):
        for stance in STANCES:
            raw = evaluation_json(stance=stance, evidence=evidence)
            assert pattern.fullmatch(raw), raw
            assert parse_evaluation(raw, "stop").status == EVAL_OK
    compact = VALID.replace(": ", ":").replace(", ", ",")
    assert pattern.fullmatch(compact)
    rejected = [
        evaluation_json(evidence=11),
        evaluation_json(evidence=5.5),
        evaluation_json(stance="maybe"),
        evaluation_json(rationale="line\nbreak").replace("\\n", "\n"),  # raw newline
        evaluation_json(rationale='a "quote"'),  # needs a backslash escape
        json.dumps(
            {"value": "x", "claim": "y", "stance": "supports", "rationale": "", "evidence": 1}
        ),
        VALID.replace(": ", ":  "),  # at most one space
    ]
    for raw in rejected:
        assert not pattern.fullmatch(raw), raw


# --- alignment -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("1,000", "1000"),
        ("3.0", "3"),
        ("five", "5"),
        ("March 5, 1990", "5 March 1990"),
        ("5 March 1990", "1990-03-05"),
        ("5th of March, 1990", "Mar. 5, 1990"),
        ("50%", "50 percent"),
    ],
)
def test_same_number_or_date(a: str, b: str) -> None:
    assert normalize_number_or_date(a) is not None
    assert normalize_number_or_date(a) == normalize_number_or_date(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [("1990", "1991"), ("March 1990", "1990"), ("50%", "50"), ("March 5, 1990", "March 6, 1990")],
)
def test_different_number_or_date(a: str, b: str) -> None:
    assert normalize_number_or_date(a) != normalize_number_or_date(b)


def test_non_numbers_and_ambiguous_dates_have_no_key() -> None:
    for value in ("Denver Broncos", "03/05/1990", "February 30, 1990", ""):
        assert normalize_number_or_date(value) is None


def test_alignment_is_conservative() -> None:
    frame, index = align_claims(
        [
            "March 5, 1990",
            "1990",
            "5 March 1990",
            "1991",
            "NYC",
            "New York City",
            "",
            "the Denver Broncos",
            "Denver Broncos",
            "1.5",
            "15",
        ]
    )
    assert frame == ["March 5, 1990", "1990", "1991", "NYC", "New York City",
                     "the Denver Broncos", "1.5", "15"]  # fmt: skip
    assert index == [0, 1, 0, 2, 3, 4, None, 5, 5, 6, 7]


def test_alignment_never_fuzzy_merges_a_value_the_evaluator_called_competing() -> None:
    # token F1 5/6 = 0.83 >= 0.8: merged, unless the evaluator marked the second value as
    # competing with the first (section 3.3: incompatible when the stance is competing)
    pair = ["King Juan Carlos I of Spain", "King Juan Carlos II of Spain"]
    assert align_claims(pair)[1] == [0, 0]
    assert align_claims(pair, competing=[False, True]) == (pair, [0, 1])
    # the exact stages still merge a competing value (same normalised text or date)
    assert align_claims(["Juan Carlos I", "juan carlos i"], competing=[False, True])[1] == [0, 0]
    assert align_claims(["5 March 1990", "March 5, 1990"], competing=[False, True])[1] == [0, 0]
    # nor does containment merge it ("Obama" inside "Barack Obama")
    assert align_claims(["Barack Obama", "Obama"], competing=[False, True])[1] == [0, 1]
    with pytest.raises(ValueError, match="competing flags"):
        align_claims(pair, competing=[True])
    # through the evaluations: the stance is read from each source
    rival = Evaluation("c", pair[1], "competing", "r", 8.0, EVAL_OK)
    same = Evaluation("c", pair[0], "supports", "r", 8.0, EVAL_OK)
    frame, masses = question_masses([same, rival])
    assert frame == pair and len(masses) == 2


def test_alignment_f1_merge_never_crosses_numbers() -> None:
    # token F1 5/6 >= 0.8, but the years differ
    frame, index = align_claims(
        ["the 1990 FIFA World Cup in Italy", "the 1994 FIFA World Cup in Italy"]
    )
    assert index == [0, 1]
    # same words, F1 >= 0.8: merged into the first-seen form
    frame, index = align_claims(["Barack Hussein Obama II", "Barack Hussein Obama"])
    assert frame == ["Barack Hussein Obama II"] and index == [0, 0]
    # one is the other's whole words: merged whatever the F1 threshold
    frame, index = align_claims(["Barack Hussein Obama II", "Barack Hussein Obama"], merge_f1=0.9)
    assert index == [0, 0]
    # F1 4/5 = 0.8, neither inside the other: merged at 0.8, apart at 0.9
    pair = ["Barack Hussein Obama II Jr", "Barack Hussein Obama II Sr"]
    assert align_claims(pair)[1] == [0, 0]
    assert align_claims(pair, merge_f1=0.9)[1] == [0, 1]
    with pytest.raises(ValueError):
        align_claims(["a"], merge_f1=0.0)


def test_evidence_vectors() -> None:
    evs = [Evaluation("", "A", "supports", "", 7.0, EVAL_OK)] * 2 + [
        Evaluation("", "", "irrelevant", "", 0.0, EVAL_OK)
    ]
    vectors = evidence_vectors(evs, [1, 0, None], 2)
    np.testing.assert_array_equal(np.array(vectors), [[0, 7], [7, 0], [0, 0]])
    with pytest.raises(ValueError):
        evidence_vectors(evs, [0, 0], 2)


def ev(value: str, evidence: float, stance: str = "supports") -> Evaluation:
    return Evaluation(f"The answer is {value}.", value, stance, "", float(evidence), EVAL_OK)


def test_question_masses_leave_zero_evidence_values_out_of_the_frame() -> None:
    frame, masses = question_masses([ev("Paris", 8), ev("Lyon", 0), ev("", 0, "irrelevant")])
    assert frame == ["Paris"]
    assert len(masses) == 3
    assert masses[0][1] == pytest.approx(1 / 9)  # e = [8]: S = 9, u = 1/9
    assert masses[1][1] == masses[2][1] == 1.0


# --- closed-book source (EVID+CB) ------------------------------------------------------------


def test_closed_book_source() -> None:
    assert closed_book_evaluation("Lyon", 90, "answer") == Evaluation(
        "Closed-book answer: Lyon",
        "Lyon",
        "supports",
        "the model's own answer without passages (parametric knowledge)",
        9.0,
        EVAL_OK,
    )
    assert closed_book_evaluation("Lyon", 45, "answer").evidence == 5.0  # halves round up
    assert closed_book_evaluation("Lyon", 100, "answer").evidence == 10.0
    assert closed_book_evaluation("", 90, "answer") is None
    assert closed_book_evaluation("Lyon", 90, "abstain") is None
    assert closed_book_evaluation(None, None, None) is None  # failed CB parse
    assert closed_book_evaluation("Lyon", None, "answer") is None
    with pytest.raises(ValueError):
        closed_book_evaluation("Lyon", 150, "answer")


def test_closed_book_source_turns_a_lone_misleading_passage_into_conflict() -> None:
    passages = [ev("Paris", 8), ev("", 0, "irrelevant")]
    frame, masses = question_masses(passages)
    b, u_alone = fuse(masses, LAMBDA)
    assert route(u_alone) == "direct"
    assert decide(frame, b, u_alone)["answer"] == "Paris"

    cb = closed_book_evaluation("Lyon", 90, "answer")
    frame, masses = question_masses(passages, [cb])
    assert frame == ["Paris", "Lyon"]
    b, u_with_cb = fuse(masses, LAMBDA)
    assert u_with_cb > u_alone
    assert route(u_with_cb) != "direct"
    assert decide(frame, b, u_with_cb)["decision"] == "abstain"

    # an agreeing CB pass only adds support
    frame, masses = question_masses(passages, [closed_book_evaluation("paris", 90, "answer")])
    assert frame == ["Paris"]
    assert fuse(masses, LAMBDA)[1] < u_alone


# --- routing and decisions -------------------------------------------------------------------


def test_route_boundaries() -> None:
    assert (TAU1, TAU2) == (0.35, 0.65)
    assert route(0.0) == "direct"
    assert route(np.nextafter(TAU1, 0)) == "direct"
    assert route(TAU1) == "conflict_aware"
    assert route(np.nextafter(TAU2, 0)) == "conflict_aware"
    assert route(TAU2) == "abstain"
    assert route(1.0) == "abstain"
    assert route(0.5, 0.2, 0.5) == "abstain"


@pytest.mark.parametrize(("tau1", "tau2"), [(0.5, 0.5), (0.6, 0.4), (-0.1, 0.5), (0.2, 1.1)])
def test_route_rejects_bad_thresholds(tau1: float, tau2: float) -> None:
    with pytest.raises(ValueError, match="tau1"):
        route(0.3, tau1, tau2)


def test_decide_mapping() -> None:
    frame = ["Paris", "Lyon"]
    b = np.array([0.7, 0.1])
    assert decide(frame, b, 0.2) == {
        "route": "direct",
        "decision": "answer",
        "answer": "Paris",
        "confidence": pytest.approx(70.0),
        "fused_confidence": pytest.approx(70.0),
        "selected_claim": "Paris",
    }
    # a routed abstention keeps Eq. 27's confidence and its selected claim for the ECE
    assert decide(frame, b, 0.4) == {
        "route": "conflict_aware",
        "decision": "abstain",
        "answer": "",
        "confidence": 0.0,
        "fused_confidence": pytest.approx(70.0),
        "selected_claim": "Paris",
    }
    assert decide(frame, b, 0.7)["route"] == "abstain"
    assert decide(frame, b, 0.7)["decision"] == "abstain"
    assert decide([], np.zeros(0), 1.0)["decision"] == "abstain"
    assert evid_confidence([]) == 0.0
    assert evid_confidence([0.2, 0.5]) == pytest.approx(50.0)


def test_route_messages() -> None:
    frame, b = ["Paris", "Lyon"], [0.2, 0.5]
    for name in ("direct", "conflict_aware", "abstain"):
        messages = route_messages(name, "Capital?", "Some context.", frame, b, 0.3)
        assert [m["role"] for m in messages] == ["system", "user"]
        user = messages[1]["content"]
        assert user.startswith("Context:\nSome context.\n\nQuestion: Capital?")
        assert user.endswith(RESPONSE_FORMAT)
        assert '- "Lyon": 0.50\n- "Paris": 0.20' in user and "0.30" in user
    direct = route_messages("direct", "Capital?", "c", frame, b, 0.3)[1]["content"]
    assert '"Lyon"' in direct.split("Uncertainty")[1] and "answer" in direct
    conflict_prompt = route_messages("conflict_aware", "Capital?", "c", frame, b, 0.5)[1]["content"]
    assert "disagree" in conflict_prompt and '("Lyon"; "Paris")' in conflict_prompt
    abstain = route_messages("abstain", "Capital?", "c", [], [], 1.0)[1]["content"]
    assert "additional evidence" in abstain and "no passage states an answer" in abstain
    with pytest.raises(ValueError):
        route_messages("direct", "Capital?", "c", [], [], 1.0)
    with pytest.raises(ValueError):
        route_messages("other", "Capital?", "c", frame, b, 0.3)  # type: ignore[arg-type]
    # the generator's answer is parsed by GRAB-RAG's parser
    raw = '{"decision": "abstain", "answer": "", "confidence": 10, "reasoning": "sources disagree"}'
    assert parse_output(raw, "stop").decision == "abstain"


# --- sweep -----------------------------------------------------------------------------------


def test_sweep_rows() -> None:
    by_qid = {
        "agree": [ev("Paris", 9), ev("paris", 8), ev("", 0, "irrelevant")],
        "conflict": [ev("Paris", 9), ev("Lyon", 9)],
        "empty": [ev("", 0, "irrelevant"), Evaluation("", "", "", "", 0.0, EVAL_FAILED)],
    }
    rows = sweep(by_qid)
    assert len(rows) == 3 * (5 * 3 + 3 + 1)
    for qid in by_qid:
        mine = [r for r in rows if r["qid"] == qid]
        evid = [r for r in mine if r["variant"] == "evid"]
        assert {(r["rule"], r["tau1"], r["tau2"]) for r in evid} == {
            (rule, t1, t2)
            for rule in ("dempster", 0.0, 0.3, 0.6, 1.0)
            for t1, t2 in ((0.2, 0.5), (0.35, 0.65), (0.5, 0.8))
        }
        assert len([r for r in mine if r["variant"] == "no_fusion"]) == 3
        assert len([r for r in mine if r["variant"] == "no_routing"]) == 1
        for r in mine:
            assert r["decision"] in ("answer", "abstain")
            assert (r["decision"] == "answer") == (r["route"] == "direct")
            assert (r["answer"] != "") == (r["decision"] == "answer")
    by_key = {(r["qid"], r["variant"], r["rule"], r["tau1"]): r for r in rows}
    assert by_key[("agree", "evid", 0.6, 0.35)]["answer"] == "Paris"
    assert by_key[("conflict", "evid", 0.6, 0.35)]["decision"] == "abstain"
    assert by_key[("conflict", "no_routing", LAMBDA, None)]["decision"] == "answer"
    assert by_key[("empty", "no_routing", LAMBDA, None)]["decision"] == "abstain"
    assert by_key[("empty", "evid", "dempster", 0.2)]["u_global"] == 1.0
    assert by_key[("conflict", "evid", 0.6, 0.35)]["mean_conflict"] > 0
    # Dempster normalises the conflict away, the transfer rule keeps it as uncertainty
    assert (
        by_key[("conflict", "evid", "dempster", 0.2)]["u_global"]
        < by_key[("conflict", "evid", 1.0, 0.2)]["u_global"]
    )


def test_sweep_with_closed_book_source() -> None:
    by_qid = {"q": [ev("Paris", 8)]}
    alone = sweep(by_qid, lams=(LAMBDA,), taus=((TAU1, TAU2),))
    with_cb = sweep(
        by_qid,
        lams=(LAMBDA,),
        taus=((TAU1, TAU2),),
        extra_sources_by_qid={"q": [closed_book_evaluation("Lyon", 90, "answer")]},
    )
    assert alone[0]["decision"] == "answer"
    assert with_cb[0]["decision"] == "abstain"
    assert with_cb[0]["u_global"] > alone[0]["u_global"]


# --- fold order, EVID+CB, evidence averaging (hand-computed) ------------------------------


def test_fold_order_is_independent_of_the_context_order() -> None:
    # evidence 9 for "Paris" (Y) or "Lyon" (X), M = 2: each source (9/11, 0) or (0, 9/11),
    # u = 2/11. The lambda rule is not associative:
    #   [Y, Y, X]: Y+Y = (117/121, 0; 4/121); + X: h = 8/1331, K = 1053/1331,
    #              U = (8 + 0.6 * 1053) / 1331 = 639.8/1331 = 0.481 -> conflict-aware
    #   [X, Y, Y]: X+Y: h = 4/121, K = 81/121, U = 52.6/121, b = (34.2/121, 34.2/121);
    #              + Y: h = 105.2/1331, K = 307.8/1331,
    #              U = (105.2 + 0.6 * 307.8) / 1331 = 289.88/1331 = 0.218 -> direct
    y, x = from_evidence([9, 0]), from_evidence([0, 9])
    assert fuse([y, y, x], LAMBDA)[1] == pytest.approx(639.8 / 1331)
    assert fuse([x, y, y], LAMBDA)[1] == pytest.approx(289.88 / 1331)
    # so the fold never follows the (shuffled) context: the passages are ranked by their
    # overlap with the question, ties by pid
    passages = [
        {"pid": "b", "title": "", "text": "Paris is it."},
        {"pid": "c", "title": "", "text": "Paris it is."},
        {"pid": "a", "title": "", "text": "Lyon is it."},
    ]
    question = "Where is it?"  # overlap 2 ("is", "it") for every passage: pid order
    orders = []
    for shift in range(3):
        shuffled = passages[shift:] + passages[:shift]
        orders.append([shuffled[i]["pid"] for i in fold_order(question, shuffled)])
    assert orders == [["a", "b", "c"]] * 3
    # the more question words a passage holds, the earlier it is folded
    ranked = fold_order(
        "Where is the Eiffel tower?", [*passages, {"pid": "z", "text": "Eiffel tower"}]
    )
    assert ranked[0] == 3


def test_closed_book_source_never_answers_alone_at_q0() -> None:
    # Q0: five irrelevant passages and a confident closed-book answer (evidence 10)
    passages = [ev("", 0, "irrelevant")] * 5
    cb = closed_book_evaluation("Lyon", 95, "answer")
    frame, masses = question_masses(passages, [cb])
    # the closed-book claim is left out: no claim, every mass vacuous, U = 1
    assert frame == [] and len(masses) == 5
    b, u = fuse(masses, LAMBDA)
    assert u == 1.0
    assert decide(frame, b, u)["decision"] == "abstain"
    assert decide(frame, b, u)["route"] == "abstain"
    # without the guard it would have been a direct answer from memory: (10/11, 1/11)
    assert route(from_evidence([10])[1]) == "direct"


def test_closed_book_claim_alone_is_never_a_direct_answer() -> None:
    # one passage with evidence 2 for "Paris" (M = 2: (0.5, 0; 0.5)), four irrelevant
    # (vacuous, neutral), the closed book "Lyon" with evidence 10 ((0, 10/12; 2/12)) last:
    # h = 1/12, K = 5/12, U = 1/12 + 0.6 * 5/12 = 1/3 < tau1, top claim Lyon (b = 5/9)
    passages = [ev("Paris", 2)] + [ev("", 0, "irrelevant")] * 4
    cb = closed_book_evaluation("Lyon", 100, "answer")
    frame, masses = question_masses(passages, [cb])
    assert frame == ["Paris", "Lyon"] and passage_claim_count(passages) == 1
    b, u = fuse(masses, LAMBDA)
    assert u == pytest.approx(1 / 3) and b[1] == pytest.approx(5 / 9)
    assert route(u) == "direct"
    assert guarded_route(frame, b, u, passage_claims=1) == "conflict_aware"
    assert decide(frame, b, u, passage_claims=1)["decision"] == "abstain"
    row = sweep({"q": passages}, (LAMBDA,), ((TAU1, TAU2),), {"q": [cb]})
    assert [(r["variant"], r["route"]) for r in row] == [
        ("evid", "conflict_aware"),
        ("no_fusion", "conflict_aware"),
        ("no_routing", "abstain"),
    ]


def test_closed_book_short_name_is_the_passages_claim() -> None:
    # "Obama" from memory against five passages saying "Barack Obama" (evidence 8): one
    # claim (M = 1), no conflict: U = (1/9)^5 * (1/10) -> direct, "Barack Obama"
    passages = [ev("Barack Obama", 8)] * 5
    cb = closed_book_evaluation("Obama", 90, "answer")
    frame, masses = question_masses(passages, [cb])
    assert frame == ["Barack Obama"]
    b, u = fuse(masses, LAMBDA)
    assert u == pytest.approx((1 / 9) ** 5 / 10)
    decision = decide(frame, b, u, passage_claims=passage_claim_count(passages))
    assert (decision["route"], decision["answer"]) == ("direct", "Barack Obama")
    # an ambiguous short form stays apart
    assert align_claims(["John Smith", "John Lennon", "John"])[1] == [0, 1, 2]


def test_evidence_averaging_answers_at_qc_where_mass_averaging_abstained() -> None:
    # QC: the swapped passage states "Lyon" with evidence 10, four passages are irrelevant
    passages = [ev("Lyon", 10)] + [ev("", 0, "irrelevant")] * 4
    frame, masses = question_masses(passages)
    # averaging the mass functions: b = (10/11)/5 = 2/11, u = (1/11 + 4)/5 = 9/11 -> abstain
    mass_b = sum(m[0] for m in masses) / 5
    mass_u = sum(m[1] for m in masses) / 5
    assert (mass_b[0], mass_u) == (pytest.approx(2 / 11), pytest.approx(9 / 11))
    assert route(mass_u) == "abstain"
    # averaging the evidence (the paper's ablation): e = 10/5 = 2, S = 3 -> b = 2/3, u = 1/3
    b, u = average_evidence([[10.0], [0.0], [0.0], [0.0], [0.0]])
    assert (b[0], u) == (pytest.approx(2 / 3), pytest.approx(1 / 3))
    rows = sweep({"q": passages}, (LAMBDA,), ((TAU1, TAU2),))
    no_fusion = [r for r in rows if r["variant"] == "no_fusion"][0]
    assert (no_fusion["decision"], no_fusion["answer"]) == ("answer", "Lyon")
    assert no_fusion["u_global"] == pytest.approx(1 / 3)


def test_sweep_grid_from_config_keeps_the_configured_setting() -> None:
    lams, taus = sweep_grid(["dempster", 0.0, 0.6], [[0.2, 0.5]], 0.45, 0.35, 0.65)
    assert lams == [None, 0.0, 0.6, 0.45]
    assert taus == [(0.2, 0.5), (0.35, 0.65)]
    # already on the grid: nothing added
    assert sweep_grid([0.6], [[0.35, 0.65]], 0.6, 0.35, 0.65) == ([0.6], [(0.35, 0.65)])
    rows = sweep({"q": [ev("Paris", 9)]}, lams, taus)
    assert {r["rule"] for r in rows if r["variant"] == "evid"} == {"dempster", 0.0, 0.6, 0.45}
    with pytest.raises(ValueError):
        sweep_grid([1.5], [[0.2, 0.5]], 0.6, 0.35, 0.65)
    with pytest.raises(ValueError):
        sweep_grid([0.6], [[0.5, 0.2]], 0.6, 0.35, 0.65)
