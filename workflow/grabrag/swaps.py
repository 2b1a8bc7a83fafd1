"""The QC (misleading context) entity-swap pipeline: GRAB-RAG section 3.3 and Appendix C.

For each question the pipeline finds the answer in a gold passage and replaces it with a
plausible wrong span, or records why no clean swap exists. Every rule below is the
paper's, in its order; where the paper is silent, the choice made is said in a comment
marked "Choice:".

1. Entity pool: NER over all gold passages; spans pass the span-validity filters (all
   types) and the type-specific quality filters, then NORP entries leave GPE and LOC.
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
"""

from __future__ import annotations

import csv
import math
import random
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .contexts import GOLD, TokenCounter, build_context_row
from .errors import DataError
from .io import write_csv
from .metrics import normalize_answer
from .ner import INTERNAL_TYPES, NerBackend, Span
from .progress import Progress
from .retrieval import passage_text
from .text import contains_alias

# --- the paper's constants --------------------------------------------------------------------

TIERS = ("1", "1b", "2", "3", "4")
YEAR_MIN, YEAR_MAX = 1000, 2099
YEAR_DELTAS = (-30, -20, -10, 10, 20, 30)
NUMERIC_FRACTION = (0.1, 0.3)  # delta = max(1, round(n * U[0.1, 0.3])), random sign
NUMERIC_MIN = 1
MIN_SPAN_CHARS = 3
MAX_SPAN_WORDS = 5
POSSESSIVE_MIN_CHARS = 6
MAX_REPLACEMENT_WORD_RATIO = 3
YEAR_TYPE = "YEAR"
NUMBER_TYPE = "NUMBER"

QC_ROLE = "swapped_gold"
GOLD_ROLE = GOLD  # the original gold passage beside its swapped twin (QX)
HARD_NEGATIVE = "hard_negative"
AUDIT_QUALITIES = ("fluent", "borderline", "broken")

# --- word lists (the paper gives examples; the lists complete them) ---------------------------

# "last word not a geographic feature noun (e.g., river, ocean, peninsula)"
GEOGRAPHIC_FEATURES = frozenset(
    """river rivers ocean oceans sea seas lake lakes peninsula peninsulas mountain mountains
    mount hill hills range ranges valley valleys island islands isle isles bay bays gulf
    strait straits channel canal creek stream falls waterfall desert deserts plateau plain
    plains basin delta coast shore beach cape forest forests glacier lagoon reef archipelago
    harbor harbour estuary fjord canyon gorge ridge volcano highlands lowlands marsh swamp
    wetlands tributary""".split()
)

# PERSON: "matching a bare title noun (e.g., president, bishop, senator)"
TITLE_NOUNS = frozenset(
    """president bishop archbishop cardinal pope senator congressman congresswoman
    representative governor mayor king queen prince princess emperor empress duke duchess
    earl count countess baron baroness lord lady sir dame sultan caliph tsar czar pharaoh
    chancellor minister secretary chairman chairwoman chair chief general admiral captain
    colonel major lieutenant sergeant commander judge justice professor doctor dr mr mrs ms
    miss reverend father saint st rabbi imam sheikh khan coach director ambassador speaker
    treasurer dean premier vice-president""".split()
) | frozenset(
    {
        "vice president",
        "prime minister",
        "head coach",
        "chief justice",
        "attorney general",
        "secretary of state",
        "president-elect",
        "first lady",
    }
)

# ORG: "single-word generic nouns (congress, board)"
ORG_GENERIC = frozenset(
    """congress board parliament senate government administration cabinet council committee
    commission court tribunal army navy military police church university college school
    company corporation firm party league union association society ministry department
    agency bureau office assembly legislature federation club team band group institute
    academy foundation museum library hospital bank monarchy crown state republic
    organization organisation""".split()
)

# ORG: "contain media-organization keywords (tribune, gazette, herald)"
MEDIA_KEYWORDS = frozenset(
    """tribune gazette herald times post journal chronicle courier telegraph bulletin
    dispatch inquirer examiner observer sentinel news newspaper magazine press""".split()
)

# EVENT: "single-word process nouns (filming, synapsis)". Choice: a word list plus the
# process suffixes -ing and -sis; -tion/-ment are not used as suffixes because single-word
# named events end in them (Reformation, Enlightenment). Holidays ending in -ing stay.
PROCESS_NOUNS = frozenset(
    """filming shooting recording production construction development training synapsis
    mitosis meiosis fermentation photosynthesis migration evolution growth renovation
    restoration expansion excavation rehearsal casting editing""".split()
)
PROCESS_SUFFIXES = ("ing", "sis")
EVENT_NOT_PROCESS = frozenset({"thanksgiving"})

# LOC: "lowercase directional prefix (eastern Asia, ancient Athens)"
LOC_PREFIXES = frozenset(
    """north south east west northern southern eastern western northeast northwest southeast
    southwest northeastern northwestern southeastern southwestern central upper lower inner
    outer ancient medieval modern mid middle greater coastal rural mainland""".split()
)

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

ARTICLES = ("the", "a", "an")
YES_NO = frozenset({"yes", "no"})

# --- small text helpers -----------------------------------------------------------------------

_DIGIT = re.compile(r"\d")
_ROMAN = re.compile(r"M{0,4}(CM|CD|D?C{0,3})(XC|XL|L?X{0,3})(IX|IV|V?I{0,3})")
_BORN_COMPOUND = re.compile(r"\w-born\b", re.IGNORECASE)
_DOMAIN = re.compile(r"[A-Za-z0-9]\.[A-Za-z]{2,}\b")
_BORN_PAREN = re.compile(r"\(\s*born\b([^()]*)\)", re.IGNORECASE)
_POSSESSIVE = re.compile(r"(?:['’]s|s['’])(?!\w)")
_ACRONYM = re.compile(r"(?:[A-Z]\.?){2,}")
_OUTER_PAIRS = {'"': '"', "'": "'", "“": "”", "‘": "’", "(": ")", "[": "]", "{": "}", "«": "»"}
_TRAILING_PUNCT = ".,;:!?"
_YEAR = re.compile(r"(?<!\d)(\d{4})(?!\d)")
_NUMERIC = re.compile(r"[1-9]\d{1,4}|[1-9]\d?,\d{3}")


def words(text: str) -> list[str]:
    """Whitespace words that hold a letter or digit (a lone '-' of tokenised text is no word)."""
    return [w for w in text.split() if any(ch.isalnum() for ch in w)]


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


def _boundary(form: str) -> str:
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


# --- entity pool ------------------------------------------------------------------------------


def span_validity_reason(text: str) -> str | None:
    """Appendix C "span validity (all types)"; None when the span passes."""
    text = text.strip()
    if len(text) < MIN_SPAN_CHARS:
        return "too_short"
    if _DIGIT.search(text):
        return "has_digit"
    ws = words(text)
    if len(ws) > MAX_SPAN_WORDS:
        return "too_many_words"
    if not ws or all(_ROMAN.fullmatch(w.strip(".,")) for w in ws):
        # Choice: Roman numerals are matched upper-case (a lower-case span is dropped
        # below anyway), so names made of the letters I, V, X, L, C, D, M ("Mill") survive.
        return "roman_or_punctuation"
    if text == text.lower():
        return "all_lowercase"
    lowered = [w.lower() for w in ws]
    if any(a == b for a, b in zip(lowered, lowered[1:], strict=False)):
        return "adjacent_identical_words"
    if lowered[-1].strip(".,;:") in GEOGRAPHIC_FEATURES:
        return "geographic_feature"
    if _BORN_COMPOUND.search(text):
        return "born_compound"
    if _DOMAIN.search(text):
        return "domain_name"
    return None


def type_quality_reason(text: str, kind: str) -> str | None:
    """Appendix C "type-specific quality"; None when the span passes."""
    text = text.strip()
    ws = words(text)
    first = ws[0].lower() if ws else ""
    lowered = " ".join(w.lower() for w in ws).rstrip(".")
    if _DOMAIN.search(text):
        return "domain_name"
    if kind == "PERSON":
        if first in ARTICLES:
            return "person_article"
        if lowered in TITLE_NOUNS:
            return "person_title"
    elif kind == "ORG":
        if len(ws) == 1 and lowered in ORG_GENERIC:
            return "org_generic"
        if any(w.lower().strip(".,'’") in MEDIA_KEYWORDS for w in ws):
            return "org_media"
    elif kind == "EVENT":
        if len(ws) == 1 and lowered not in EVENT_NOT_PROCESS:
            if lowered in PROCESS_NOUNS or lowered.endswith(PROCESS_SUFFIXES):
                return "event_process"
    elif kind == "WORK_OF_ART":
        if first in ARTICLES and not any(w[:1].isupper() for w in ws[1:]):
            return "work_article_uncapitalised"
    elif kind == "LOC":
        if ws and ws[0] in LOC_PREFIXES:  # lower-case only: "Eastern Europe" is kept
            return "loc_directional_prefix"
    return None


@dataclass
class EntityPool:
    """Replacement candidates by internal type, with counts of what each filter removed."""

    entries: dict[str, list[str]]
    rejected: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.norp_keys = {normalize_answer(e) for e in self.entries.get("NORP", [])}

    def get(self, kind: str) -> list[str]:
        return self.entries.get(kind, [])

    def as_dict(self) -> dict[str, Any]:
        return {
            "entries": self.entries,
            "sizes": {k: len(v) for k, v in self.entries.items()},
            "rejected": self.rejected,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EntityPool:
        return cls({k: list(v) for k, v in data["entries"].items()}, dict(data.get("rejected", {})))


class NerCache:
    """Memoises a backend's spans by text; ``prime`` runs the missing texts in batches of
    ``chunk`` (the backend batches within each), with progress lines to ``log``."""

    def __init__(
        self, ner: NerBackend, log: Callable[[str], None] | None = None, chunk: int = 256
    ) -> None:
        self.ner = ner
        self.log = log
        self.chunk = chunk
        self._spans: dict[str, list[Span]] = {}

    def prime(self, texts: Iterable[str]) -> None:
        missing = list(dict.fromkeys(t for t in texts if t not in self._spans))
        progress = None
        if self.log and len(missing) > self.chunk:
            progress = Progress(len(missing), self.log, unit="passages", min_interval=10.0)
        for start in range(0, len(missing), self.chunk):
            part = missing[start : start + self.chunk]
            for text, spans in zip(part, self.ner.predict(part), strict=True):
                self._spans[text] = spans
            if progress:
                progress.step("NER", n=len(part))

    def __call__(self, text: str) -> list[Span]:
        self.prime([text])
        return self._spans[text]


def _as_cache(ner: NerBackend | NerCache) -> NerCache:
    return ner if isinstance(ner, NerCache) else NerCache(ner)


def build_entity_pool(texts: Iterable[str], ner: NerBackend | NerCache) -> EntityPool:
    """Run NER over every (gold) passage and keep the spans that pass both filter stages.

    Entries are deduplicated by exact text and sorted, so the pool (and every seeded choice
    from it) does not depend on passage order.
    """
    cache = _as_cache(ner)
    texts = list(dict.fromkeys(t for t in texts if t.strip()))
    cache.prime(texts)
    rejected: Counter[str] = Counter()
    kept: dict[str, set[str]] = {kind: set() for kind in INTERNAL_TYPES}
    for text in texts:
        for span in cache(text):
            surface = span.text.strip()
            reason = span_validity_reason(surface) or type_quality_reason(surface, span.type)
            if reason:
                rejected[reason] += 1
            else:
                kept.setdefault(span.type, set()).add(surface)
    # "any entry already in the NORP pool is removed from GPE and LOC"
    norp = {normalize_answer(e) for e in kept.get("NORP", set())}
    for kind in ("GPE", "LOC"):
        overlap = {e for e in kept.get(kind, set()) if normalize_answer(e) in norp}
        rejected["norp_overlap"] += len(overlap)
        kept[kind] = kept.get(kind, set()) - overlap
    return EntityPool({k: sorted(v) for k, v in kept.items()}, dict(sorted(rejected.items())))


def gold_passage_texts(questions: Sequence[dict[str, Any]]) -> list[str]:
    """Texts of every gold passage of a dataset's questions, deduplicated, in order."""
    return list(dict.fromkeys(p["text"] for q in questions for p in q["gold_passages"]))


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
                pattern = re.compile(_boundary(form), flags)
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
    pattern = re.compile("|".join(_boundary(f) for f in forms), re.IGNORECASE)
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
                if re.fullmatch(_boundary(f), match.group(0), re.IGNORECASE)
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
    new = re.sub(_boundary(source), lambda _: target, alias, flags=re.IGNORECASE)
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


def _occurrences(text: str, form: str) -> list[tuple[int, int]]:
    return [m.span() for m in re.finditer(_boundary(form), text, re.IGNORECASE)]


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
        o for o in _occurrences(passage, located.text) if o != (located.start, located.end)
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
    cache = _as_cache(ner)
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
    cache = _as_cache(ner)
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


# --- summaries, audit, reference comparison ---------------------------------------------------


def accepted(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("status") == "accepted"]


def count_leaks(records: Iterable[dict[str, Any]]) -> int:
    """Accepted swaps whose modified passage (title and text) still holds a gold alias."""
    leaks = 0
    for r in accepted(records):
        passage = r["modified_passage"]
        aliases = r.get("leak_aliases") or r["answers"]
        leaks += contains_alias(f"{passage['title']}\n{passage['text']}", aliases)
    return leaks


def eligibility_summary(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """QC eligibility: counts by tier, type and skip reason, and the leak recount (must be 0)."""
    ok = accepted(records)
    total = len(records)
    by_tier = Counter(r["tier"] for r in ok)
    return {
        "questions": total,
        "eligible": len(ok),
        "eligible_rate": round(len(ok) / total, 4) if total else 0.0,
        "by_tier": {t: by_tier[t] for t in TIERS if by_tier[t]},
        "by_type": dict(sorted(Counter(r["entity_type"] for r in ok).items())),
        "skip_reasons": dict(
            Counter(r["skip_reason"] for r in records if r.get("status") == "skipped").most_common()
        ),
        "leaks": count_leaks(records),
        # Accepted only after the first pool candidate failed a filter (retried in seeded
        # order), and the most candidates one accepted swap needed.
        "accepted_after_retry": sum(r.get("candidates_tried", 1) > 1 for r in ok),
        "max_candidates_tried": max((r.get("candidates_tried", 1) for r in ok), default=0),
    }


def _excerpt(text: str, needle: str, width: int = 200) -> str:
    match = re.search(_boundary(needle), text, re.IGNORECASE) if needle else None
    if match is None:
        return text[: 2 * width]
    start, end = max(0, match.start() - width), min(len(text), match.end() + width)
    return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")


AUDIT_COLUMNS = (
    "audit_id",
    "qid",
    "index",
    "tier",
    "entity_type",
    "question",
    "gold_answer",
    "original_span",
    "replacement",
    "original_excerpt",
    "modified_excerpt",
    "quality",
)


def _allocate(sizes: dict[str, int], n: int) -> dict[str, int]:
    """Proportional allocation with largest remainders (ties: tier order)."""
    total = sum(sizes.values())
    if total <= n:
        return dict(sizes)
    quotas = {t: n * s / total for t, s in sizes.items()}
    alloc = {t: min(sizes[t], math.floor(q)) for t, q in quotas.items()}
    order = sorted(sizes, key=lambda t: (-(quotas[t] - math.floor(quotas[t])), TIERS.index(t)))
    k = 0
    while sum(alloc.values()) < n:
        t = order[k % len(order)]
        if alloc[t] < sizes[t]:
            alloc[t] += 1
        k += 1
    return alloc


def audit_sample(records: Sequence[dict[str, Any]], n: int = 200, seed: int = 42) -> list[dict]:
    """The paper's manual audit: ``n`` accepted swaps stratified by tier, blank ``quality``.

    Each tier gets a share proportional to its size (largest remainders); swaps are drawn
    with ``random.Random(seed)`` and the rows shuffled so the rater sees no tier order.
    Fill ``quality`` with fluent, borderline or broken (Appendix C rubric).
    """
    rng = random.Random(seed)
    by_tier: dict[str, list[dict[str, Any]]] = {}
    for record in sorted(accepted(records), key=lambda r: r["index"]):
        by_tier.setdefault(record["tier"], []).append(record)
    alloc = _allocate({t: len(v) for t, v in by_tier.items()}, n)
    chosen: list[dict[str, Any]] = []
    for tier in TIERS:
        if tier in by_tier:
            chosen.extend(rng.sample(by_tier[tier], alloc[tier]))
    rng.shuffle(chosen)
    rows = []
    for k, r in enumerate(chosen, start=1):
        rows.append(
            {
                "audit_id": k,
                "qid": r["qid"],
                "index": r["index"],
                "tier": r["tier"],
                "entity_type": r["entity_type"],
                "question": r["question"],
                "gold_answer": " | ".join(r["answers"]),
                "original_span": r["original_span"],
                "replacement": r["replacement"],
                "original_excerpt": _excerpt(r["passage"]["text"], r["original_span"]),
                "modified_excerpt": _excerpt(r["modified_passage"]["text"], r["replacement"]),
                "quality": "",
            }
        )
    return rows


def write_audit_csv(path: str | Path, rows: Sequence[dict[str, Any]]) -> None:
    write_csv(path, AUDIT_COLUMNS, rows)


SWAP_TABLE_COLUMNS = (
    "qid",
    "index",
    "status",
    "skip_reason",
    "tier",
    "entity_type",
    "question",
    "gold_answers",
    "original_span",
    "replacement",
    "candidates_tried",
    "original_passage",
    "modified_passage",
)


def swap_table(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One flat row per question for a spreadsheet: every swap and every skip with its reason."""
    rows = []
    for r in records:
        ok = r.get("status") == "accepted"
        rows.append(
            {
                "qid": r["qid"],
                "index": r["index"],
                "status": r["status"],
                "skip_reason": "" if ok else r.get("skip_reason", ""),
                "tier": r.get("tier", "") if ok else "",
                "entity_type": r.get("entity_type", "") if ok else "",
                "question": r.get("question", ""),
                "gold_answers": " | ".join(r.get("answers") or []),
                "original_span": r.get("original_span", "") if ok else "",
                "replacement": r.get("replacement", "") if ok else "",
                "candidates_tried": (
                    r.get("candidates_tried", "")
                    if ok
                    else sum((r.get("candidates_tried_by_tier") or {}).values()) or ""
                ),
                "original_passage": (r.get("passage") or {}).get("text", "") if ok else "",
                "modified_passage": r.get("modified_text", "") if ok else "",
            }
        )
    return rows


def read_audit_ratings(path: str | Path) -> dict[str, str]:
    """Validate a filled audit CSV; return qid -> rating (fluent, borderline or broken), in
    file order.

    Every row must carry a ``quality`` of fluent, borderline or broken (case and surrounding
    spaces ignored); a blank or other value is a DataError naming the row and the value.
    """
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: audit file not found")
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        missing = {"qid", "quality"} - set(reader.fieldnames or [])
        if missing:
            raise DataError(f"{path}: missing column(s) {', '.join(sorted(missing))}")
        ratings: dict[str, str] = {}
        for k, row in enumerate(reader, start=1):
            qid = (row.get("qid") or "").strip()
            where = f"{path}: row {k} (qid {qid or '?'})"
            if not qid:
                raise DataError(f"{path}: row {k} has no qid")
            if qid in ratings:
                raise DataError(f"{where}: qid appears twice")
            value = row.get("quality")
            quality = (value or "").strip().lower()
            if quality not in AUDIT_QUALITIES:
                shown = "blank" if not quality else repr(value)
                raise DataError(
                    f"{where}: quality is {shown}; allowed values are {', '.join(AUDIT_QUALITIES)}"
                )
            ratings[qid] = quality
    if not ratings:
        raise DataError(f"{path}: no rated rows")
    return ratings


def read_audit(path: str | Path) -> list[str]:
    """The qids a filled audit CSV rates fluent or borderline, in file order (validated as
    :func:`read_audit_ratings`)."""
    return [qid for qid, quality in read_audit_ratings(path).items() if quality != "broken"]


def _type_in_context(text: str, target: str, cache: NerCache) -> str | None:
    """Internal type of ``target`` where it first occurs in ``text``; NER on it alone else."""
    kind = value_type(target)
    if kind:
        return kind
    for start, end in _occurrences(text, target)[:1]:
        for span in cache(text):
            if span.start <= start and span.end >= end:
                return span.type
    alone = cache(target)
    return alone[0].type if alone else None


def reference_comparison(
    records: Sequence[dict[str, Any]],
    questions: Sequence[dict[str, Any]],
    ner: NerBackend | NerCache,
) -> dict[str, Any]:
    """Compare our swaps with Longpre et al. (2021) for BIG-bench NQ questions.

    The reference substitute is typed with the same recogniser (in its swapped passage
    first, alone as a fallback; years and numbers as YEAR/NUMBER).
    """
    cache = _as_cache(ner)
    ours = {r["qid"]: r for r in accepted(records)}
    with_ref = [q for q in questions if (q.get("extra") or {}).get("reference_swap")]
    cache.prime(q["extra"]["reference_swap"]["passage"] for q in with_ref)
    both = [q for q in with_ref if q["qid"] in ours]
    typed = agree = same_string = 0
    pairs: Counter[str] = Counter()
    for q in both:
        ref = q["extra"]["reference_swap"]
        ref_type = _type_in_context(ref["passage"], ref["substitute"], cache)
        our = ours[q["qid"]]
        same_string += normalize_answer(ref["substitute"]) == normalize_answer(our["replacement"])
        if ref_type is None:
            pairs[f"{our['entity_type']}->untyped"] += 1
            continue
        typed += 1
        agree += ref_type == our["entity_type"]
        pairs[f"{our['entity_type']}->{ref_type}"] += 1
    n_ref = len(with_ref)
    return {
        "questions_with_reference": n_ref,
        "ours_swapped": sum(q["qid"] in ours for q in with_ref),
        "both_swapped": len(both),
        "both_swapped_share": round(len(both) / n_ref, 4) if n_ref else 0.0,
        "substitute_typed": typed,
        "type_agreement": agree,
        "type_agreement_rate": round(agree / typed, 4) if typed else None,
        "same_replacement": same_string,
        "type_pairs_ours_to_reference": dict(pairs.most_common()),
    }


# --- QC and QX context rows ------------------------------------------------------------------


def build_qc_rows(
    questions: Sequence[dict[str, Any]],
    swap_records: Sequence[dict[str, Any]],
    retrieval: dict[str, dict[str, Any]],
    corpus: dict[str, dict[str, str]],
    seed: int,
    counter: TokenCounter,
    n_passages: int = 5,
    max_tokens: int = 1500,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """QC rows: the swapped passage among n_passages - 1 hard negatives; plus a report.

    Hard negatives come from the retrieval ranking in order, skipping any that hold a
    gold alias or the replacement (so no passage confirms or repeats the planted answer).
    Rows are shuffled with Random(seed + i) and capped by ``build_context_row``. A
    question without an accepted swap is absent; one with too few clean negatives too
    (reported).
    """
    return _swap_rows(
        "QC", questions, swap_records, retrieval, corpus, seed, counter, n_passages, max_tokens
    )


def build_qx_rows(
    questions: Sequence[dict[str, Any]],
    swap_records: Sequence[dict[str, Any]],
    retrieval: dict[str, dict[str, Any]],
    corpus: dict[str, dict[str, str]],
    seed: int,
    counter: TokenCounter,
    n_passages: int = 5,
    max_tokens: int = 1500,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """QX rows (inter-context conflict): the original gold passage (role ``gold``) AND its
    swapped twin (role ``swapped_gold``) among n_passages - 2 hard negatives; plus a report.

    Same questions, hard-negative filter (no gold alias, no planted string), shuffle
    (Random(seed + i)) and token cap as QC, so QX differs from QC only by the added
    original passage (in place of the last hard negative). Rows also record
    ``original_in_context`` (a gold alias survived the token cap) besides
    ``replacement_in_context``.
    """
    if n_passages < 2:
        raise ValueError(f"QX needs at least 2 passages (gold + swapped), got {n_passages}")
    return _swap_rows(
        "QX", questions, swap_records, retrieval, corpus, seed, counter, n_passages, max_tokens
    )


def _swap_rows(
    condition: str,
    questions: Sequence[dict[str, Any]],
    swap_records: Sequence[dict[str, Any]],
    retrieval: dict[str, dict[str, Any]],
    corpus: dict[str, dict[str, str]],
    seed: int,
    counter: TokenCounter,
    n_passages: int,
    max_tokens: int,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    with_original = condition == "QX"
    n_negatives = n_passages - 2 if with_original else n_passages - 1
    swaps = {r["qid"]: r for r in accepted(swap_records)}
    rows: list[dict[str, Any]] = []
    short: list[str] = []
    lost = lost_original = 0
    for index, question in enumerate(questions):
        record = swaps.get(question["qid"])
        if record is None:
            continue
        if record["index"] != index:
            raise DataError(
                f"swap record of {question['qid']} has index {record['index']} but the "
                f"question is at position {index}; rebuild the swaps from this questions file"
            )
        ranked = retrieval.get(question["qid"])
        if ranked is None:
            raise KeyError(f"question {question['qid']} has no retrieval row")
        aliases = record.get("leak_aliases") or question["answers"]
        planted = list(dict.fromkeys([record["replacement"], record["replacement_entity"]]))
        negatives = []
        for pid in ranked["hard_negatives"]:
            if len(negatives) == n_negatives:
                break
            passage = corpus[pid]
            body = passage_text(passage)
            if contains_alias(body, aliases) or contains_alias(body, planted):
                continue
            negatives.append({**passage, "role": HARD_NEGATIVE})
        if len(negatives) < n_negatives:
            short.append(question["qid"])
            continue
        swapped = {**record["modified_passage"], "role": QC_ROLE}
        passages = [swapped, *negatives]
        if with_original:
            passages.insert(0, {**record["passage"], "role": GOLD_ROLE})
        row = build_context_row(index, question, condition, passages, seed, counter, max_tokens)
        row["replacement"] = record["replacement"]
        row["replacement_entity"] = record["replacement_entity"]
        row["original_span"] = record["original_span"]
        row["tier"] = record["tier"]
        row["entity_type"] = record["entity_type"]
        row["replacement_in_context"] = contains_alias(row["context"], planted)
        lost += not row["replacement_in_context"]
        if with_original:
            row["original_in_context"] = contains_alias(row["context"], aliases)
            lost_original += not row["original_in_context"]
        rows.append(row)
    report = {
        "condition": condition,
        "questions": len(questions),
        "accepted_swaps": len(swaps),
        f"{condition.lower()}_rows": len(rows),
        "dropped_insufficient_clean_hard_negatives": short,
        "truncated_contexts": sum(r["truncated"] for r in rows),
        "replacement_cut_by_token_cap": lost,
        "answer_in_context": sum(r["answer_in_context"] for r in rows),
        "n_passages": n_passages,
        "max_context_tokens": max_tokens,
    }
    if with_original:
        report["original_cut_by_token_cap"] = lost_original
    return rows, report
