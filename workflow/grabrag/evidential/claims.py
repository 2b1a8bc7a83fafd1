"""Claim alignment (EvidentialRAG paper, section 3.3): the evaluator's answer values
merged into the frame of distinguishable candidate answers (numbers and dates by value,
otherwise by normalised text, token F1 or whole-word containment, never across different
numbers or dates), each source's evidence vector and mass function over that frame, and
the closed-book answer as one more evidence source (EVID+CB, ours).
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

import numpy as np

from grabrag.core.text import normalize_answer
from grabrag.evidential.evaluator import EVAL_OK, MAX_EVIDENCE, Evaluation
from grabrag.evidential.fusion import Mass, from_evidence
from grabrag.scoring.answers import token_f1

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
    (:func:`grabrag.scoring.answers.classify_qc_answer`)."""
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
    evaluations in the order given (the fold order,
    :func:`grabrag.evidential.evaluator.fold_order`), then ``extra_sources`` (the
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
    """As :func:`question_masses`, but the evidence vectors (for
    :func:`grabrag.evidential.fusion.average_evidence`)."""
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
    when no passage gives evidence; :func:`grabrag.evidential.routing.guarded_route`
    keeps a claim that only it supports from the direct route).

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
