"""The entity pool of the QC swaps (GRAB-RAG section 3.3, Appendix C, step 1): the typed
replacement candidates of tiers 3 and 4.

NER over all gold passages; spans pass the span-validity filters (all types) and the
type-specific quality filters, then NORP entries leave GPE and LOC. Where the paper is
silent, the choice made is said in a comment marked "Choice:". ``NerCache`` memoises the
recogniser's spans by text, so the pool and the swaps share one NER pass.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from grabrag.contexts.ner import INTERNAL_TYPES, NerBackend, Span
from grabrag.core.progress import Progress
from grabrag.core.text import normalize_answer, words

# --- the paper's constants --------------------------------------------------------------------

MIN_SPAN_CHARS = 3
MAX_SPAN_WORDS = 5

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

ARTICLES = ("the", "a", "an")

# --- span patterns ----------------------------------------------------------------------------

_DIGIT = re.compile(r"\d")
_ROMAN = re.compile(r"M{0,4}(CM|CD|D?C{0,3})(XC|XL|L?X{0,3})(IX|IV|V?I{0,3})")
_BORN_COMPOUND = re.compile(r"\w-born\b", re.IGNORECASE)
_DOMAIN = re.compile(r"[A-Za-z0-9]\.[A-Za-z]{2,}\b")


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


def as_ner_cache(ner: NerBackend | NerCache) -> NerCache:
    return ner if isinstance(ner, NerCache) else NerCache(ner)


def build_entity_pool(texts: Iterable[str], ner: NerBackend | NerCache) -> EntityPool:
    """Run NER over every (gold) passage and keep the spans that pass both filter stages.

    Entries are deduplicated by exact text and sorted, so the pool (and every seeded choice
    from it) does not depend on passage order.
    """
    cache = as_ner_cache(ner)
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
