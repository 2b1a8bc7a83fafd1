"""Answer scoring with SQuAD normalisation (the metric every stage shares)."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCT = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD v1.1 normalisation: lowercase, drop punctuation and articles, collapse spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


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


def answer_rate(rows: Sequence[dict], qids: set[str] | None = None) -> tuple[int, float]:
    """(n, share of rows that answered) over ``rows``, or over those whose qid is in ``qids``.

    On a should-abstain condition (Q0, QC) this is HwSA: any answer counts, even a
    correct one. A row whose output could not be parsed did not answer.
    """
    chosen = [r for r in rows if qids is None or r["qid"] in qids]
    if not chosen:
        return 0, float("nan")
    return len(chosen), sum(r.get("decision") == "answer" for r in chosen) / len(chosen)
