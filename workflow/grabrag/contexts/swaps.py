"""The QC (misleading context) entity-swap pipeline: GRAB-RAG section 3.3 and Appendix C.

For each question the pipeline finds the answer in a gold passage and replaces it with a
plausible wrong span, or records why no clean swap exists. Every rule below is the
paper's, in its order; where the paper is silent, the choice made is said in a comment
marked "Choice:".

1. Entity pool (``entity_pool.py``): NER over all gold passages; spans pass the
   span-validity filters (all types) and the type-specific quality filters, then NORP
   entries leave GPE and LOC.
2. Answer-span location: word-boundary regex; retry after stripping outer quotes,
   brackets and parentheses.
3. Pre-swap skips: a "(born ...)" parenthetical sharing a token with the answer, or an
   answer token of >= 6 characters in possessive form ("token's").
4. Tiers, in order, first accepted swap wins: 1 year, 1b embedded year, 2 numeric,
   3 NER replacement (NORP first for demonym adjectives), 4 sub-entity.
5. Replacement selection, post-swap filters, global replacement of every mention, full
   substitution of the other aliases, a/an correction, alias scrubbing, the adjacent-
   duplicate discard and the leakage check. The pool's candidates are tried in seeded
   order until one passes every filter (a question is dropped only when no clean swap is
   possible); each record says how many were tried. A definite article before an answer
   that is a whole entity goes with the swapped span (Table 5).

All randomness of question i (0-based position) comes from ``random.Random(seed + i)``.
The eligibility summary and the manual audit of the swaps are ``swap_audit.py``; the QC
and QX context rows built from them are ``swap_contexts.py``.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from grabrag.contexts.entity_pool import (
    EntityPool,
    NerCache,
    as_ner_cache,
    build_entity_pool,
    gold_passage_texts,
)
from grabrag.contexts.ner import NerBackend
from grabrag.core.progress import Progress
from grabrag.core.text import contains_alias, normalize_answer, words

# --- the paper's constants --------------------------------------------------------------------

TIERS = ("1", "1b", "2", "3", "4")
YEAR_MIN, YEAR_MAX = 1000, 2099
YEAR_DELTAS = (-30, -20, -10, 10, 20, 30)
NUMERIC_FRACTION = (0.1, 0.3)  # delta = max(1, round(n * U[0.1, 0.3])), random sign
NUMERIC_MIN = 1
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
    # ``start``; tier 3 swaps it with the core (see _tier_ner).
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


_LEADING_ARTICLE = re.compile(r"(?:the|a|an)\s+(?=\S)", re.IGNORECASE)
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


# --- replacement selection and post-swap filters ----------------------------------------------


def _alias_hit(candidate: str, aliases: Sequence[str]) -> bool:
    return contains_alias(candidate, aliases)


def _valid_candidates(
    original: str, candidates: Sequence[str], aliases: Sequence[str]
) -> list[list[str]]:
    """The valid candidates in preference groups (each sorted; empty groups left out).

    Valid: differs from the original after normalisation and is no token-subset alias of
    it. Choice: a candidate holding a gold alias is invalid too (it could only leak).
    Preference: within max(2, wc_orig) words of the original (|wc - wc_orig| <=
    max(2, wc_orig), our reading of "within N words of"), then, for originals of >= 3
    words, multi-word candidates. Group 1 is the most preferred; the less preferred follow
    as fallbacks.
    """
    norm = normalize_answer(original)
    valid = sorted(
        c
        for c in candidates
        if normalize_answer(c) != norm
        and not token_subset(c, original)
        and not _alias_hit(c, aliases)
    )
    wc = word_count(original)
    window = max(2, wc)
    near = [c for c in valid if abs(word_count(c) - wc) <= window]
    far = [c for c in valid if abs(word_count(c) - wc) > window]
    if wc >= 3:
        groups = [[c for c in near if word_count(c) >= 2], [c for c in near if word_count(c) < 2]]
    else:
        groups = [near]
    return [g for g in [*groups, far] if g]


def replacement_candidates(
    original: str, candidates: Sequence[str], rng: random.Random, aliases: Sequence[str] = ()
) -> Iterator[str]:
    """Every valid candidate once, in seeded order: the most preferred group first.

    The first candidate is ``rng.choice`` of the most preferred group (one draw, the
    same as :func:`select_replacement`); the rest of that group follows in a seeded
    shuffle, then each less preferred group shuffled. The shuffles are drawn only when
    a caller asks past the first candidate, so a swap whose first candidate is accepted
    consumes the random state exactly as one draw does.
    """
    groups = _valid_candidates(original, candidates, aliases)
    if not groups:
        return
    first = rng.choice(groups[0])
    yield first
    for k, group in enumerate(groups):
        rest = [c for c in group if c != first] if k == 0 else list(group)
        rng.shuffle(rest)
        yield from rest


def select_replacement(
    original: str, candidates: Sequence[str], rng: random.Random, aliases: Sequence[str] = ()
) -> str | None:
    """One seeded choice among the most preferred valid candidates, or None when none is
    valid (the first of :func:`replacement_candidates`)."""
    return next(replacement_candidates(original, candidates, rng, aliases), None)


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


@dataclass
class Plan:
    """What a tier decided: the swapped string, its substitute, and how aliases change."""

    tier: str
    entity_type: str
    source_type: str
    original: str  # the string replaced globally (answer core, or sub-entity in tier 4)
    replacement_entity: str  # what replaces it
    planted: str  # what now stands where the answer core was
    alias_transform: Callable[[str], str]
    # Tier 3: a definite article before the answer goes with the swapped span (Table 5).
    with_article: bool = False


def _replace_inside(alias: str, source: str, target: str) -> str | None:
    new = re.sub(boundary_pattern(source), lambda _: target, alias, flags=re.IGNORECASE)
    return new if new != alias else None


# --- tiers ------------------------------------------------------------------------------------


class TierFailure(Exception):
    """A tier did not produce an accepted swap; ``reason`` says why, ``depth`` how far it got."""

    def __init__(self, reason: str, depth: int, detail: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.depth = depth
        self.detail = detail


NOT_APPLICABLE, NO_CANDIDATE, POST_FILTER, ACCEPTANCE = 0, 1, 2, 3


def _shift_year(year: int, delta: int) -> int:
    return min(YEAR_MAX, max(YEAR_MIN, year + delta))


def _tier_year(core: str, rng: random.Random) -> Plan:
    if not _is_year(core):
        raise TierFailure("not_a_year", NOT_APPLICABLE)
    delta = rng.choice(YEAR_DELTAS)
    new = str(_shift_year(int(core), delta))
    if new == core:
        raise TierFailure("year_unchanged_after_clamp", NO_CANDIDATE, f"{core}{delta:+d}")

    def transform(alias: str) -> str:
        return _replace_inside(alias, core, new) or new

    return Plan("1", YEAR_TYPE, YEAR_TYPE, core, new, new, transform)


def _shift_years_in(text: str, delta: int) -> str:
    def shift(match: re.Match[str]) -> str:
        year = int(match.group(1))
        if YEAR_MIN <= year <= YEAR_MAX:
            return str(_shift_year(year, delta))
        return match.group(0)

    return _YEAR.sub(shift, text)


def _tier_embedded_year(core: str, rng: random.Random) -> Plan:
    if _is_year(core) or not _embedded_years(core):
        raise TierFailure("no_embedded_year", NOT_APPLICABLE)
    delta = rng.choice(YEAR_DELTAS)
    # Choice: every embedded year moves by the same delta, so a range stays a range.
    new = _shift_years_in(core, delta)
    if new == core:
        raise TierFailure("year_unchanged_after_clamp", NO_CANDIDATE, f"{core} {delta:+d}")

    def transform(alias: str) -> str:
        shifted = _shift_years_in(alias, delta)
        return shifted if shifted != alias else new

    return Plan("1b", YEAR_TYPE, YEAR_TYPE, core, new, new, transform)


def _tier_numeric(core: str, rng: random.Random) -> Plan:
    if not _is_numeric(core):
        raise TierFailure("not_numeric", NOT_APPLICABLE)
    if _is_year(core):
        # Choice: a year answer is tier 1's. When its one year shift fails, a 10-30 %
        # numeric shift would plant an implausible year far outside tier 1's range
        # (1997 -> 2299), so the question goes on to the paper's next tier (3).
        raise TierFailure("year_not_numeric", NOT_APPLICABLE)
    n = int(core.replace(",", ""))
    u = rng.uniform(*NUMERIC_FRACTION)
    delta = max(1, math.floor(n * u + 0.5))  # round half up: the paper's nearest-integer
    sign = rng.choice((-1, 1))
    value = max(NUMERIC_MIN, n + sign * delta)
    new = f"{value:,}" if "," in core else str(value)
    if new == core:
        raise TierFailure("number_unchanged_after_clamp", NO_CANDIDATE, core)

    def transform(alias: str) -> str:
        return _replace_inside(alias, core, new) or new

    return Plan("2", NUMBER_TYPE, NUMBER_TYPE, core, new, new, transform)


def _lookup_order(span_text: str, label: str, pool: EntityPool) -> list[str]:
    """NORP first for single-word -ian/-ish/-ese adjectives and spans in the NORP pool."""
    ws = words(span_text)
    demonym = len(ws) == 1 and ws[0].lower().endswith(("ian", "ish", "ese"))
    if demonym or normalize_answer(span_text) in pool.norp_keys:
        return list(dict.fromkeys(["NORP", label]))
    return [label]


def _pool_candidates(
    original: str, label: str, pool: EntityPool, rng: random.Random, aliases: Sequence[str]
) -> Iterator[tuple[str, str]]:
    """(replacement, pool type) in seeded order: the NORP pool's candidates first where
    the lookup says so, then the original label's (the fallback).

    Choice: the caller tries these in order until one passes every post-swap filter and
    acceptance check, so the fallback is reached when the NORP pool holds no valid
    candidate or none of them passes. The paper states the NORP-first lookup under tier 3;
    tier 4 uses the same lookup.
    """
    for kind in _lookup_order(original, label, pool):
        for choice in replacement_candidates(original, pool.get(kind), rng, aliases):
            yield choice, kind


def _entity_plans(
    tier: str,
    original: str,
    label: str,
    core: str,
    pool: EntityPool,
    rng: random.Random,
    aliases: Sequence[str],
    with_article: bool = False,
) -> Iterator[Plan]:
    """One plan per pool candidate, in seeded order (drawn lazily)."""
    for replacement, kind in _pool_candidates(original, label, pool, rng, aliases):
        planted = _replace_inside(core, original, replacement) or replacement

        def transform(alias: str, replacement: str = replacement) -> str:
            return _replace_inside(alias, original, replacement) or replacement

        yield Plan(tier, kind, label, original, replacement, planted, transform, with_article)


def occurrences(text: str, form: str) -> list[tuple[int, int]]:
    """(start, end) of every case-insensitive mention of ``form`` on word boundaries."""
    return [m.span() for m in re.finditer(boundary_pattern(form), text, re.IGNORECASE)]


def _tier_ner(
    located: Located,
    passage: str,
    cache: NerCache,
    pool: EntityPool,
    rng: random.Random,
    aliases: Sequence[str],
) -> Iterator[Plan]:
    """Tier 3: the passage entity spanning or containing the answer sets the pool label.

    A definite article directly before the answer goes with the swapped span when the
    answer is that whole entity, as the paper's Table 5 shows ("between the Republic of
    Indonesia and Samuel Adams Brewery", "located in South Yarra", "aired on the Pakistan
    Navy" from a pool entry with its own article). Choice: not for a demonym adjective
    (looked up under NORP), whose article belongs to the noun after it ("the Italian
    army"); a/an stay and are corrected, as the paper states.
    """
    spans = cache(passage)
    positions = [(located.start, located.end)] + [
        o for o in occurrences(passage, located.text) if o != (located.start, located.end)
    ]
    for start, end in positions:
        for span in spans:
            if span.start <= start and span.end >= end:
                whole = (start, end) == (located.start, located.end) and (
                    span.start in (located.start, located.lead) and span.end == located.end
                )
                article = (
                    whole
                    and located.lead < located.start
                    and "NORP" not in (span.type, *_lookup_order(located.text, span.type, pool))
                )
                return _entity_plans(
                    "3", located.text, span.type, located.text, pool, rng, aliases, article
                )
    raise TierFailure("no_covering_entity", NOT_APPLICABLE)


def _tier_sub_entity(
    located: Located,
    passage: str,
    cache: NerCache,
    pool: EntityPool,
    rng: random.Random,
    aliases: Sequence[str],
) -> Iterator[Plan]:
    """Tier 4: NER on the answer span; the first sub-entity the passage NER confirms.

    Choice: "confirmed" means the full-passage entity set holds an entity with the same
    normalised text and the same type.
    """
    confirmed = {(normalize_answer(s.text), s.type) for s in cache(passage)}
    whole = normalize_answer(located.text)
    for sub in cache(located.text):
        key = (normalize_answer(sub.text), sub.type)
        # Choice: a sub-entity is a proper part of the answer; the whole answer as one
        # entity is tier 3's case and gets no second draw here.
        if key[0] and key[0] != whole and key in confirmed:
            return _entity_plans("4", sub.text.strip(), sub.type, located.text, pool, rng, aliases)
    raise TierFailure("no_confirmed_sub_entity", NOT_APPLICABLE)


# --- one question -----------------------------------------------------------------------------


def _skip(index: int, question: dict[str, Any], reason: str, detail: str = "", **extra: Any):
    return {
        "qid": question["qid"],
        "index": index,
        "status": "skipped",
        "question": question["question"],
        "answers": question["answers"],
        "skip_reason": reason,
        "skip_detail": detail,
        **extra,
    }


def _apply(
    plan: Plan, passage: dict[str, Any], located: Located, aliases: Sequence[str]
) -> dict[str, Any]:
    """Global replacement, alias substitution/scrubbing, article fixes, then acceptance checks."""
    reason = post_swap_reason(plan.original, plan.replacement_entity)
    if reason:
        raise TierFailure(reason, POST_FILTER, f"{plan.original!r} -> {plan.replacement_entity!r}")
    primary = aliases[0]
    mapping: dict[str, str] = {plan.original: plan.replacement_entity}
    if located.text.casefold() != plan.original.casefold():
        mapping[located.text] = plan.planted
    elif plan.with_article and located.lead < located.start:
        # The article before the answer goes with the swapped span (Table 5); a
        # replacement with its own leading article keeps the replaced article's case.
        span = located.with_article(passage["text"])
        mapping[span] = _article_case(plan.planted, span)
    substituted, scrubbed = [], []
    for alias in aliases:
        for form in dict.fromkeys([alias, strip_outer(alias)]):
            if form and form.casefold() not in {k.casefold() for k in mapping}:
                mapping[form] = plan.alias_transform(form)
            # Choice: when the article goes with the swap, it goes with every swapped
            # mention ("the USA" as well as "the United States").
            if form and plan.with_article and not _LEADING_ARTICLE.match(form):
                if f"the {form}".casefold() not in {k.casefold() for k in mapping}:
                    mapping[f"the {form}"] = plan.alias_transform(form)
    title, n_title, fixes_title, found_title = substitute_all(passage.get("title") or "", mapping)
    text, n_text, fixes_text, found_text = substitute_all(passage["text"], mapping)
    found = found_title | found_text
    for alias in aliases:
        forms = {alias, strip_outer(alias)}
        keys = {f.casefold() for f in forms} | {f"the {f}".casefold() for f in forms}
        if not keys & found:
            continue
        if normalize_answer(alias) == normalize_answer(located.alias):
            continue
        is_subset = _tokens(alias) < _tokens(primary)
        (scrubbed if is_subset else substituted).append(alias)
    result = {
        "title": title,
        "text": text,
        "mentions_replaced": n_title + n_text,
        "article_fixes": fixes_title + fixes_text,
        "substituted_aliases": substituted,
        "scrubbed_aliases": scrubbed,
    }
    for planted in dict.fromkeys([plan.replacement_entity, plan.planted]):
        if adjacent_duplicate(text, planted) or adjacent_duplicate(title, planted):
            raise TierFailure("adjacent_duplicate", ACCEPTANCE, planted)
    leaked = [a for a in aliases if contains_alias(f"{title}\n{text}", [a])]
    if leaked:
        raise TierFailure("leak", ACCEPTANCE, f"alias still present: {leaked[0]!r}")
    return result


def _article_case(replacement: str, replaced: str) -> str:
    """A replacement's own leading article takes the case of the article it replaces:
    "The Pakistan Navy" for "the National Broadcasting Company" reads "the Pakistan Navy"."""
    mine, theirs = _LEADING_ARTICLE.match(replacement), _LEADING_ARTICLE.match(replaced)
    if mine and theirs and replacement[:1].isupper() != replaced[:1].isupper():
        return replaced[0] + replacement[1:]
    return replacement


def _swapped_span(plan: Plan, located: Located, text: str) -> str:
    """The passage's span that the planted replacement stands for: the answer core, with
    the article before it when that went with the swap."""
    return located.with_article(text) if plan.with_article else located.text


# A leak (an alias left in the passage) does not depend on the candidate: the tier stops.
CANDIDATE_INDEPENDENT = frozenset({"leak"})


def _try_candidates(
    plans: Iterable[Plan],
    passage: dict[str, Any],
    located: Located,
    aliases: Sequence[str],
    max_candidates: int | None,
    tried: list[int],
) -> tuple[Plan, dict[str, Any], Counter[str]]:
    """The first plan that passes every post-swap filter and acceptance check, with the
    reasons the earlier ones failed; ``tried[0]`` counts the candidates tried.

    Raises the tier's TierFailure when none passes: no candidate at all, or the most
    common failure among the candidates (ties: the first seen) with the counts as detail.
    """
    failures: Counter[str] = Counter()
    deepest = NO_CANDIDATE
    last: TierFailure | None = None
    for plan in plans:
        if max_candidates is not None and tried[0] >= max_candidates:
            break
        tried[0] += 1
        try:
            return plan, _apply(plan, passage, located, aliases), failures
        except TierFailure as failure:
            failures[failure.reason] += 1
            deepest = max(deepest, failure.depth)
            last = failure
            if failure.reason in CANDIDATE_INDEPENDENT:
                break
    if last is None:
        raise TierFailure("no_pool_candidate", NO_CANDIDATE)
    if tried[0] == 1:
        raise last
    reason = failures.most_common(1)[0][0]
    detail = f"{tried[0]} candidates tried: " + ", ".join(
        f"{k} {v}" for k, v in failures.most_common()
    )
    raise TierFailure(reason, deepest, detail)


def swap_question(
    index: int,
    question: dict[str, Any],
    pool: EntityPool,
    ner: NerBackend | NerCache,
    seed: int = 42,
    max_candidates: int | None = None,
) -> dict[str, Any]:
    """The accepted swap record of one question, or its skip record.

    In the entity tiers (3 and 4) the pool's candidates are tried in seeded order until
    one passes every post-swap filter and acceptance check (the paper drops a question
    only when no clean swap is possible); ``candidates_tried`` records how many were
    tried in the accepted tier, ``candidates_tried_by_tier`` in every tier that drew.
    ``max_candidates=1`` is the one-draw-per-tier construction (for comparison). The year
    and numeric tiers draw one shift, as the paper states.
    """
    cache = as_ner_cache(ner)
    rng = random.Random(seed + index)
    aliases = _aliases(question)
    if not aliases:
        return _skip(index, question, "no_answer")
    if not any(p["text"].strip() for p in question.get("gold_passages") or []):
        return _skip(index, question, "no_gold_passage")
    located = locate_answer(question)
    if located is None:
        return _skip(index, question, "answer_not_located")
    passage = question["gold_passages"][located.passage_index]
    text = passage["text"]
    born = born_parenthetical_overlap(text, aliases)
    if born:
        return _skip(index, question, "born_parenthetical", born)
    possessive = possessive_answer_token(text, aliases)
    if possessive:
        return _skip(index, question, "possessive_answer_token", possessive)

    core = located.text
    attempts: dict[str, str] = {}
    tried_by_tier: dict[str, int] = {}
    failures: list[tuple[int, int, TierFailure]] = []
    tiers: list[tuple[str, Callable[[], Iterable[Plan]]]] = [
        ("1", lambda: [_tier_year(core, rng)]),
        ("1b", lambda: [_tier_embedded_year(core, rng)]),
        ("2", lambda: [_tier_numeric(core, rng)]),
        ("3", lambda: _tier_ner(located, text, cache, pool, rng, aliases)),
        ("4", lambda: _tier_sub_entity(located, text, cache, pool, rng, aliases)),
    ]
    for order, (tier, make_plans) in enumerate(tiers):
        tried = [0]
        try:
            plan, applied, rejected = _try_candidates(
                make_plans(), passage, located, aliases, max_candidates, tried
            )
        except TierFailure as failure:
            attempts[tier] = failure.reason
            failures.append((failure.depth, order, failure))
            continue
        finally:
            if tried[0]:
                tried_by_tier[tier] = tried[0]
        return {
            "qid": question["qid"],
            "index": index,
            "status": "accepted",
            "question": question["question"],
            "answers": question["answers"],
            "passage": {"pid": passage["pid"], "title": passage["title"], "text": text},
            "modified_passage": {
                "pid": passage["pid"],
                "title": applied["title"],
                "text": applied["text"],
            },
            "modified_text": applied["text"],
            "original_span": _swapped_span(plan, located, text),
            "span_start": located.lead if plan.with_article else located.start,
            "span_end": located.end,
            "matched_alias": located.alias,
            "swapped": {"from": plan.original, "to": plan.replacement_entity},
            "replacement": plan.planted,
            "replacement_entity": plan.replacement_entity,
            "tier": plan.tier,
            "entity_type": plan.entity_type,
            "source_type": plan.source_type,
            "mentions_replaced": applied["mentions_replaced"],
            "article_fixes": applied["article_fixes"],
            "article_with_span": plan.with_article and located.lead < located.start,
            "substituted_aliases": applied["substituted_aliases"],
            "scrubbed_aliases": applied["scrubbed_aliases"],
            "tier_attempts": attempts,
            "candidates_tried": tried_by_tier[tier],
            "candidates_tried_by_tier": tried_by_tier,
            "rejected_candidates": dict(rejected.most_common()),
            "leak_aliases": aliases,
            "leak_check": "pass",
            "seed": seed,
        }
    deepest = max(failures, key=lambda f: (f[0], f[1]))
    extra = {"tier_attempts": attempts, "candidates_tried_by_tier": tried_by_tier}
    if deepest[0] == NOT_APPLICABLE:
        return _skip(index, question, "no_applicable_tier", "", **extra)
    failure = deepest[2]
    return _skip(index, question, failure.reason, failure.detail, **extra)


def build_swaps(
    questions: Sequence[dict[str, Any]],
    ner: NerBackend | NerCache,
    seed: int = 42,
    pool: EntityPool | None = None,
    max_candidates: int | None = None,
) -> tuple[list[dict[str, Any]], EntityPool]:
    """One record per question (accepted or skipped) and the entity pool used.

    ``max_candidates`` caps the pool candidates tried per tier (None: all, the paper's
    "no clean swap possible"; 1: one draw per tier), see :func:`swap_question`.

    Without ``pool`` it is built from every gold passage of ``questions`` (the paper:
    "over all gold passages in the dataset"). NER runs in batches: all gold passages
    once, then all located answer spans (tier 4) once.
    """
    cache = as_ner_cache(ner)
    cache.prime(gold_passage_texts(questions))
    if pool is None:
        pool = build_entity_pool(gold_passage_texts(questions), cache)
    cores = []
    for question in questions:
        located = locate_answer(question) if question.get("gold_passages") else None
        if located is not None:
            cores.append(located.text)
    cache.prime(cores)
    progress = None
    if cache.log:
        progress = Progress(len(questions), cache.log, unit="questions", min_interval=10.0)
    records = []
    for i, question in enumerate(questions):
        records.append(swap_question(i, question, pool, cache, seed, max_candidates))
        if progress:
            progress.step(f"swaps ({records[-1]['status']})")
    return records, pool


# --- the accepted records ---------------------------------------------------------------------


def accepted(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The accepted swap records, in order (the skips left out)."""
    return [r for r in records if r.get("status") == "accepted"]
