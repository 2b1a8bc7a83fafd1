"""EvidentialRAG as an extra policy (EvidentialRAG paper, sections 3-4, Appendix B).

Per question, an evaluator LLM reads each retrieved passage on its own and returns one
claim with a non-negative evidence score (section 3.2). Claims are aligned into a frame
of distinguishable candidate answers (section 3.3), each passage's evidence becomes a
Dempster-Shafer mass function, the masses are fused with the conflict-preserving rule,
and the mass left on the whole frame routes the final answer (sections 3.4-3.5).

Everything here is pure: no model is loaded. The Snakemake rules call the evaluator and
the generator with :func:`evaluator_messages` / :func:`route_messages` and store the raw
outputs; :func:`parse_evaluation`, :func:`question_masses`, :func:`decide` and
:func:`sweep` then work from stored outputs only.

Equations (paper numbering):

* Eqs. 2-6 (:func:`from_evidence`): alpha = e + 1, S = sum(alpha), singleton masses
  b_j = e_j / S, frame mass u = M / S, so sum(b) + u = 1 (Eq. 5).
* Eq. 7 (:func:`conflict`): K = sum_{r != s} b_a[r] * b_b[s].
* Eqs. 8-11 (:func:`combine`): n_j = b_a[j] b_b[j] + b_a[j] u_b + u_a b_b[j],
  h = u_a u_b, frame mass h + lambda K, singletons (1 - h - lambda K) n_j / sum(n).
* Eq. 12 (:func:`fuse`): m^(t) = m^(t-1) (x)_lambda m_t, left to right, in the fixed
  order of :func:`fold_order` (never the condition's shuffled context order); a tie the
  order cannot break (:func:`fold_groups`) is combined within itself first.
* Eq. 13: U_global = m^(k)(Theta), the ``u`` that :func:`fuse` returns.
* Eq. 14 (:func:`mean_pairwise_conflict`): mean pairwise K, a diagnostic only.
* Eq. 15 (:func:`route`): direct if U < tau1, conflict-aware if tau1 <= U < tau2,
  abstain if U >= tau2.
* Eq. 27 (:func:`evid_confidence`): confidence = max_j fused singleton mass, which we
  put on the 0-100 scale the rest of the benchmark uses (``metrics.CONFIDENCE_SCALE``);
  Eq. 26's ECE is :func:`grabrag.scoring.metrics.ece_mean`.
* Section 5.9's "without conflict-preserving fusion" (:func:`average_evidence`): the
  mean of the evidence vectors, then Eqs. 2-6.

A mass function is a tuple ``(b, u)``: ``b`` is a 1-D array of singleton masses over
the M claims of the frame and ``u`` is the mass on the whole frame (ignorance). Every
operation here returns masses that sum to one.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Literal

import numpy as np

from grabrag.generation.prompts import RESPONSE_FORMAT
from grabrag.scoring.metrics import normalize_answer, token_f1

# Defaults of the paper (section 4.3, Table 14).
TAU1 = 0.35
TAU2 = 0.65
LAMBDA = 0.6

Mass = tuple[np.ndarray, float]
Route = Literal["direct", "conflict_aware", "abstain"]
ROUTES: tuple[Route, ...] = ("direct", "conflict_aware", "abstain")

# A total conflict (K = 1 up to rounding) leaves Dempster's rule undefined.
TOTAL_CONFLICT_TOL = 1e-12
# Masses handed in by a caller may carry rounding from earlier operations; anything
# further from a valid mass function than this is a bug upstream.
_MASS_INPUT_TOL = 1e-6


# =====================================================================================
# Mass functions (Eqs. 2-14)
# =====================================================================================


def vacuous(m: int = 0) -> Mass:
    """The vacuous mass over ``m`` claims: everything on the frame (total ignorance)."""
    return np.zeros(m), 1.0


def from_evidence(evidence: Sequence[float] | np.ndarray) -> Mass:
    """Eqs. 2-6: the mass function of one evidence vector over the M claims.

    alpha = e + 1, S = sum(alpha) = sum(e) + M, b = e / S, u = M / S. No evidence at all
    (e = 0) gives u = 1; no claims (M = 0) gives the vacuous mass (empty, 1.0).
    """
    e = np.asarray(evidence, dtype=float)
    if e.ndim != 1:
        raise ValueError(f"evidence must be a 1-D vector, got shape {e.shape}")
    for value in e:
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"evidence must be finite and non-negative, got {value!r}")
    m = e.size
    if m == 0:
        return vacuous(0)
    total = float(e.sum()) + m
    if not math.isfinite(total):
        raise ValueError(f"evidence total {total!r} is not finite")
    return e / total, m / total


def _as_mass(mass: Mass, name: str = "mass") -> Mass:
    """Validate a (b, u) pair and return it as (float array, float)."""
    b = np.asarray(mass[0], dtype=float)
    u = float(mass[1])
    if b.ndim != 1:
        raise ValueError(f"{name}: singleton masses must be 1-D, got shape {b.shape}")
    if not (np.all(np.isfinite(b)) and math.isfinite(u)):
        raise ValueError(f"{name}: masses must be finite, got b={b!r}, u={u!r}")
    if (b.size and b.min() < -_MASS_INPUT_TOL) or not (
        -_MASS_INPUT_TOL <= u <= 1 + _MASS_INPUT_TOL
    ):
        raise ValueError(f"{name}: masses must be non-negative, got b={b!r}, u={u!r}")
    total = float(b.sum()) + u
    if abs(total - 1.0) > _MASS_INPUT_TOL:
        raise ValueError(f"{name}: masses sum to {total!r}, not 1")
    return np.clip(b, 0.0, None), min(max(u, 0.0), 1.0)


def _pair(m_a: Mass, m_b: Mass) -> tuple[np.ndarray, float, np.ndarray, float]:
    b_a, u_a = _as_mass(m_a, "m_a")
    b_b, u_b = _as_mass(m_b, "m_b")
    if b_a.size != b_b.size:
        raise ValueError(f"masses are over different frames: {b_a.size} vs {b_b.size} claims")
    return b_a, u_a, b_b, u_b


def _conflict(b_a: np.ndarray, b_b: np.ndarray) -> float:
    # sum_{r != s} b_a[r] b_b[s] = (sum b_a)(sum b_b) - sum_j b_a[j] b_b[j]; clipped
    # because the subtraction can go a rounding error below zero.
    return max(float(b_a.sum() * b_b.sum() - b_a @ b_b), 0.0)


def _conjunctive(
    b_a: np.ndarray, u_a: float, b_b: np.ndarray, u_b: float
) -> tuple[np.ndarray, float, float]:
    """(n, h, K) of Eqs. 7-9; n + h + K sum to one."""
    n = b_a * b_b + b_a * u_b + u_a * b_b
    return n, u_a * u_b, _conflict(b_a, b_b)


def conflict(m_a: Mass, m_b: Mass) -> float:
    """Eq. 7: K(m_a, m_b) = sum over r != s of m_a({a_r}) m_b({a_s})."""
    b_a, _, b_b, _ = _pair(m_a, m_b)
    return _conflict(b_a, b_b)


def combine(m_a: Mass, m_b: Mass, lam: float) -> Mass:
    """Eqs. 7-11: the conflict-preserving pairwise rule with transfer parameter ``lam``.

    Frame mass h + lam * K; singletons (1 - h - lam * K) n_j / sum(n). lam = 1 is
    Yager-style full transfer (singletons keep exactly n_j), lam = 0 transfers nothing.

    Choice: when sum(n) = 0 (no claim survives the conjunction, e.g. two sources that
    each commit fully to a different claim), Eq. 11 sets every singleton to 0, and with
    lam < 1 the masses would then sum to h + lam * K < 1. We put that remainder on the
    frame, so the result is the vacuous mass: nothing is known about which claim holds,
    and masses always sum to one.
    """
    if not 0.0 <= lam <= 1.0:  # also rejects NaN
        raise ValueError(f"lam must be in [0, 1], got {lam!r}")
    b_a, u_a, b_b, u_b = _pair(m_a, m_b)
    n, h, k = _conjunctive(b_a, u_a, b_b, u_b)
    support = float(n.sum())
    if support <= 0.0:
        return vacuous(b_a.size)
    # h + lam K <= h + K = 1 - sum(n) on paper; clip the rounding error.
    frame = min(max(h + lam * k, 0.0), 1.0)
    return (1.0 - frame) * n / support, frame


def dempster(m_a: Mass, m_b: Mass) -> Mass:
    """Classic normalised Dempster combination: singletons n_j / (1 - K), frame h / (1 - K).

    Choice: under total conflict (K = 1 within 1e-12) Dempster's rule is undefined
    (division by zero); we return the vacuous mass, i.e. total ignorance, rather than
    raise, so the Dempster arm of the lambda sweep still gives a route for every
    question. The divisor is computed as sum(n) + h (equal to 1 - K) so the result
    sums to one to rounding even when K is close to one.
    """
    b_a, u_a, b_b, u_b = _pair(m_a, m_b)
    n, h, k = _conjunctive(b_a, u_a, b_b, u_b)
    kept = float(n.sum()) + h
    if k >= 1.0 - TOTAL_CONFLICT_TOL or kept <= 0.0:
        return vacuous(b_a.size)
    return n / kept, h / kept


def fuse(masses: Sequence[Mass], lam: float | None, groups: Sequence[int] | None = None) -> Mass:
    """Eq. 12: fold the sources left to right, with :func:`combine` at ``lam`` or, for
    ``lam=None``, with :func:`dempster`. The returned ``u`` is U_global (Eq. 13).

    No sources give the vacuous mass over an empty frame. The lambda rule is not
    associative, so the order matters: callers pass passages in :func:`fold_order`.
    ``groups``: the sizes of the fold's tie groups (:func:`fold_groups`) over the first
    sources, in order; the sources after them fold one by one. A group is combined within
    itself first and then folded in as one source, so a pair the order cannot tell apart
    (QX's gold passage and its swapped twin) fuses the same whichever comes first (the
    pairwise rule is commutative). Without ``groups`` every source folds in turn.
    """
    if lam is not None and not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must be None or in [0, 1], got {lam!r}")
    if not masses:
        return vacuous(0)
    sizes = list(groups or ())
    if any(size < 1 for size in sizes) or sum(sizes) > len(masses):
        raise ValueError(f"fold groups {sizes} do not partition {len(masses)} sources")
    sizes += [1] * (len(masses) - sum(sizes))

    def step(m_a: Mass, m_b: Mass) -> Mass:
        return dempster(m_a, m_b) if lam is None else combine(m_a, m_b, lam)

    fused: Mass | None = None
    start = 0
    for size in sizes:
        piece = _as_mass(masses[start], f"masses[{start}]")
        for mass in masses[start + 1 : start + size]:
            piece = step(piece, mass)
        fused = piece if fused is None else step(fused, piece)
        start += size
    assert fused is not None
    return fused


def mean_pairwise_conflict(masses: Sequence[Mass]) -> float:
    """Eq. 14: K-bar, the mean of K(m_r, m_s) over the k(k-1)/2 pairs r < s.

    A diagnostic only (the paper does not add it to U_global); 0.0 with fewer than two
    sources.
    """
    k = len(masses)
    if k < 2:
        return 0.0
    total = sum(conflict(masses[r], masses[s]) for r in range(k) for s in range(r + 1, k))
    return 2.0 * total / (k * (k - 1))


def average_evidence(evidence_vectors: Sequence[Sequence[float] | np.ndarray]) -> Mass:
    """The "without conflict-preserving fusion" ablation (section 5.9, "simple evidence
    averaging"): the element-wise mean of the sources' evidence vectors, then Eqs. 2-6
    (:func:`from_evidence`). Conflict between sources is not seen: two sources with
    evidence 10 on different claims average to evidence 5 on each, and a source without
    evidence only halves the others' evidence (it does not add its own vacuity u = 1, as
    averaging the mass functions would). No sources give the vacuous mass."""
    if len(evidence_vectors) == 0:
        return vacuous(0)
    vectors = [np.asarray(v, dtype=float) for v in evidence_vectors]
    sizes = {v.shape for v in vectors}
    if len(sizes) > 1:
        raise ValueError(f"evidence vectors are over different frames: shapes {sorted(sizes)}")
    return from_evidence(np.mean(vectors, axis=0))


# =====================================================================================
# Fold order (Eq. 12)
# =====================================================================================

# The evaluator walks the passages by question overlap, then pid, title and text: its
# candidate inventory grows along that order.


def passage_relevance(question: str, passage: Mapping[str, Any]) -> int:
    """How many distinct SQuAD-normalised question tokens occur in the passage (title and
    text): a lexical stand-in for the paper's reranker score."""
    words = set(normalize_answer(question).split())
    text = f"{passage.get('title') or ''} {passage.get('text') or ''}"
    return len(words & set(normalize_answer(text).split()))


def fold_key(question: str, passage: Mapping[str, Any]) -> tuple[int, str, str, str]:
    """Sort key of one passage in the fold: most relevant first (:func:`passage_relevance`),
    ties by pid, title and text."""
    return (
        -passage_relevance(question, passage),
        str(passage.get("pid") or ""),
        str(passage.get("title") or ""),
        str(passage.get("text") or ""),
    )


def fold_groups(question: str, passages: Sequence[Mapping[str, Any]]) -> list[list[int]]:
    """:func:`fold_order` cut into the groups the evaluator and Eq. 12 treat as one step.

    Passages that tie on relevance and pid but differ in text (QX's gold passage and its
    swapped twin: one passage and its edit) have no order of their own: the text decides
    which comes first, and which is gold is not to be read. Choice: such a run is one
    group: each member is evaluated with the inventory from before the group (neither
    sees the other's claim) and the members are combined with each other before they
    join the fold (:func:`fuse`), so the result does not depend on their order. Every
    other passage (identical Q100 copies included) is a group of its own, in order.
    """
    order = fold_order(question, passages)
    groups: list[list[int]] = []
    run: list[int] = []

    def close() -> None:
        texts = {(passages[i].get("title"), passages[i].get("text")) for i in run}
        if len(run) > 1 and len(texts) == len(run):
            groups.append(list(run))
        else:
            groups.extend([i] for i in run)

    for i in order:
        if run and fold_key(question, passages[i])[:2] != fold_key(question, passages[run[0]])[:2]:
            close()
            run = []
        run.append(i)
    if run:
        close()
    return groups


def fold_order(question: str, passages: Sequence[Mapping[str, Any]]) -> list[int]:
    """Indices of ``passages`` in the order the evaluator reads them and Eq. 12 folds them.

    The paper folds its reranked top-k in rank order. The lambda rule is not associative,
    so the order changes the route, and a GRAB-RAG context is shuffled per condition on
    purpose (its passage order carries no rank). Choice: we rank the passages of a
    question by their overlap with the question (:func:`fold_key`), a deterministic
    function of the question and the passages alone: any permutation of the same context
    gives the same order, hence the same evaluations and the same route. It uses no
    benchmark label (a passage's role is never read). Identical passages (Q100 reuses its
    gold passages) tie completely and are interchangeable.
    """
    return sorted(range(len(passages)), key=lambda i: fold_key(question, passages[i]))


# =====================================================================================
# Evaluator (section 3.2, Appendix B)
# =====================================================================================

STANCES = ("supports", "competing", "irrelevant")
MAX_EVIDENCE = 10
# Appendix B / section 4.3: an invalid or unrecoverable evaluator output is treated as
# no singleton evidence (high uncertainty), never as hidden support.
FALLBACK_EVIDENCE = 0.0
EVAL_OK, EVAL_REPAIRED, EVAL_FAILED = "ok", "repaired", "failed"
EVALUATION_FIELDS = ("claim", "value", "stance", "rationale", "evidence")

# Appendix B, part 1 (task role).
EVALUATOR_SYSTEM = (
    "You are an evidence evaluator for retrieval-augmented question answering.\n"
    "You judge ONE retrieved passage: does it state an answer to the question, and how "
    "strongly?\n"
    "Use only the passage, never your own knowledge.\n"
    "Always respond with valid JSON."
)

# Appendix B, part 3 (evidence-scoring rules) and part 5 (failure handling).
EVALUATOR_RULES = (
    "Rules:\n"
    '- If the passage states an answer to the question, put that statement in "claim" and '
    'the short answer (a name, date or number; a few words) in "value". Write dates as '
    "day month year (5 March 1990) and numbers in digits (1000).\n"
    "- If the answer is the same as one of the candidate answers, copy that candidate "
    'exactly into "value" and set "stance" to "supports".\n'
    '- If the answer differs from every candidate answer, set "stance" to "competing". '
    'With no candidate answers yet, an answer the passage states "supports".\n'
    '- "evidence" (0 to 10) says how directly and completely THIS passage states the '
    "answer: 10 = stated explicitly, 5 = stated indirectly or in part, 1 = barely hinted.\n"
    "- If the passage is irrelevant, incomplete, or only about the same topic without "
    'stating an answer, set "stance" to "irrelevant", "claim" and "value" to empty '
    'strings and "evidence" to 0. Do not guess.\n'
    '- If you cannot judge the passage, set "stance" to "irrelevant" and "evidence" to 0. '
    "An output that does not follow the format below counts as no evidence."
)

# Appendix B, part 4 (output schema), in the style of GRAB-RAG's RESPONSE_FORMAT.
EVALUATOR_FORMAT = (
    "Respond ONLY with a JSON object in this exact format:\n"
    '{"claim": "the passage\'s statement that answers the question, or empty string",\n'
    '"value": "the short answer, or empty string",\n'
    '"stance": "supports" or "competing" or "irrelevant",\n'
    '"rationale": "brief reason",\n'
    '"evidence": 0-10}\n'
    "Start with { immediately.\n"
    "Keep the rationale brief.\n"
    "Do not use backslashes."
)

# The evaluator's output, forced by llama.cpp. One rule per line: llama.cpp's GBNF
# parser ends a rule at a newline outside parentheses. Strings are JSON strings without
# backslashes (no escapes to get wrong) and without control characters (json.loads
# rejects raw newlines and tabs inside strings); the character class is the one of
# llama.cpp's own grammars/json.gbnf. Evidence is a JSON integer 0..10, spelled out.
# Choice: whitespace between tokens is at most one space, not [ \t\n]*: a small model
# can otherwise emit whitespace until max_tokens, and a cut-off output before the
# evidence field cannot be repaired (it fails, as zero evidence).
EVALUATOR_GRAMMAR = (
    r"""root ::= "{" ws "\"claim\":" ws str "," ws "\"value\":" ws str "," ws """
    r""""\"stance\":" ws stance "," ws "\"rationale\":" ws str "," ws """
    r""""\"evidence\":" ws evidence ws "}"
ws ::= " "?
str ::= "\"" [^"\\\x7F\x00-\x1F]* "\""
stance ::= "\"supports\"" | "\"competing\"" | "\"irrelevant\""
evidence ::= "0" | "1" | "2" | "3" | "4" | "5" | "6" | "7" | "8" | "9" | "10"
"""
)


def evaluator_user_prompt(question: str, passage: str, inventory: Sequence[str]) -> str:
    """User message of one evaluator call (Appendix B, part 2: query, one chunk, the
    current candidate-claim inventory).

    Choice: the blocks that are the same for every passage of a question (question,
    rules, format) come first, so llama.cpp reuses their KV cache across the k calls.
    """
    candidates = list(dict.fromkeys(c.strip() for c in inventory if c.strip()))
    if candidates:
        listed = "\n".join(f"- {c}" for c in candidates)
        inventory_block = f"Candidate answers already found in other passages:\n{listed}"
    else:
        inventory_block = "Candidate answers already found in other passages: none yet."
    return "\n\n".join(
        [
            f"Question: {question}",
            EVALUATOR_RULES,
            EVALUATOR_FORMAT,
            inventory_block,
            f"Passage:\n{passage}",
        ]
    )


def evaluator_messages(
    question: str, passage: str, inventory: Sequence[str]
) -> list[dict[str, str]]:
    """System + user chat messages for evaluating one passage."""
    return [
        {"role": "system", "content": EVALUATOR_SYSTEM},
        {"role": "user", "content": evaluator_user_prompt(question, passage, inventory)},
    ]


@dataclass(frozen=True)
class Evaluation:
    """One evaluator judgement of one passage (or of another evidence source)."""

    claim: str
    value: str
    stance: str  # "supports" | "competing" | "irrelevant"; "" when parsing failed
    rationale: str
    evidence: float
    status: str  # "ok" | "repaired" | "failed"


FAILED_EVALUATION = Evaluation("", "", "", "", FALLBACK_EVIDENCE, EVAL_FAILED)

# Evidence is the last field, so an output cut off by max_tokens that holds every field
# can only be missing its closing brace. A cut earlier (inside the rationale, say) would
# need the evidence invented, so it fails instead. Choice: a cut right after the digit
# "1" is read as 1 although the model may have been writing 10; the lower reading is
# the conservative one (less support, more uncertainty).
_REPAIR_SUFFIXES = ("}",)


def _validate_evaluation(obj: Any, status: str) -> Evaluation | None:
    if not isinstance(obj, dict) or any(field not in obj for field in EVALUATION_FIELDS):
        return None
    claim, value, stance = obj["claim"], obj["value"], obj["stance"]
    rationale, evidence = obj["rationale"], obj["evidence"]
    if not all(isinstance(s, str) for s in (claim, value, stance, rationale)):
        return None
    if stance not in STANCES:
        return None
    if isinstance(evidence, bool) or not isinstance(evidence, int):
        return None
    if not 0 <= evidence <= MAX_EVIDENCE:
        return None
    # Choice: an "irrelevant" stance or a value with nothing left after SQuAD
    # normalisation cannot support any claim, so its evidence is 0 whatever the model
    # wrote (otherwise it would lower the vacuity without naming what it supports).
    if stance == "irrelevant" or not normalize_answer(value):
        evidence = 0
    return Evaluation(claim, value, stance, rationale, float(evidence), status)


def parse_evaluation(raw: str, finish_reason: str | None) -> Evaluation:
    """Parse one evaluator output; repair an output cut off by max_tokens only by closing
    it (see ``_REPAIR_SUFFIXES``). Anything else that is not the schema is ``failed``
    with evidence :data:`FALLBACK_EVIDENCE` and empty claim and value.

    Extra keys are ignored, as in :func:`grabrag.generation.generator.parse_output` (the grammar
    does not allow them anyway)."""
    try:
        parsed = _validate_evaluation(json.loads(raw), EVAL_OK)
    except (json.JSONDecodeError, TypeError):
        parsed = None
    if parsed is not None:
        return parsed
    if finish_reason == "length" and isinstance(raw, str):
        for suffix in _REPAIR_SUFFIXES:
            try:
                repaired = _validate_evaluation(json.loads(raw + suffix), EVAL_REPAIRED)
            except json.JSONDecodeError:
                continue
            if repaired is not None:
                return repaired
    return FAILED_EVALUATION


# =====================================================================================
# Claim alignment (section 3.3)
# =====================================================================================

_MONTHS = {
    "january": 1,
    "jan": 1,
    "february": 2,
    "feb": 2,
    "march": 3,
    "mar": 3,
    "april": 4,
    "apr": 4,
    "may": 5,
    "june": 6,
    "jun": 6,
    "july": 7,
    "jul": 7,
    "august": 8,
    "aug": 8,
    "september": 9,
    "sep": 9,
    "sept": 9,
    "october": 10,
    "oct": 10,
    "november": 11,
    "nov": 11,
    "december": 12,
    "dec": 12,
}
_NUMBER_WORDS = {
    word: i
    for i, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen "
        "fourteen fifteen sixteen seventeen eighteen nineteen twenty".split()
    )
}
_ORDINAL = r"(?:st|nd|rd|th)?"
_ISO_DATE = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})")
_DAY_MONTH_YEAR = re.compile(rf"(\d{{1,2}}){_ORDINAL}(?: of)? ([a-z]+)\.?,? (\d{{1,4}})")
_MONTH_DAY_YEAR = re.compile(rf"([a-z]+)\.? (\d{{1,2}}){_ORDINAL},? (\d{{1,4}})")
_MONTH_YEAR = re.compile(r"([a-z]+)\.?,? (\d{4})")
_DAY_MONTH = re.compile(rf"(\d{{1,2}}){_ORDINAL}(?: of)? ([a-z]+)\.?")
_MONTH_DAY = re.compile(rf"([a-z]+)\.? (\d{{1,2}}){_ORDINAL}")
_NUMBER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?")
_PERCENT = re.compile(r"(.+?) ?(?:%|percent|per cent)")
_NUMBER_IN_TEXT = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")
_EDGE_PUNCT = " \t\n\"'`()[]{},;:!?"


def _canonical_number(text: str) -> str | None:
    if text in _NUMBER_WORDS:
        return str(_NUMBER_WORDS[text])
    if not any(ch.isdigit() for ch in text) or not _NUMBER.fullmatch(text):
        return None
    try:
        number = Decimal(text.replace(",", ""))
    except InvalidOperation:
        return None
    if number == 0:
        return "0"  # also "-0", "0.00"
    return format(number.normalize(), "f")


def _canonical_date(year: int | None, month: int, day: int | None) -> str | None:
    try:
        # 2000 is a leap year, so a day-month without a year accepts 29 February.
        _dt.date(2000 if year is None else year, month, 1 if day is None else day)
    except ValueError:
        return None
    if year is None:
        return f"date:--{month:02d}-{day:02d}"
    if day is None:
        return f"date:{year:04d}-{month:02d}"
    return f"date:{year:04d}-{month:02d}-{day:02d}"


def _parse_date(text: str) -> str | None:
    if match := _ISO_DATE.fullmatch(text):
        year, month, day = map(int, match.groups())
        return _canonical_date(year, month, day)
    if (match := _DAY_MONTH_YEAR.fullmatch(text)) and match[2] in _MONTHS:
        return _canonical_date(int(match[3]), _MONTHS[match[2]], int(match[1]))
    if (match := _MONTH_DAY_YEAR.fullmatch(text)) and match[1] in _MONTHS:
        return _canonical_date(int(match[3]), _MONTHS[match[1]], int(match[2]))
    if (match := _MONTH_YEAR.fullmatch(text)) and match[1] in _MONTHS:
        return _canonical_date(int(match[2]), _MONTHS[match[1]], None)
    if (match := _DAY_MONTH.fullmatch(text)) and match[2] in _MONTHS:
        return _canonical_date(None, _MONTHS[match[2]], int(match[1]))
    if (match := _MONTH_DAY.fullmatch(text)) and match[1] in _MONTHS:
        return _canonical_date(None, _MONTHS[match[1]], int(match[2]))
    return None


def normalize_number_or_date(value: str) -> str | None:
    """A canonical key when the whole value is a number or a date, else None.

    Numbers: "1,000" == "1000", "3.0" == "3", "-0" == "0", number words zero..twenty
    ("five" == "5"); a trailing "%" / "percent" gives a separate percent key ("50%" ==
    "50 percent", but != "50"). Dates: "March 5, 1990" == "5 March 1990" == "5th of March
    1990" == "1990-03-05"; month + year ("March 1990") and day + month ("5 March") get
    their own, less precise keys. A bare year is a number ("1990").

    Choice: slash dates ("03/05/1990") are ambiguous between US and European order and
    get no key (they can still merge by identical normalised text); a key of different
    precision ("March 1990" vs "1990") never equals another, so such values stay apart.
    """
    # A leading "." is kept: ".5" is a number, not "5".
    text = " ".join(value.lower().split()).strip(_EDGE_PUNCT).rstrip(".").strip(_EDGE_PUNCT)
    if not text:
        return None
    if match := _PERCENT.fullmatch(text):
        number = _canonical_number(match[1].strip())
        return None if number is None else f"pct:{number}"
    number = _canonical_number(text)
    if number is not None:
        return f"num:{number}"
    return _parse_date(text)


def _quantities(value: str) -> tuple[str, ...]:
    """The numbers and month names a value mentions (a sorted multiset), used to block
    merges of values that differ only in a number or a date."""
    lowered = value.lower()
    found = [_canonical_number(m) or m for m in _NUMBER_IN_TEXT.findall(lowered)]
    for word in re.findall(r"[a-z]+", lowered):
        if word in _NUMBER_WORDS:
            found.append(str(_NUMBER_WORDS[word]))
        elif word in _MONTHS:
            found.append(f"month:{_MONTHS[word]}")
    return tuple(sorted(found))


@dataclass(frozen=True)
class _ClaimKey:
    text: str  # the value as first seen (stripped)
    normalized: str  # SQuAD normalisation
    number_or_date: str | None
    quantities: tuple[str, ...]

    @classmethod
    def of(cls, value: str) -> _ClaimKey:
        return cls(
            value.strip(),
            normalize_answer(value),
            normalize_number_or_date(value),
            _quantities(value),
        )


def _compatible(a: _ClaimKey, b: _ClaimKey) -> bool:
    """False when the two values name different numbers or dates (never merged)."""
    if a.number_or_date and b.number_or_date and a.number_or_date != b.number_or_date:
        return False
    return a.quantities == b.quantities


def _match(
    key: _ClaimKey, claims: Sequence[_ClaimKey], merge_f1: float, competing: bool = False
) -> int | None:
    """The claim ``key`` merges into, or None. Stages in order: same number/date; same
    normalised text; best token F1 >= merge_f1 (ties: the earlier claim); whole-words
    containment. A ``competing`` value (the evaluator said it competes with a candidate
    it was shown) takes the exact stages only."""
    if key.number_or_date:
        for j, claim in enumerate(claims):
            if claim.number_or_date == key.number_or_date:
                return j
    for j, claim in enumerate(claims):
        if _compatible(key, claim) and claim.normalized == key.normalized:
            return j
    if competing:
        return None
    best, best_f1 = None, -1.0
    for j, claim in enumerate(claims):
        if not _compatible(key, claim):
            continue
        f1 = token_f1(key.text, [claim.text])
        # Token F1 is a ratio of small integers: compare with a tolerance, as P3 does.
        if f1 >= merge_f1 - 1e-9 and f1 > best_f1:
            best, best_f1 = j, f1
    if best is not None:
        return best
    inside = [
        j
        for j, claim in enumerate(claims)
        if _compatible(key, claim) and _contained(key.normalized, claim.normalized)
    ]
    return inside[0] if len(inside) == 1 else None


def _contained(a: str, b: str) -> bool:
    """One normalised value is the other's whole words, in order ("obama" in "barack
    obama"), as GRAB-RAG's own answer matching
    (:func:`grabrag.scoring.metrics.classify_qc_answer`)."""
    return bool(a and b) and (f" {a} " in f" {b} " or f" {b} " in f" {a} ")


def align_claims(
    values: Sequence[str], merge_f1: float = 0.8, competing: Sequence[bool] | None = None
) -> tuple[list[str], list[int | None]]:
    """Section 3.3: align answer values into the frame of distinguishable claims.

    Returns the frame (the first-seen surface form of each claim, in first-seen order)
    and, for each value, its claim index, or None for a value that is empty after SQuAD
    normalisation (an irrelevant passage).

    Two values merge when they parse to the same number or date
    (:func:`normalize_number_or_date`), or have the same SQuAD-normalised text, or token
    F1 >= ``merge_f1``; but never when they name different numbers or dates (different
    number/date keys, or different numbers / month names anywhere in the text: "1990"
    and "1991" stay apart, and so do "1.5" and "15", which SQuAD normalisation would
    make equal).

    Last, a value that is the other's whole words ("Obama" and "Barack Obama", after
    SQuAD normalisation) merges, but only into a single such claim ("John" stays apart
    from both "John Smith" and "John Lennon") and never across numbers or dates.

    ``competing`` (one flag per value): the evaluator marked the value as competing with
    the candidates it was shown. Such a value merges only by the exact stages (same
    number/date, same normalised text), never by token F1 or containment: the evaluator
    has said it names another answer ("King Juan Carlos II of Spain" against "King Juan
    Carlos I of Spain", token F1 0.83).

    Choices: the alignment is conservative, as the paper asks (uncertain merges are
    avoided, so disagreement shows as conflict rather than being merged away): no alias
    or abbreviation knowledge ("NYC" and "New York City" stay apart). The containment
    stage is ours: the evaluator aligns passage values with the candidate inventory
    itself, but the closed-book value of EVID_CB never meets the evaluator, and the
    short form of a name is the usual way the two differ. A new value is compared with
    each claim's first-seen form only, not with every value merged into it, so fuzzy
    matches cannot chain (a ~ b, b ~ c, but a !~ c).
    """
    if not 0.0 < merge_f1 <= 1.0:
        raise ValueError(f"merge_f1 must be in (0, 1], got {merge_f1!r}")
    flags = list(competing) if competing is not None else [False] * len(values)
    if len(flags) != len(values):
        raise ValueError(f"{len(values)} values but {len(flags)} competing flags")
    claims: list[_ClaimKey] = []
    index: list[int | None] = []
    for value, rival in zip(values, flags, strict=True):
        if not normalize_answer(value):
            index.append(None)
            continue
        key = _ClaimKey.of(value)
        j = _match(key, claims, merge_f1, rival)
        if j is None:
            claims.append(key)
            j = len(claims) - 1
        index.append(j)
    return [c.text for c in claims], index


def evidence_vectors(
    evaluations: Sequence[Evaluation], claim_index: Sequence[int | None], m: int
) -> list[np.ndarray]:
    """One evidence vector per source: its evidence at its claim's index, zeros
    elsewhere; all zeros for a source without a claim (index None)."""
    if len(evaluations) != len(claim_index):
        raise ValueError(f"{len(evaluations)} evaluations but {len(claim_index)} claim indices")
    vectors = []
    for evaluation, j in zip(evaluations, claim_index, strict=True):
        vector = np.zeros(m)
        if j is not None:
            if not 0 <= j < m:
                raise ValueError(f"claim index {j} outside a frame of {m} claims")
            vector[j] = evaluation.evidence
        vectors.append(vector)
    return vectors


def _gives_evidence(evaluation: Evaluation) -> bool:
    return evaluation.evidence > 0 and evaluation.stance != "irrelevant"


def question_masses(
    evaluations: Sequence[Evaluation],
    extra_sources: Iterable[Evaluation | None] = (),
    merge_f1: float = 0.8,
) -> tuple[list[str], list[Mass]]:
    """The frame and one mass function per source for one question: the passages'
    evaluations in the order given (the fold order, :func:`fold_order`), then
    ``extra_sources`` (the
    closed-book source of :func:`closed_book_evaluation`; None entries are skipped).

    Extra sources join only when at least one passage gives evidence: with every passage
    irrelevant, a closed-book claim would be the sole support of whatever is answered.
    Their values go through the same alignment as the passages' (:func:`align_claims`),
    after them, so the passages' claims keep their indices (the first
    :func:`passage_claim_count` claims of the frame).

    Choice: only sources with positive evidence put a claim into the frame. A value
    scored 0 supports nothing, and a claim nobody supports would still enlarge M and so
    raise every source's vacuity u = M / S (Eq. 4).
    """
    frame, vectors = _question_evidence(evaluations, extra_sources, merge_f1)
    return frame, [from_evidence(v) for v in vectors]


def question_evidence(
    evaluations: Sequence[Evaluation],
    extra_sources: Iterable[Evaluation | None] = (),
    merge_f1: float = 0.8,
) -> tuple[list[str], list[np.ndarray]]:
    """As :func:`question_masses`, but the evidence vectors (for :func:`average_evidence`)."""
    return _question_evidence(evaluations, extra_sources, merge_f1)


def _question_evidence(
    evaluations: Sequence[Evaluation],
    extra_sources: Iterable[Evaluation | None],
    merge_f1: float,
) -> tuple[list[str], list[np.ndarray]]:
    extra = [e for e in extra_sources if e is not None]
    if not any(_gives_evidence(e) for e in evaluations):
        extra = []
    sources = [*evaluations, *extra]
    frame, index = _align(sources, merge_f1)
    return frame, evidence_vectors(sources, index, len(frame))


def _align(sources: Sequence[Evaluation], merge_f1: float) -> tuple[list[str], list[int | None]]:
    """:func:`align_claims` of the sources' values (a source without evidence names no
    claim), with the evaluator's competing stances."""
    values = [e.value if _gives_evidence(e) else "" for e in sources]
    return align_claims(values, merge_f1, [e.stance == "competing" for e in sources])


def passage_claim_count(evaluations: Sequence[Evaluation], merge_f1: float = 0.8) -> int:
    """How many claims the passages alone put into the frame: with extra sources appended,
    claims at an index >= this count are supported by an extra source only."""
    return len(_align(evaluations, merge_f1)[0])


def closed_book_evaluation(
    cb_answer: str | None, cb_confidence: float | None, decision: str | None
) -> Evaluation | None:
    """The closed-book (CB) pass as one more evidence source (the EVID+CB variant, ours), so
    a lone misleading passage meets the model's own, opposing claim (conflict) instead of
    being the only evidence. It is folded in last, after every passage: EVID+CB's state
    is EVID's fused passages combined once with the CB mass. It may add conflict, but it
    never is the sole support of a direct answer (:func:`question_masses` leaves it out
    when no passage gives evidence; :func:`guarded_route` keeps a claim that only it
    supports from the direct route).

    Evidence = round(10 * confidence / 100), rounding halves up (Choice: Python's
    round() would send 45 to 4 and 55 to 6). None when the CB pass abstained, failed
    (decision None) or gave an empty answer or no confidence.
    """
    if decision != "answer" or cb_confidence is None or not normalize_answer(cb_answer or ""):
        return None
    confidence = float(cb_confidence)
    if not 0.0 <= confidence <= 100.0:  # also rejects NaN
        raise ValueError(f"closed-book confidence must be in 0-100, got {cb_confidence!r}")
    evidence = min(math.floor(MAX_EVIDENCE * confidence / 100.0 + 0.5), MAX_EVIDENCE)
    return Evaluation(
        claim=f"Closed-book answer: {cb_answer}",
        value=str(cb_answer),
        stance="supports",
        rationale="the model's own answer without passages (parametric knowledge)",
        evidence=float(evidence),
        status=EVAL_OK,
    )


# =====================================================================================
# Routing (Eq. 15) and route prompts (section 3.5, Appendix B)
# =====================================================================================


def _check_taus(tau1: float, tau2: float) -> None:
    if not 0.0 <= tau1 < tau2 <= 1.0:  # also rejects NaN
        raise ValueError(f"thresholds must satisfy 0 <= tau1 < tau2 <= 1, got {tau1!r}, {tau2!r}")


def route(u_global: float, tau1: float = TAU1, tau2: float = TAU2) -> Route:
    """Eq. 15: "direct" if U < tau1, "conflict_aware" if tau1 <= U < tau2, else
    "abstain" (U exactly tau1 is conflict-aware, exactly tau2 abstains)."""
    _check_taus(tau1, tau2)
    if not math.isfinite(u_global):
        raise ValueError(f"U_global must be finite, got {u_global!r}")
    if u_global < tau1:
        return "direct"
    if u_global < tau2:
        return "conflict_aware"
    return "abstain"


def guarded_route(
    frame: Sequence[str],
    b: Sequence[float] | np.ndarray,
    u_global: float,
    tau1: float = TAU1,
    tau2: float = TAU2,
    passage_claims: int | None = None,
) -> Route:
    """Eq. 15, except that a direct route whose top claim no passage supports (its index is
    ``passage_claims`` or more: the closed-book source alone) becomes conflict-aware: the
    passages and the model's memory disagree, and memory alone never makes a direct
    answer (EVID+CB, ours). ``passage_claims`` None: every claim comes from a passage."""
    chosen = route(u_global, tau1, tau2)
    top = _top_claim(frame, np.asarray(b, dtype=float))
    if chosen == "direct" and passage_claims is not None and top is not None:
        if top >= passage_claims:
            return "conflict_aware"
    return chosen


ROUTE_SYSTEM = (
    "You are a helpful question-answering assistant.\n"
    "Answer the question using ONLY the provided context and its evidence summary.\n"
    "Always respond with valid JSON."
)


def _top_claim(frame: Sequence[str], b: np.ndarray) -> int | None:
    """Index of the highest-mass claim (ties: first seen), None without any support."""
    if len(frame) == 0 or not np.any(b > 0):
        return None
    return int(np.argmax(b))


def evidence_summary(frame: Sequence[str], fused_b: Sequence[float], u_global: float) -> str:
    """The evidence block of the route prompt: claims by fused mass, then U_global."""
    b = np.asarray(fused_b, dtype=float)
    if len(frame) != b.size:
        raise ValueError(f"{len(frame)} claims but {b.size} fused masses")
    lines = ["Evidence summary (candidate answers found in the context, with their fused mass):"]
    order = sorted(range(len(frame)), key=lambda j: (-b[j], j))
    lines += [f'- "{frame[j]}": {b[j]:.2f}' for j in order]
    if len(frame) == 0:
        lines.append("- (no passage states an answer)")
    lines.append(f"Uncertainty (mass on no particular answer): {u_global:.2f}")
    return "\n".join(lines)


def route_instruction(route_name: Route, frame: Sequence[str], fused_b: Sequence[float]) -> str:
    """Appendix B's three generator instruction families."""
    b = np.asarray(fused_b, dtype=float)
    if route_name == "direct":
        top = _top_claim(frame, b)
        if top is None:
            raise ValueError("the direct route needs a claim with positive mass")
        return (
            f'The evidence agrees on "{frame[top]}". Answer with this highest-mass claim: set '
            'decision to "answer" and give the answer in a few words. Do not add details '
            "that the context does not support."
        )
    if route_name == "conflict_aware":
        claims = "; ".join(f'"{frame[j]}"' for j in sorted(range(len(frame)), key=lambda j: -b[j]))
        return (
            f"The retrieved sources disagree: they support competing answers ({claims}). "
            'Do not present any of them as settled. Set decision to "abstain", leave the '
            "answer empty, and in the reasoning name the competing claims and say that the "
            "sources disagree."
        )
    if route_name == "abstain":
        return (
            "The evidence is too weak or too uncertain for an answer. Do not give a "
            'definitive answer: set decision to "abstain", leave the answer empty, and in '
            "the reasoning say what additional evidence would be needed."
        )
    raise ValueError(f"unknown route {route_name!r}; expected one of {', '.join(ROUTES)}")


def route_messages(
    route_name: Route,
    question: str,
    context: str,
    frame: Sequence[str],
    fused_b: Sequence[float],
    u_global: float,
) -> list[dict[str, str]]:
    """The final generator prompt for one route. The generator answers in GRAB-RAG's
    JSON (``prompts.RESPONSE_FORMAT``, grammar ``prompts.GBNF_GRAMMAR``), so
    :func:`grabrag.generation.generator.parse_output` parses it."""
    user = "\n\n".join(
        [
            f"Context:\n{context}",
            f"Question: {question}",
            evidence_summary(frame, fused_b, u_global),
            route_instruction(route_name, frame, fused_b),
            RESPONSE_FORMAT,
        ]
    )
    return [{"role": "system", "content": ROUTE_SYSTEM}, {"role": "user", "content": user}]


# =====================================================================================
# Decisions from stored evaluations (no LLM)
# =====================================================================================


def evid_confidence(b: Sequence[float] | np.ndarray) -> float:
    """Eq. 27 on the 0-100 scale: 100 * max fused singleton mass; 0 without claims.
    Not multiplied by (1 - U_global): the paper notes that would double-discount."""
    b = np.asarray(b, dtype=float)
    if b.size == 0:
        return 0.0
    return float(min(max(float(b.max()) * 100.0, 0.0), 100.0))


def selected_claim(frame: Sequence[str], b: Sequence[float] | np.ndarray) -> str | None:
    """The answer Eq. 27 scores: the highest-mass claim (ties: first in the frame); None
    without any supported claim."""
    top = _top_claim(frame, np.asarray(b, dtype=float))
    return None if top is None else frame[top]


def decide(
    frame: Sequence[str],
    b: Sequence[float] | np.ndarray,
    u: float,
    tau1: float = TAU1,
    tau2: float = TAU2,
    passage_claims: int | None = None,
) -> dict[str, Any]:
    """Route (:func:`guarded_route`) and decision of one question from its fused mass.

    direct -> answer the highest-mass claim with confidence :func:`evid_confidence`;
    conflict_aware and abstain -> abstain, answer "", confidence 0. Every route also
    gives ``fused_confidence`` (Eq. 27 on the 0-100 scale) and ``selected_claim`` (the
    highest-mass claim, None without one): EvidentialRAG's ECE (Eq. 26) scores them on
    every row, abstentions included.

    Choice: an abstention gets confidence 0, GRAB-RAG's convention for a rule-made
    abstention (P3/P4), so GRAB-RAG's AURC/ECE treat every policy's abstentions alike.
    """
    b = np.asarray(b, dtype=float)
    if len(frame) != b.size:
        raise ValueError(f"{len(frame)} claims but {b.size} fused masses")
    chosen = guarded_route(frame, b, u, tau1, tau2, passage_claims)
    top = _top_claim(frame, b)
    scored = {"fused_confidence": evid_confidence(b), "selected_claim": selected_claim(frame, b)}
    if chosen == "direct" and top is not None:
        return {
            "route": chosen,
            "decision": "answer",
            "answer": frame[top],
            "confidence": evid_confidence(b),
            **scored,
        }
    # A direct route without a supported claim cannot happen (u < tau1 <= 1 needs
    # singleton mass); it would abstain rather than answer an arbitrary claim.
    return {"route": chosen, "decision": "abstain", "answer": "", "confidence": 0.0, **scored}


def _no_routing(
    frame: Sequence[str], b: np.ndarray, passage_claims: int | None = None
) -> dict[str, Any]:
    """The "without dynamic routing" ablation: always answer the highest-mass claim.

    Choice: with no supported claim (empty frame, or all fused singleton mass zero after
    a total Dempster conflict) there is nothing to answer, so it abstains; a top claim
    that only the closed-book source supports (EVID+CB) is not answered either."""
    top = _top_claim(frame, b)
    scored = {"fused_confidence": evid_confidence(b), "selected_claim": selected_claim(frame, b)}
    if top is None or (passage_claims is not None and top >= passage_claims):
        return {
            "route": "abstain",
            "decision": "abstain",
            "answer": "",
            "confidence": 0.0,
            **scored,
        }
    return {
        "route": "direct",
        "decision": "answer",
        "answer": frame[top],
        "confidence": evid_confidence(b),
        **scored,
    }


# The default grids of the sweep (config: evidential.lambda_grid / tau_grid); the
# configured lambda and (tau1, tau2) are added when they are not on them.
SWEEP_LAMS: tuple[float | None, ...] = (None, 0.0, 0.3, 0.6, 1.0)
SWEEP_TAUS: tuple[tuple[float, float], ...] = ((0.2, 0.5), (0.35, 0.65), (0.5, 0.8))


def rule_name(lam: float | None) -> str | float:
    """The sweep's ``rule`` column: "dempster" for lam None, else the lambda value."""
    return "dempster" if lam is None else float(lam)


def sweep_grid(
    lams: Sequence[float | str | None],
    taus: Sequence[Sequence[float]],
    lam: float,
    tau1: float,
    tau2: float,
) -> tuple[list[float | None], list[tuple[float, float]]]:
    """The sweep's lambda and (tau1, tau2) grids from config: "dempster" (or None) is the
    normalised Dempster rule; the configured ``lam`` and ``(tau1, tau2)`` are appended
    when the grids lack them, so the configured setting always has its rows."""
    grid: list[float | None] = []
    for value in lams:
        entry = None if value in (None, "dempster") else float(value)
        if entry is not None and not 0.0 <= entry <= 1.0:
            raise ValueError(f"lambda grid values must be in [0, 1] or 'dempster', got {value!r}")
        if entry not in grid:
            grid.append(entry)
    if float(lam) not in grid:
        grid.append(float(lam))
    pairs: list[tuple[float, float]] = []
    for pair in taus:
        if len(pair) != 2:
            raise ValueError(f"tau grid entries are (tau1, tau2) pairs, got {pair!r}")
        a, b = float(pair[0]), float(pair[1])
        _check_taus(a, b)
        if (a, b) not in pairs:
            pairs.append((a, b))
    if (float(tau1), float(tau2)) not in pairs:
        pairs.append((float(tau1), float(tau2)))
    return grid, pairs


def sweep(
    evaluations_by_qid: Mapping[str, Sequence[Evaluation]],
    lams: Sequence[float | None] = SWEEP_LAMS,
    taus: Sequence[tuple[float, float]] = SWEEP_TAUS,
    extra_sources_by_qid: Mapping[str, Iterable[Evaluation | None]] | None = None,
    ablation_lam: float = LAMBDA,
    merge_f1: float = 0.8,
    groups_by_qid: Mapping[str, Sequence[int]] | None = None,
) -> list[dict[str, Any]]:
    """Decision rows of the lambda x tau grid (Tables 9-10) and the ablations (Table 12),
    from stored evaluations only (each question's in fold order).

    Per question: one ``variant="evid"`` row per (rule, tau pair) with rule "dempster"
    (lam None) or the lambda value; one ``variant="no_fusion"`` row per tau pair (rule
    "average": :func:`average_evidence` of the sources' evidence vectors instead of
    fusion); one ``variant="no_routing"`` row (fused at ``ablation_lam``, always answers;
    tau1/tau2 None). Every row has qid, variant, rule, tau1, tau2, route, decision,
    answer, confidence, fused_confidence, selected_claim, u_global, n_claims and
    mean_conflict (Eq. 14, the same for every row of a question).
    ``extra_sources_by_qid`` adds sources per question (EVID+CB: routed with
    :func:`guarded_route`); ``merge_f1`` is the claim-alignment threshold
    (:func:`align_claims`); ``groups_by_qid`` the sizes of each question's fold groups
    (:func:`fuse`).
    """
    for lam in lams:
        if lam is not None and not 0.0 <= lam <= 1.0:
            raise ValueError(f"lam must be None or in [0, 1], got {lam!r}")
    for tau1, tau2 in taus:
        _check_taus(tau1, tau2)
    rows: list[dict[str, Any]] = []
    for qid, evaluations in evaluations_by_qid.items():
        extra = list((extra_sources_by_qid or {}).get(qid, ()))
        frame, vectors = question_evidence(evaluations, extra, merge_f1)
        masses = [from_evidence(v) for v in vectors]
        supported = passage_claim_count(evaluations, merge_f1) if extra else None
        shared = {"n_claims": len(frame), "mean_conflict": mean_pairwise_conflict(masses)}
        groups = (groups_by_qid or {}).get(qid)
        for lam in lams:
            b, u = fuse(masses, lam, groups)
            for tau1, tau2 in taus:
                decision = decide(frame, b, u, tau1, tau2, supported)
                rows.append(
                    _sweep_row(qid, "evid", rule_name(lam), tau1, tau2, decision, u, shared)
                )
        b, u = average_evidence(vectors)
        for tau1, tau2 in taus:
            decision = decide(frame, b, u, tau1, tau2, supported)
            rows.append(_sweep_row(qid, "no_fusion", "average", tau1, tau2, decision, u, shared))
        b, u = fuse(masses, ablation_lam, groups)
        decision = _no_routing(frame, b, supported)
        rows.append(
            _sweep_row(qid, "no_routing", float(ablation_lam), None, None, decision, u, shared)
        )
    return rows


def _sweep_row(
    qid: str,
    variant: str,
    rule: str | float,
    tau1: float | None,
    tau2: float | None,
    decision: Mapping[str, Any],
    u_global: float,
    shared: Mapping[str, Any],
) -> dict[str, Any]:
    return {
        "qid": qid,
        "variant": variant,
        "rule": rule,
        "tau1": tau1,
        "tau2": tau2,
        "route": decision["route"],
        "decision": decision["decision"],
        "answer": decision["answer"],
        "confidence": decision["confidence"],
        "fused_confidence": decision["fused_confidence"],
        "selected_claim": decision["selected_claim"],
        "u_global": u_global,
        **shared,
    }
