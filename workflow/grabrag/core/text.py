"""SQuAD answer normalisation, the alias matching shared by hard-negative mining and the
swaps' leakage checks, and the word splits of retrieval and the swap filters.

The metrics import the normalisation from here, not the other way round, so editing a
metric reruns the metrics, never the data, retrieval or swap stages."""

from __future__ import annotations

import re
import string
from collections.abc import Iterable

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCT = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD v1.1 normalisation: lowercase, drop punctuation and articles, collapse spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def contains_alias(text: str, aliases: Iterable[str]) -> bool:
    """True when any alias occurs in ``text`` on word boundaries, after SQuAD normalisation.

    Both sides are normalised (case, punctuation, articles, whitespace), so "the U.S." in
    a passage matches the alias "US", and "Paris" does not match inside "Parisian".
    """
    haystack = f" {normalize_answer(text)} "
    for alias in aliases:
        needle = normalize_answer(alias)
        if needle and f" {needle} " in haystack:
            return True
    return False


_WORD = re.compile(r"\w+", re.UNICODE)


def word_tokens(text: str) -> list[str]:
    """Lower-cased word tokens: the BM25 tokenisation and the short-answer length test."""
    return _WORD.findall(text.lower())


def words(text: str) -> list[str]:
    """Whitespace words that hold a letter or digit (a lone '-' of tokenised text is no word)."""
    return [w for w in text.split() if any(ch.isalnum() for ch in w)]
