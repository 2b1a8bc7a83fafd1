"""Where the answer stands in a gold passage, and the span rules of the QC swap pipeline.

The text side of GRAB-RAG section 3.3 and Appendix C that needs neither the entity pool
nor a random draw: locating the answer span (word boundaries, the outer-marks retry),
the pre-swap skips (a "(born ...)" parenthetical, a possessive answer token), the
post-swap filters a replacement must pass, and the one-pass global substitution with its
a/an correction and the adjacent-duplicate check. The tiers (``swap_tiers.py``) and the
per-question driver (``swaps.py``) build on these. Where the paper is silent, the choice
made is said in a comment marked "Choice:".
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from grabrag.core.text import normalize_answer, words

# --- the paper's constants --------------------------------------------------------------------

YEAR_MIN, YEAR_MAX = 1000, 2099
POSSESSIVE_MIN_CHARS = 6
MAX_REPLACEMENT_WORD_RATIO = 3
YEAR_TYPE = "YEAR"
NUMBER_TYPE = "NUMBER"

# --- word lists of the post-swap filters and skips --------------------------------------------

# Post-swap "educational-term type matches": the set of these term types must agree.
EDUCATIONAL_TERMS = {
    "university": "university",
    "universities": "university",
    "college": "college",
    "colleges": "college",
    "school": "school",
    "schools": "school",
    "academy": "academy",
    "institute": "institute",
    "polytechnic": "polytechnic",
    "seminary": "seminary",
    "conservatory": "conservatory",
    "conservatoire": "conservatory",
}

# Post-swap "institutional suffix consistency": the last word's suffix class.
INSTITUTIONAL_SUFFIXES = {
    **dict.fromkeys(
        "inc incorporated corp corporation company co ltd limited llc plc gmbh ag group "
        "holdings enterprises industries".split(),
        "corporate",
    ),
    "party": "party",
    **dict.fromkeys(
        "church cathedral chapel abbey basilica temple mosque synagogue".split(), "worship"
    ),
    **dict.fromkeys(["hospital", "clinic"], "hospital"),
    **dict.fromkeys(["museum", "gallery"], "museum"),
    "bank": "bank",
    **dict.fromkeys(["foundation", "trust"], "foundation"),
    **dict.fromkeys(
        "association society federation union league council committee commission".split(),
        "association",
    ),
    **dict.fromkeys("ministry department agency bureau administration".split(), "government"),
    "club": "club",
}

# Tokens ignored when testing whether a born parenthetical shares a token with the answer.
# Choice: function words would make "(born in the ...)" overlap any answer with "in".
STOPWORDS = frozenset("a an the of in on at to for by and or as is was de la le von van".split())

YES_NO = frozenset({"yes", "no"})

# --- small text helpers -----------------------------------------------------------------------

_BORN_PAREN = re.compile(r"\(\s*born\b([^()]*)\)", re.IGNORECASE)
_POSSESSIVE = re.compile(r"(?:['’]s|s['’])(?!\w)")
_ACRONYM = re.compile(r"(?:[A-Z]\.?){2,}")
_OUTER_PAIRS = {'"': '"', "'": "'", "“": "”", "‘": "’", "(": ")", "[": "]", "{": "}", "«": "»"}
_TRAILING_PUNCT = ".,;:!?"
_YEAR = re.compile(r"(?<!\d)(\d{4})(?!\d)")
_NUMERIC = re.compile(r"[1-9]\d{1,4}|[1-9]\d?,\d{3}")


def word_count(text: str) -> int:
    return len(words(text))


def _tokens(text: str) -> set[str]:
    return set(normalize_answer(text).split())


def token_subset(a: str, b: str) -> bool:
    """True when the shorter normalised token set is a subset of the longer one.

    An empty token set (a bare article, punctuation) counts as a subset of anything.
    """
    small, big = sorted((_tokens(a), _tokens(b)), key=len)
    return small <= big


def boundary_pattern(form: str) -> str:
    """The regex of ``form`` standing on word boundaries (no word character either side)."""
    return r"(?<!\w)" + re.escape(form) + r"(?!\w)"


def strip_outer(text: str) -> str:
    """Strip outer quotation marks, brackets and parentheses (repeatedly), then spaces."""
    text = text.strip()
    while len(text) >= 2 and _OUTER_PAIRS.get(text[0]) == text[-1]:
        text = text[1:-1].strip()
    return text


def _is_year(text: str) -> bool:
    return bool(re.fullmatch(r"\d{4}", text)) and YEAR_MIN <= int(text) <= YEAR_MAX


def _embedded_years(text: str) -> list[re.Match[str]]:
    return [m for m in _YEAR.finditer(text) if YEAR_MIN <= int(m.group(1)) <= YEAR_MAX]


def _is_numeric(text: str) -> bool:
    """A 2-5 digit integer. Choice: thousands separators ("10,000") count as the same number;
    a leading zero ("007") marks an identifier, not a quantity, so it does not."""
    return bool(_NUMERIC.fullmatch(text))


def value_type(text: str) -> str | None:
    """YEAR or NUMBER for the strings tiers 1/1b/2 handle, else None."""
    text = strip_outer(text).rstrip(_TRAILING_PUNCT)
    if _is_year(text) or _embedded_years(text):
        return YEAR_TYPE
    if _is_numeric(text):
        return NUMBER_TYPE
    return None


# --- answer location and pre-swap skips -------------------------------------------------------


@dataclass
class Located:
    passage_index: int
    alias: str  # the alias whose form matched
    form: str  # the form searched (the alias, or the alias with outer marks stripped)
    start: int  # the core span (leading article and trailing punctuation left outside)
    end: int
    text: str  # the passage's own surface form of the core span
    # Where a definite article directly before the core starts ("the Dutch Empire"), else
    # ``start``; tier 3 swaps it with the core (see swap_tiers._tier_ner).
    lead: int = -1

    def __post_init__(self) -> None:
        if self.lead < 0:
            self.lead = self.start

    def with_article(self, passage: str) -> str:
        """The core with the definite article before it (the core alone when none)."""
        return passage[self.lead : self.end]


def _aliases(question: dict[str, Any]) -> list[str]:
    """Answers first (primary = answers[0]), then the rest of all_answers; no yes/no."""
    out = list(question.get("answers") or []) + list(question.get("all_answers") or [])
    return [a for a in dict.fromkeys(a.strip() for a in out) if a and a.lower() not in YES_NO]


def _core(passage: str, start: int, end: int) -> tuple[int, int]:
    """Leave a leading article, outer marks and trailing punctuation outside the swapped span.

    Choice: the paper's spans are entity spans; "the Pittsburgh Steelers" is swapped as
    "Pittsburgh Steelers" with "the" kept in the passage.
    """
    while True:
        before = (start, end)
        while start < end and passage[start].isspace():
            start += 1
        while end > start and (passage[end - 1].isspace() or passage[end - 1] in _TRAILING_PUNCT):
            end -= 1
        if end - start >= 2 and _OUTER_PAIRS.get(passage[start]) == passage[end - 1]:
            start, end = start + 1, end - 1
        match = re.match(r"(?:the|a|an)\s+(?=\S)", passage[start:end], re.IGNORECASE)
        if match and end - start > match.end():
            start += match.end()
        if (start, end) == before:
            return start, end


_THE_BEFORE = re.compile(r"(?<!\w)the\s+$", re.IGNORECASE)


def _article_start(passage: str, core_start: int) -> int:
    """Where a definite article directly before the answer core starts, else ``core_start``."""
    match = _THE_BEFORE.search(passage, max(0, core_start - 8), core_start)
    return match.start() if match else core_start


def locate_answer(question: dict[str, Any]) -> Located | None:
    """First alias found on word boundaries in a gold passage.

    Aliases are tried in order (the primary answer first); each in its own form, then
    (the paper's retry) with outer quotation marks, brackets and parentheses stripped.
    Gold passages are searched in order. Choice: an exact-case match is preferred, then
    case is ignored (NQ answers are often lower-case where the passage capitalises them),
    so the answer "US" finds "the US" before the pronoun "us".
    """
    passages = [p["text"] for p in question.get("gold_passages") or []]
    for alias in _aliases(question):
        forms = list(dict.fromkeys([alias, strip_outer(alias)]))
        for form in forms:
            if not form:
                continue
            for flags in (0, re.IGNORECASE):
                pattern = re.compile(boundary_pattern(form), flags)
                for k, text in enumerate(passages):
                    match = pattern.search(text)
                    if match:
                        start, end = _core(text, match.start(), match.end())
                        if start < end:
                            lead = _article_start(text, start)
                            return Located(k, alias, form, start, end, text[start:end], lead)
    return None


def born_parenthetical_overlap(passage: str, aliases: Iterable[str]) -> str | None:
    """The "(born ...)" parenthetical sharing a content token with the answer, if any."""
    answer_tokens = set()
    for alias in aliases:
        answer_tokens |= _tokens(alias)
    answer_tokens -= STOPWORDS
    for match in _BORN_PAREN.finditer(passage):
        inside = _tokens(match.group(1)) - STOPWORDS - {"born"}
        if inside & answer_tokens:
            return match.group(0)
    return None


def possessive_answer_token(passage: str, aliases: Iterable[str]) -> str | None:
    """An answer token of >= 6 characters found as "token's" in the passage, if any.

    Choice: the curly apostrophe and the tokenised form "token 's" (BIG-bench NQ text)
    count as well.
    """
    seen: set[str] = set()
    for alias in aliases:
        for token in re.findall(r"\w+", alias):
            if len(token) < POSSESSIVE_MIN_CHARS or token.lower() in seen:
                continue
            seen.add(token.lower())
            pattern = r"(?<!\w)" + re.escape(token) + r"\s?['’]s(?!\w)"
            match = re.search(pattern, passage, re.IGNORECASE)
            if match:
                return match.group(0)
    return None


# --- post-swap filters ------------------------------------------------------------------------


def _educational_types(text: str) -> set[str]:
    return {EDUCATIONAL_TERMS[w] for w in _tokens(text) if w in EDUCATIONAL_TERMS}


def _suffix_class(text: str) -> str | None:
    ws = words(text)
    return INSTITUTIONAL_SUFFIXES.get(ws[-1].lower().strip(".,")) if ws else None


def post_swap_reason(original: str, replacement: str) -> str | None:
    """Appendix C post-swap filters; None when all pass."""
    if token_subset(original, replacement):
        return "post_token_subset"
    if word_count(replacement) > MAX_REPLACEMENT_WORD_RATIO * max(1, word_count(original)):
        return "post_too_long"
    if _POSSESSIVE.search(replacement) and not _POSSESSIVE.search(original):
        return "post_possessive_injection"
    if original[:1].isupper() and not replacement[:1].isupper():
        return "post_case_mismatch"
    if len(replacement.split()) == 1 and _ACRONYM.fullmatch(replacement):
        return "post_acronym"
    if _educational_types(original) != _educational_types(replacement):
        return "post_educational_mismatch"
    # Choice: consistency is one-directional, no injected or different suffix class.
    # Table 5 shows "National Broadcasting Company" -> "Pakistan Navy" accepted, so an
    # original's suffix may be swapped for a name without one.
    suffix = _suffix_class(replacement)
    if suffix is not None and suffix != _suffix_class(original):
        return "post_institutional_suffix_mismatch"
    return None


# --- applying a swap --------------------------------------------------------------------------


def _fix_article(before: str, substitute: str) -> tuple[str, str, int]:
    """a/an before the substitute, corrected for its initial letter; no doubled article.

    Returns (before, substitute, fixes). Choice: only letters decide a/an (digits are left
    as they are); a substitute starting with an article loses it after an article.
    """
    fixes = 0
    if re.search(r"(?<!\w)(?:the|a|an)\s+$", before, re.IGNORECASE):
        trimmed = re.sub(r"^(?:the|a|an)\s+", "", substitute, flags=re.IGNORECASE)
        if trimmed != substitute and trimmed:
            substitute, fixes = trimmed, fixes + 1
    match = re.search(r"(?<!\w)(a|an)(\s+)$", before, re.IGNORECASE)
    if match and substitute[:1].isalpha():
        wanted = "an" if substitute[0].lower() in "aeiou" else "a"
        article = match.group(1)
        if article.lower() != wanted:
            if article.isupper() and len(article) > 1:
                wanted = wanted.upper()
            elif article[0].isupper():
                wanted = wanted.capitalize()
            before = before[: match.start(1)] + wanted + match.group(2)
            fixes += 1
    return before, substitute, fixes


def substitute_all(text: str, mapping: dict[str, str]) -> tuple[str, int, int, set[str]]:
    """Replace every word-boundary, case-insensitive mention of each key in one pass.

    Longer forms win over shorter ones; the inserted text is never matched again.
    Returns (text, mentions replaced, article fixes, keys found).
    """
    forms = sorted((k for k in mapping if k), key=len, reverse=True)
    if not forms:
        return text, 0, 0, set()
    lookup = {k.casefold(): v for k, v in mapping.items()}
    pattern = re.compile("|".join(boundary_pattern(f) for f in forms), re.IGNORECASE)
    out = ""
    last = 0
    count = fixes = 0
    found: set[str] = set()
    for match in pattern.finditer(text):
        key = match.group(0).casefold()
        if key not in lookup:  # case folding and IGNORECASE disagree (rare characters)
            key = next(
                f.casefold()
                for f in forms
                if re.fullmatch(boundary_pattern(f), match.group(0), re.IGNORECASE)
            )
        found.add(key)
        before, substitute, fixed = _fix_article(out + text[last : match.start()], lookup[key])
        out = before + substitute
        last = match.end()
        count += 1
        fixes += fixed
    return out + text[last:], count, fixes, found


_ADJACENT_SEPARATORS = r"[\s,;:()\[\]/\-–—\"'“”‘’]{1,4}"


def adjacent_duplicate(text: str, replacement: str) -> bool:
    """The replacement twice in adjacent positions: "X X", "X (X)", "X, X".

    Choice: a sentence end between the two ("X. X retired") is not adjacency; that is
    how a scrubbed surname reads after a full name.
    """
    if not replacement.strip():
        return False
    r = re.escape(replacement)
    pattern = rf"(?<!\w){r}{_ADJACENT_SEPARATORS}{r}(?!\w)"
    return bool(re.search(pattern, text, re.IGNORECASE))


def occurrences(text: str, form: str) -> list[tuple[int, int]]:
    """(start, end) of every case-insensitive mention of ``form`` on word boundaries."""
    return [m.span() for m in re.finditer(boundary_pattern(form), text, re.IGNORECASE)]
