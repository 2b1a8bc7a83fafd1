"""Scoring one answer and one decision row: SQuAD exact match and token F1 (the metric
every stage shares), whether a row answered, abstained or failed to parse, whether it is
correct behaviour for AURC/ECE, and the category of an answered QC row (GRAB-RAG section 3.5).

Conventions shared by the row-level metrics here and the rates over rows built on them
(:mod:`grabrag.scoring.abstention`, :mod:`grabrag.scoring.calibration`, and
grabrag.evaluation, which computes the same numbers vectorised for the bootstrap):

* A decision row is {"qid", "decision", "answer", "confidence", ...} as written by
  grabrag.policies.paper. decision is "answer", "abstain", or None for an output that could
  not be parsed.
* An unparseable row (decision None) is neither an answer nor an abstention: it does
  not count as answered (Ans, HwSA), does not count as abstained (FAC counts
  1[d = abstain] literally, Eq. 2), scores 0 EM and 0 F1, and is left out of AURC and
  ECE (it has no confidence; inventing one would enter the calibration metrics as a
  real score). The parse_failed share of each cell is reported on its own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from grabrag.core.conditions import SHOULD_ABSTAIN, SHOULD_ANSWER
from grabrag.core.decisions import ABSTAIN, ANSWER
from grabrag.core.text import normalize_answer

# Which conditions should be answered and which abstained on: grabrag.core.conditions.

# QC answer categories (section 3.5, Table 3, Table 9).
OVERRIDE, ECHO, HALLUCINATION = "override", "echo", "hallucination"
QC_CATEGORIES = (ECHO, OVERRIDE, HALLUCINATION)


def exact_match(prediction: str | None, answers: Sequence[str]) -> float:
    """1.0 when the normalised prediction equals a normalised alias; abstention (None) scores 0."""
    if prediction is None:
        return 0.0
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(a) for a in answers))


def _f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(pred_tokens)
    recall = same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str | None, answers: Sequence[str]) -> float:
    """Maximum SQuAD token F1 over aliases; abstention (None) scores 0."""
    if prediction is None:
        return 0.0
    pred_tokens = normalize_answer(prediction).split()
    best = 0.0
    for answer in answers:
        gold_tokens = normalize_answer(answer).split()
        if not pred_tokens and not gold_tokens:
            best = max(best, 1.0)
        elif pred_tokens and gold_tokens:
            best = max(best, _f1(pred_tokens, gold_tokens))
    return best


# --- row-level scoring ---------------------------------------------------------------


def answered(row: Mapping[str, Any]) -> bool:
    return row.get("decision") == ANSWER


def abstained(row: Mapping[str, Any]) -> bool:
    return row.get("decision") == ABSTAIN


def parse_failed(row: Mapping[str, Any]) -> bool:
    """Neither an answer nor an abstention (the policies' ``parse_failed`` rows)."""
    return row.get("decision") not in (ANSWER, ABSTAIN)


def row_em(row: Mapping[str, Any], answers: Sequence[str]) -> float:
    """EM of a decision row; an abstention or an unparseable row scores 0."""
    return exact_match(row.get("answer"), answers) if answered(row) else 0.0


def row_f1(row: Mapping[str, Any], answers: Sequence[str]) -> float:
    """Token F1 of a decision row; an abstention or an unparseable row scores 0."""
    return token_f1(row.get("answer"), answers) if answered(row) else 0.0


def row_correct(row: Mapping[str, Any], answers: Sequence[str], condition: str) -> int | None:
    """Correct behaviour for AURC and ECE (Appendix A): answering correctly (EM) at
    Q100/Q50, abstaining at Q0/QC/QX. None for a row left out of AURC/ECE: unparseable, or
    without a numeric confidence."""
    if parse_failed(row) or row.get("confidence") is None:
        return None
    if condition in SHOULD_ANSWER:
        return int(row_em(row, answers) == 1.0)
    if condition in SHOULD_ABSTAIN:
        return int(abstained(row))
    raise ValueError(
        f"unknown condition {condition!r}; expected one of "
        f"{', '.join(SHOULD_ANSWER + SHOULD_ABSTAIN)}"
    )


def _contains(text: str, targets: Iterable[str]) -> bool:
    """Normalised word-boundary containment (as grabrag.core.text.contains_alias)."""
    haystack = f" {normalize_answer(text)} "
    return any((needle := normalize_answer(t)) and f" {needle} " in haystack for t in targets if t)


def _matches(text: str, targets: Iterable[str]) -> bool:
    """Normalised match: equal after SQuAD normalisation (EM) to one of ``targets``."""
    answer = normalize_answer(text)
    return bool(answer) and any(answer == normalize_answer(t) for t in targets if t)


def classify_qc_answer(
    answer: str | None, gold: Sequence[str], planted: Sequence[str], lenient: bool = False
) -> str:
    """Category of an answered QC row (section 3.5): ``override``, ``echo`` or
    ``hallucination``.

    The paper's rule (default): the answer *matches* a target when it equals it after
    SQuAD normalisation (lowercase, no punctuation, no articles): a correct override
    matches a gold alias, an echo matches the planted replacement (the QC row's
    ``replacement`` or ``replacement_entity``), anything else is a hallucination.

    ``lenient=True`` is the containment split reported beside it (the ``*_lenient``
    metrics): a target matches when it occurs in the answer on word boundaries, so
    "in 1949" echoes the planted "1949" and "Miriam Margolyes (actress)" echoes "Miriam
    Margolyes", but "Margolyes" alone does not (the answer must hold the whole target).

    Both: gold first (correct override), then planted (echo), as the paper orders them;
    an empty answer is a hallucination.
    """
    text = answer or ""
    match = _contains if lenient else _matches
    if match(text, gold):
        return OVERRIDE
    if match(text, planted):
        return ECHO
    return HALLUCINATION


def planted_strings(qc_context: Mapping[str, Any]) -> list[str]:
    """The planted strings of a QC context row: ``replacement`` and ``replacement_entity``."""
    return [
        s
        for s in dict.fromkeys(
            [qc_context.get("replacement"), qc_context.get("replacement_entity")]
        )
        if s
    ]
