"""The tiers of the QC swap pipeline and the seeded choice of a replacement.

GRAB-RAG section 3.3 and Appendix C: tiers 1 (year), 1b (embedded year) and 2 (numeric)
draw one shift; tiers 3 (NER replacement, NORP first for demonym adjectives) and 4
(sub-entity) yield one :class:`Plan` per valid pool candidate in seeded order, which the
driver (``swaps.py``) tries until one passes every filter. A tier that cannot swap raises
:class:`TierFailure` saying why and how far it got. Where the paper is silent, the choice
made is said in a comment marked "Choice:".
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from grabrag.contexts.entity_pool import EntityPool, NerCache
from grabrag.contexts.swap_spans import (
    _YEAR,
    NUMBER_TYPE,
    YEAR_MAX,
    YEAR_MIN,
    YEAR_TYPE,
    Located,
    _embedded_years,
    _is_numeric,
    _is_year,
    boundary_pattern,
    occurrences,
    token_subset,
    word_count,
)
from grabrag.core.text import contains_alias, normalize_answer, words

# --- the paper's constants --------------------------------------------------------------------

TIERS = ("1", "1b", "2", "3", "4")
YEAR_DELTAS = (-30, -20, -10, 10, 20, 30)
NUMERIC_FRACTION = (0.1, 0.3)  # delta = max(1, round(n * U[0.1, 0.3])), random sign
NUMERIC_MIN = 1

# --- replacement selection --------------------------------------------------------------------


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


# --- what a tier decides ----------------------------------------------------------------------


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
