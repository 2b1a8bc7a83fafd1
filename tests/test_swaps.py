"""The QC entity-swap pipeline (GRAB-RAG section 3.3, Appendix C) and its NER backends.

Rule tests use a stub recogniser whose entities are fixed, so each rule is tested in
isolation; the Table 5 examples, determinism and the seed-43 check use the real spaCy
model; the GLiNER path runs on a tiny randomly initialised GLiNER built locally.
"""

from __future__ import annotations

import csv
import random
import re
from collections import Counter
from pathlib import Path

import pytest

from grabrag.contexts.audit import (
    AUDIT_COLUMNS,
    audit_sample,
    count_leaks,
    eligibility_summary,
    read_audit,
    read_audit_ratings,
    reference_comparison,
    write_audit_csv,
)
from grabrag.contexts.entity_pool import (
    EntityPool,
    NerCache,
    build_entity_pool,
    span_validity_reason,
    type_quality_reason,
)
from grabrag.contexts.ner import (
    GLINER_LABELS,
    INTERNAL_TYPES,
    GlinerNer,
    NerBackend,
    SpacyNer,
    Span,
    chunk_text,
    load_ner,
)
from grabrag.contexts.paired import HARD_NEGATIVE
from grabrag.contexts.swap_spans import locate_answer, post_swap_reason, substitute_all
from grabrag.contexts.swap_tiers import NUMERIC_FRACTION, YEAR_DELTAS, select_replacement
from grabrag.contexts.swapped import QC_ROLE, build_qc_rows, build_qx_rows, swapped_condition_rows
from grabrag.contexts.swaps import accepted, build_swaps, swap_question
from grabrag.core.errors import DataError
from grabrag.core.io import read_jsonl

from .conftest import RESOURCES, snakemake
from .tiny_gliner import build_tiny_gliner

FIXTURES = Path(__file__).parent / "fixtures" / "swaps"


# --- helpers ----------------------------------------------------------------------------------


class StubNer:
    """Tags every word-boundary occurrence of the given entities; ``overrides`` fixes the
    spans of whole texts (e.g. an answer span given to tier 4)."""

    name = "stub"

    def __init__(self, entities: dict[str, str], overrides: dict[str, list[Span]] | None = None):
        self.entities = entities
        self.overrides = overrides or {}
        self.calls = 0

    def predict(self, texts):
        self.calls += 1
        out = []
        for text in texts:
            if text in self.overrides:
                out.append(self.overrides[text])
                continue
            spans = [
                Span(m.group(0), m.start(), m.end(), kind)
                for entity, kind in self.entities.items()
                for m in re.finditer(r"(?<!\w)" + re.escape(entity) + r"(?!\w)", text)
            ]
            out.append(sorted(spans, key=lambda s: (s.start, -s.end)))
        return out


def question(answers, text, title="", qid="q0", all_answers=None):
    return {
        "qid": qid,
        "question": f"question {qid}?",
        "answers": answers,
        "all_answers": all_answers or answers,
        "gold_passages": [{"pid": f"p{qid}", "title": title, "text": text}],
    }


def swap(q, entities=None, pool=None, seed=42, index=0, overrides=None):
    ner = StubNer(entities or {}, overrides)
    return swap_question(index, q, pool or EntityPool({}), ner, seed)


def seed_for(predicate, limit=500):
    """The first seed whose Random(seed) satisfies ``predicate`` (to hit a stated delta)."""
    return next(s for s in range(limit) if predicate(random.Random(s)))


@pytest.fixture(scope="module")
def spacy_dir(tmp_path_factory) -> Path:
    from grabrag.data.assets import resolve

    manifest = RESOURCES / "en-core-web-sm" / "manifest.json"
    if not manifest.exists():
        snakemake(tmp_path_factory.mktemp("fetch_spacy"), str(manifest))
    return resolve(manifest)


@pytest.fixture(scope="module")
def spacy_ner(spacy_dir) -> NerCache:
    return NerCache(load_ner("spacy", spacy_dir))


# --- span validity (all types): each rule fails one span and passes its neighbour -------------


@pytest.mark.parametrize(
    ("bad", "reason", "good"),
    [
        ("Al", "too_short", "Ali"),
        ("Apollo 8", "has_digit", "Apollo"),
        ("Bank Of The Old Northern Union", "too_many_words", "Bank Of The Old Union"),
        ("XIV", "roman_or_punctuation", "Mill"),
        ("...", "roman_or_punctuation", "Ohio"),
        ("paris", "all_lowercase", "Paris"),
        ("New New York", "adjacent_identical_words", "New York"),
        ("Mississippi River", "geographic_feature", "River Thames"),
        ("Pacific Ocean", "geographic_feature", "Pacific"),
        ("Iberian Peninsula", "geographic_feature", "Iberia"),
        ("London-born", "born_compound", "London"),
        ("Amazon.com", "domain_name", "Amazon"),
    ],
)
def test_span_validity_rules(bad: str, reason: str, good: str) -> None:
    assert span_validity_reason(bad) == reason
    assert span_validity_reason(good) is None


@pytest.mark.parametrize(
    ("kind", "bad", "reason", "good"),
    [
        ("PERSON", "The Beatles", "person_article", "John Lennon"),
        ("PERSON", "A Smith", "person_article", "Adam Smith"),
        ("PERSON", "President", "person_title", "President Lincoln"),
        ("PERSON", "Bishop", "person_title", "Desmond Tutu"),
        ("PERSON", "Senator", "person_title", "Senator Warren"),
        ("ORG", "Congress", "org_generic", "Congress Party"),
        ("ORG", "Board", "org_generic", "Boeing"),
        ("ORG", "Chicago Tribune", "org_media", "Chicago Bulls"),
        ("ORG", "Gazette", "org_media", "General Motors"),
        ("ORG", "Miami Herald", "org_media", "Miami Heat"),
        ("EVENT", "Filming", "event_process", "Thanksgiving"),
        ("EVENT", "Synapsis", "event_process", "Reformation"),
        ("EVENT", "Filming", "event_process", "World Cup"),
        ("WORK_OF_ART", "The film", "work_article_uncapitalised", "The Godfather"),
        ("WORK_OF_ART", "A song", "work_article_uncapitalised", "A Little Night Music"),
        ("LOC", "eastern Asia", "loc_directional_prefix", "Eastern Europe"),
        ("LOC", "ancient Athens", "loc_directional_prefix", "Athens"),
        ("GPE", "Example.org", "domain_name", "Example"),
    ],
)
def test_type_specific_rules(kind: str, bad: str, reason: str, good: str) -> None:
    assert type_quality_reason(bad, kind) == reason
    assert type_quality_reason(good, kind) is None


def test_type_rules_apply_only_to_their_type() -> None:
    assert type_quality_reason("The Beatles", "ORG") is None
    assert type_quality_reason("Congress", "PERSON") is None
    assert type_quality_reason("eastern Asia", "GPE") is None


def test_pool_filters_sorts_and_moves_demonyms_out_of_places() -> None:
    texts = [
        "Linda Warren met the American ambassador in Paris and the Miami Herald wrote of it.",
        "Americans call it American; Jaime Jarrín called from Paris near the Mississippi River.",
        "The President visited Amazon.com offices with Abe Lincoln.",
    ]
    ner = StubNer(
        {
            "Linda Warren": "PERSON",
            "Jaime Jarrín": "PERSON",
            "Abe Lincoln": "PERSON",
            "The President": "PERSON",
            "American": "NORP",
            "Americans": "GPE",
            "Paris": "GPE",
            "Miami Herald": "ORG",
            "Mississippi River": "LOC",
            "Amazon.com": "ORG",
        }
    )
    pool = build_entity_pool(texts, ner)
    assert pool.get("PERSON") == ["Abe Lincoln", "Jaime Jarrín", "Linda Warren"]
    assert pool.get("NORP") == ["American"]
    assert pool.get("GPE") == ["Americans", "Paris"]  # plural form is a different entry
    assert pool.get("ORG") == [] and pool.get("LOC") == []
    assert pool.rejected["person_article"] == 1
    assert pool.rejected["org_media"] == 1
    assert pool.rejected["geographic_feature"] == 1
    assert pool.rejected["domain_name"] == 1
    # the same string tagged both NORP and GPE leaves GPE
    ner.entities["American"] = "GPE"
    texts.append("An American film.")
    both = StubNer({**ner.entities})
    both.overrides["An American film."] = [Span("American", 3, 11, "NORP")]
    pool2 = build_entity_pool(texts, both)
    assert "American" in pool2.get("NORP") and "American" not in pool2.get("GPE")
    assert pool2.rejected["norp_overlap"] == 1
    assert EntityPool.from_dict(pool2.as_dict()).entries == pool2.entries


# --- answer-span location and pre-swap skips --------------------------------------------------


def test_location_uses_word_boundaries() -> None:
    q = question(["Paris"], "Parisian cafés line the river in Paris.")
    located = locate_answer(q)
    assert located is not None and located.text == "Paris" and located.start == 33
    assert locate_answer(question(["Paris"], "Parisian cafés only.")) is None
    assert swap(question(["Paris"], "Parisian cafés only."))["skip_reason"] == "answer_not_located"


def test_location_ignores_case_but_prefers_an_exact_match() -> None:
    located = locate_answer(question(["US"], "They told us that the US army left."))
    assert (located.text, located.start) == ("US", 22)
    located = locate_answer(question(["ram nath kovind"], "Then Ram Nath Kovind spoke."))
    assert located.text == "Ram Nath Kovind"


def test_location_retries_without_outer_quotes_and_brackets() -> None:
    q = question(['"Hey Jude"'], "The single Hey Jude was released in 1968.")
    located = locate_answer(q)
    assert located is not None and located.text == "Hey Jude" and located.form == "Hey Jude"
    q = question(["(Blue Note)"], "He signed with Blue Note that year.")
    assert locate_answer(q).text == "Blue Note"
    assert locate_answer(question(['"Hey Jude"'], "The single Let It Be.")) is None


def test_location_leaves_article_and_punctuation_outside_the_core() -> None:
    q = question(
        ["the Pittsburgh Steelers", "Steelers"], "They beat the Pittsburgh Steelers, twice."
    )
    located = locate_answer(q)
    assert located.text == "Pittsburgh Steelers" and located.alias == "the Pittsburgh Steelers"


def test_born_parenthetical_overlapping_the_answer_skips() -> None:
    pool = EntityPool({"PERSON": ["Anne Archer"]})
    ents = {"Tami Lynn": "PERSON"}
    bad = question(["Tami Lynn"], "It was sung by Tami Lynn (born Tamara Lynn Smith, 1942).")
    assert swap(bad, ents, pool)["skip_reason"] == "born_parenthetical"
    good = question(["Tami Lynn"], "It was sung by Tami Lynn (born 1942, Gert Town, New Orleans).")
    record = swap(good, ents, pool)
    assert record["status"] == "accepted"
    assert "Anne Archer (born 1942" in record["modified_text"]


def test_possessive_answer_token_of_six_or_more_characters_skips() -> None:
    pool = EntityPool({"PERSON": ["Linda Warren"]})
    ents = {"Ram Nath Kovind": "PERSON", "Kovind": "PERSON", "Don Shula": "PERSON"}
    bad = question(["Ram Nath Kovind"], "Ram Nath Kovind took office. Kovind's term began.")
    assert swap(bad, ents, pool)["skip_reason"] == "possessive_answer_token"
    tokenised = question(
        ["Ram Nath Kovind"], "Ram Nath Kovind took office . Kovind 's term began ."
    )
    assert swap(tokenised, ents, pool)["skip_reason"] == "possessive_answer_token"
    # "Shula" has five characters: its possessive does not skip
    short = question(["Don Shula"], "Halas was surpassed by Don Shula. Shula's teams won.")
    assert swap(short, ents, pool)["status"] == "accepted"


# --- tiers ------------------------------------------------------------------------------------


def test_tier1_year_shift_uses_the_stated_deltas() -> None:
    text = "The Tower Theatre was built in 1939 and opened in 1939 to crowds."
    seen = set()
    for seed in range(40):
        record = swap(question(["1939"], text), seed=seed)
        assert record["tier"] == "1" and record["entity_type"] == "YEAR"
        delta = random.Random(seed).choice(YEAR_DELTAS)
        new = str(1939 + delta)
        assert record["replacement"] == new
        assert record["modified_text"].count(new) == 2 and "1939" not in record["modified_text"]
        seen.add(delta)
    assert seen == set(YEAR_DELTAS)


def test_tier1_clamps_to_2099_and_falls_through_when_clamp_changes_nothing() -> None:
    up = seed_for(lambda r: r.choice(YEAR_DELTAS) == 30)
    record = swap(question(["2090"], "Planned for 2090."), seed=up)
    assert (record["tier"], record["replacement"]) == ("1", "2099")
    # 2099 + 30 clamps to 2099 itself: tier 1 fails, and tier 2 does not take a year
    # (a numeric shift would plant 2099 +- 10-30 %, no plausible year): the next tiers
    # find no entity here, so the question is skipped
    record = swap(question(["2099"], "Planned for 2099."), seed=up)
    assert record["status"] == "skipped"
    assert record["tier_attempts"]["1"] == "year_unchanged_after_clamp"
    assert record["tier_attempts"]["2"] == "year_not_numeric"
    down = seed_for(lambda r: r.choice(YEAR_DELTAS) == -30)
    assert swap(question(["1010"], "Built in 1010."), seed=down)["replacement"] == "1000"


def test_a_failed_year_shift_never_becomes_a_numeric_shift() -> None:
    # "1997" in "1997-2017": the +20 shift plants "2017-2017", discarded as an adjacent
    # duplicate. Tier 2 used to take the year as a number and plant 1997 +- 10-30 %
    # (2299, say); now the question goes on to tiers 3 and 4 (no entity here: skipped).
    text = "The series ran 1997-2017 on the network."
    plus20 = seed_for(lambda r: r.choice(YEAR_DELTAS) == 20)
    record = swap(question(["1997"], text), seed=plus20)
    assert record["status"] == "skipped" and record["skip_reason"] == "adjacent_duplicate"
    assert record["tier_attempts"]["1"] == "adjacent_duplicate"
    assert record["tier_attempts"]["2"] == "year_not_numeric"
    # every other draw is a tier-1 year within tier 1's +-30
    for seed in range(40):
        record = swap(question(["1997"], text), seed=seed)
        if record["status"] == "accepted":
            assert record["tier"] == "1"
            assert 1967 <= int(record["replacement"]) <= 2027
    # the range itself as the answer: tier 1b moves both years by one delta
    plus10 = seed_for(lambda r: r.choice(YEAR_DELTAS) == 10)
    record = swap(question(["1997-2017"], text), seed=plus10)
    assert (record["tier"], record["replacement"]) == ("1b", "2007-2027")


def test_tier1b_mount_etna() -> None:
    """Table 5, fluent: 16 March 2017 with a year shift of -20."""
    seed = seed_for(lambda r: r.choice(YEAR_DELTAS) == -20)
    q = question(
        ["16 March 2017"],
        "Mount Etna is an active stratovolcano. Last eruption 16 March 2017, near Catania.",
        qid="etna",
    )
    record = swap(q, seed=seed)
    assert record["tier"] == "1b" and record["entity_type"] == "YEAR"
    assert "Last eruption 16 March 1997, near Catania." in record["modified_text"]
    assert record["replacement"] == "16 March 1997"


def test_tier1b_shifts_every_embedded_year_by_one_delta() -> None:
    seed = seed_for(lambda r: r.choice(YEAR_DELTAS) == 10)
    record = swap(question(["from 1562 to 1598"], "Wars raged from 1562 to 1598."), seed=seed)
    assert record["replacement"] == "from 1572 to 1608"
    assert swap(question(["March 16"], "Erupted March 16."))["skip_reason"] == "no_applicable_tier"


def test_tier2_numeric_shift_and_clamp_rules() -> None:
    for seed in range(30):
        rng = random.Random(seed)
        u, sign = rng.uniform(*NUMERIC_FRACTION), rng.choice((-1, 1))
        expected = max(1, 250 + sign * max(1, int(250 * u + 0.5)))
        record = swap(question(["250"], "About 250 people came; 250 stayed."), seed=seed)
        assert record["tier"] == "2" and record["replacement"] == str(expected)
        assert 175 <= expected <= 325 and expected != 250
        assert "250" not in record["modified_text"]
    record = swap(question(["20,427"], "A crowd of 20,427 watched."), seed=3)
    assert re.fullmatch(r"\d{2},\d{3}", record["replacement"])
    # a single digit, six digits, or a leading zero: no numeric tier
    for answer in ("7", "123456", "007"):
        assert swap(question([answer], f"Code {answer} here."))["skip_reason"] == (
            "no_applicable_tier"
        )


def test_tier2_delta_is_at_least_one() -> None:
    # n = 10, U in [0.1, 0.3] gives 1..3; the minimum shift of 1 keeps it a change
    for seed in range(20):
        record = swap(question(["10"], "He scored 10 goals."), seed=seed)
        assert record["replacement"] != "10" and 7 <= int(record["replacement"]) <= 13


def test_tier3_ram_nath_kovind_with_spacy(spacy_ner) -> None:
    """Table 5, fluent: PERSON -> PERSON."""
    passage = "On 25 July 2017, Ram Nath Kovind took office as the 14th President of India."
    pool = build_entity_pool(
        [passage, "The veteran broadcaster Jaime Jarrín called the game."], spacy_ner
    )
    assert pool.get("PERSON") == ["Jaime Jarrín", "Ram Nath Kovind"]
    q = question(["Ram Nath Kovind"], passage, qid="kovind")
    record = swap_question(0, q, pool, spacy_ner, 42)
    assert record["tier"] == "3" and record["entity_type"] == "PERSON"
    assert record["modified_text"] == (
        "On 25 July 2017, Jaime Jarrín took office as the 14th President of India."
    )
    assert record["leak_check"] == "pass"


def test_tier3_don_shula_keeps_the_unlisted_surname(spacy_ner) -> None:
    """Table 5, borderline: the surname survives because it is not a gold alias."""
    passage = "George Halas held the record. Halas was surpassed by Don Shula. Shula retired."
    pool = EntityPool({"PERSON": ["Don Shula", "Linda Warren"]})
    record = swap_question(0, question(["Don Shula"], passage), pool, spacy_ner, 42)
    assert "surpassed by Linda Warren. Shula retired." in record["modified_text"]
    assert record["scrubbed_aliases"] == []
    # with "Shula" among the gold aliases it is a token-subset alias and is scrubbed
    record = swap_question(0, question(["Don Shula", "Shula"], passage), pool, spacy_ner, 42)
    assert "surpassed by Linda Warren. Linda Warren retired." in record["modified_text"]
    assert record["scrubbed_aliases"] == ["Shula"]


def test_tier3_nbc_drops_the_doubled_article(spacy_ner) -> None:
    """Table 5, borderline: the parenthetical (NBC) survives."""
    passage = "Marry Me a Little aired on the National Broadcasting Company (NBC) in 1981."
    pool = build_entity_pool(["The Pakistan Navy patrols the coast."], spacy_ner)
    assert pool.get("ORG") == ["The Pakistan Navy"]
    record = swap_question(0, question(["National Broadcasting Company"], passage), pool, spacy_ner)
    assert record["tier"] == "3" and record["entity_type"] == "ORG"
    # the passage's "the" goes with the swapped span; the pool entry's own article stays
    # in the case of the article it replaces
    assert "aired on the Pakistan Navy (NBC) in 1981." in record["modified_text"]
    assert record["article_with_span"] and record["original_span"] == (
        "the National Broadcasting Company"
    )


@pytest.mark.parametrize(
    ("answer", "passage", "original_type", "replacement"),
    [
        # Table 5, broken: label-consistent but semantically mismatched swaps pass every check
        (
            "the Dutch Empire",
            "A war between the Republic of Indonesia and the Dutch Empire ended in 1949.",
            "LOC",
            "Samuel Adams Brewery",
        ),
        (
            "District of Columbia",
            "It is a 408 bed hospital located in the District of Columbia.",
            "LOC",
            "South Yarra",
        ),
    ],
)
def test_table5_broken_examples_pass_the_automated_checks(
    answer, passage, original_type, replacement
) -> None:
    core = answer.removeprefix("the ")
    record = swap(
        question([answer], passage), {core: original_type}, EntityPool({"LOC": [replacement]})
    )
    assert record["status"] == "accepted" and record["replacement"] == replacement
    assert replacement in record["modified_text"] and core not in record["modified_text"]
    # the article goes with the swapped span, as Table 5 prints them
    assert f"the {replacement}" not in record["modified_text"]
    assert record["article_with_span"] and record["original_span"] == f"the {core}"


def test_a_leading_article_goes_with_the_swapped_span() -> None:
    """Table 5: "... and Samuel Adams Brewery", not "... and the Samuel Adams Brewery"."""
    pool = EntityPool({"LOC": ["Samuel Adams Brewery"], "NORP": ["Spanish"], "ORG": ["Blur"]})
    text = "A war between the Republic of Indonesia and the Dutch Empire ended in 1949."
    record = swap(question(["the Dutch Empire"], text), {"Dutch Empire": "LOC"}, pool)
    assert record["modified_text"] == (
        "A war between the Republic of Indonesia and Samuel Adams Brewery ended in 1949."
    )
    # the answer without its article: the passage's article goes all the same
    record = swap(question(["Dutch Empire"], text), {"Dutch Empire": "LOC"}, pool)
    assert "and Samuel Adams Brewery ended" in record["modified_text"]
    # a demonym's article belongs to the noun after it; a/an stay (corrected)
    record = swap(question(["Italian"], "He led the Italian army."), {"Italian": "NORP"}, pool)
    assert record["modified_text"] == "He led the Spanish army."
    assert not record["article_with_span"]
    # the answer is only part of the entity: the article stays with the entity
    text = "They beat the Oasis Steelers."
    record = swap(question(["Oasis"], text), {"Oasis Steelers": "ORG"}, pool)
    assert record["modified_text"] == "They beat the Blur Steelers."
    # a pool entry with its own article keeps the case of the article it replaces
    text = "It aired on the National Broadcasting Company (NBC)."
    ents = {"National Broadcasting Company": "ORG"}
    nbc = EntityPool({"ORG": ["The Pakistan Navy"]})
    record = swap(question(["National Broadcasting Company"], text), ents, nbc)
    assert record["modified_text"] == "It aired on the Pakistan Navy (NBC)."
    # no article, nothing to move
    record = swap(question(["Oasis"], "Oasis were a band."), {"Oasis": "ORG"}, pool)
    assert record["modified_text"] == "Blur were a band." and not record["article_with_span"]


def test_tier3_demonym_adjectives_are_looked_up_under_norp_first() -> None:
    text = "He married an Italian noblewoman."
    ents = {"Italian": "GPE"}
    pool = EntityPool({"NORP": ["Spanish"], "GPE": ["France"]})
    record = swap(question(["Italian"], text), ents, pool)
    assert (record["replacement"], record["entity_type"], record["source_type"]) == (
        "Spanish",
        "NORP",
        "GPE",
    )
    assert record["modified_text"] == "He married a Spanish noblewoman."  # a/an corrected
    # fallback to the original label when the NORP pool has no valid candidate
    record = swap(question(["Italian"], text), ents, EntityPool({"GPE": ["France"]}))
    assert (record["replacement"], record["entity_type"]) == ("France", "GPE")
    # a span already in the NORP pool is looked up there first even without the suffix
    ents = {"American": "GPE"}
    text = "She was an American citizen."
    norp_pool = EntityPool({"NORP": ["American", "British"], "GPE": ["France"]})
    assert swap(question(["American"], text), ents, norp_pool)["replacement"] == "British"
    plain_pool = EntityPool({"NORP": ["British"], "GPE": ["France"]})
    assert swap(question(["American"], text), ents, plain_pool)["replacement"] == "France"


def test_tier3_needs_an_entity_spanning_or_containing_the_answer() -> None:
    pool = EntityPool({"GPE": ["Lyon"]})
    contained = swap(
        question(["Paris"], "He lived in Paris, France."), {"Paris, France": "GPE"}, pool
    )
    assert contained["tier"] == "3" and "lived in Lyon, France" in contained["modified_text"]
    inside = swap(question(["Paris, France"], "He lived in Paris, France."), {"Paris": "GPE"}, pool)
    # tier 3 cannot use a smaller entity; that is tier 4's case
    assert inside["tier"] == "4" and inside["tier_attempts"]["3"] == "no_covering_entity"
    assert inside["modified_text"] == "He lived in Lyon, France."


def test_tier4_sub_entity_confirmed_by_the_passage() -> None:
    text = "Former President Barack Obama spoke at the event."
    pool = EntityPool({"PERSON": ["Linda Warren"]})
    record = swap(question(["President Barack Obama"], text), {"Barack Obama": "PERSON"}, pool)
    assert record["tier"] == "4" and record["entity_type"] == "PERSON"
    assert record["modified_text"] == "Former President Linda Warren spoke at the event."
    assert record["replacement"] == "President Linda Warren"
    assert record["replacement_entity"] == "Linda Warren"
    assert record["tier_attempts"]["3"] == "no_covering_entity"
    # not confirmed: the answer-span NER types the sub-entity differently from the passage
    overrides = {"President Barack Obama": [Span("Barack Obama", 10, 22, "ORG")]}
    record = swap(
        question(["President Barack Obama"], text),
        {"Barack Obama": "PERSON"},
        pool,
        overrides=overrides,
    )
    assert record["skip_reason"] == "no_applicable_tier"
    assert record["tier_attempts"]["4"] == "no_confirmed_sub_entity"


def test_tiers_run_in_order_and_the_first_success_wins() -> None:
    # "1990" is a year and also a numeric string: tier 1 wins
    record = swap(
        question(["1990"], "In 1990 it closed."), {"1990": "EVENT"}, EntityPool({"EVENT": ["Expo"]})
    )
    assert record["tier"] == "1" and record["tier_attempts"] == {}
    # tier 3 (ORG entity covering the answer) draws an acronym and fails a post-swap filter;
    # tier 4 then succeeds on the confirmed PERSON sub-entity
    text = "Former President Barack Obama spoke."
    ents = {"President Barack Obama": "ORG", "Barack Obama": "PERSON"}
    overrides = {"President Barack Obama": [Span("Barack Obama", 10, 22, "PERSON")]}
    pool = EntityPool({"ORG": ["NBC"], "PERSON": ["Linda Warren"]})
    record = swap(question(["President Barack Obama"], text), ents, pool, overrides=overrides)
    assert record["tier"] == "4" and record["tier_attempts"]["3"] == "post_acronym"
    assert record["modified_text"] == "Former President Linda Warren spoke."
    # with a clean ORG candidate, tier 3 wins and tier 4 is never tried
    pool = EntityPool({"ORG": ["Pakistan Navy"], "PERSON": ["Linda Warren"]})
    record = swap(question(["President Barack Obama"], text), ents, pool, overrides=overrides)
    assert record["tier"] == "3" and "4" not in record["tier_attempts"]


# --- replacement selection --------------------------------------------------------------------


def test_selection_rejects_equal_and_token_subset_candidates() -> None:
    candidates = ["Don Shula", "don shula!", "Shula", "Don Shula Jr", "Shula Don", "Linda Warren"]
    for seed in range(20):
        assert select_replacement("Don Shula", candidates, random.Random(seed)) == "Linda Warren"
    assert select_replacement("Don Shula", ["Shula", "Don Shula"], random.Random(0)) is None


def test_selection_rejects_candidates_holding_a_gold_alias() -> None:
    chosen = {
        select_replacement("United States", ["USA Today", "France"], random.Random(s), ["USA"])
        for s in range(20)
    }
    assert chosen == {"France"}


def test_selection_prefers_lengths_within_the_window() -> None:
    near, far = "Ann Lee", "Ann Marie Lee Smith Jones"  # 2 and 5 words
    chosen = {select_replacement("Bob", [near, far], random.Random(s)) for s in range(30)}
    assert chosen == {near}  # |5 - 1| > max(2, 1)
    assert select_replacement("Bob", [far], random.Random(0)) == far  # only a far one: taken
    # 3+ word originals prefer multi-word candidates
    both = {
        select_replacement("Laura San Giacomo", ["Cher", "Linda Warren"], random.Random(s))
        for s in range(30)
    }
    assert both == {"Linda Warren"}
    two_words = {
        select_replacement("Don Shula", ["Cher", "Linda Warren"], random.Random(s))
        for s in range(30)
    }
    assert two_words == {"Cher", "Linda Warren"}


# --- post-swap filters: one failing and one passing case each ---------------------------------


@pytest.mark.parametrize(
    ("original", "bad", "reason", "good"),
    [
        ("Don Shula", "Shula", "post_token_subset", "Linda Warren"),
        ("Paris", "Saint Jean de Luz", "post_too_long", "Saint Jean Luz"),
        ("Paris", "Europe's", "post_possessive_injection", "Europe"),
        ("Paris", "de Gaulle", "post_case_mismatch", "Lyon"),
        ("Paris", "NBC", "post_acronym", "Nbc"),
        ("Paris", "U.S.", "post_acronym", "Lyon"),
        ("Harvard University", "Yale College", "post_educational_mismatch", "Yale University"),
        ("Harvard", "Yale University", "post_educational_mismatch", "Yale"),
        ("Apple Inc.", "Green Party", "post_institutional_suffix_mismatch", "Samsung Group"),
        ("Apple", "Samsung Group", "post_institutional_suffix_mismatch", "Samsung"),
        ("Broadcasting Company", "Labour Party", "post_institutional_suffix_mismatch", "Navy"),
    ],
)
def test_post_swap_filters(original: str, bad: str, reason: str, good: str) -> None:
    assert post_swap_reason(original, bad) == reason
    assert post_swap_reason(original, good) is None


def test_a_lowercase_original_accepts_a_lowercase_replacement() -> None:
    assert post_swap_reason("de Gaulle", "van Gogh") is None
    assert post_swap_reason("Paris's", "Europe's") is None


def test_a_post_swap_failure_is_the_skip_reason() -> None:
    record = swap(
        question(["Paris"], "He lived in Paris."), {"Paris": "GPE"}, EntityPool({"GPE": ["NBC"]})
    )
    assert record["skip_reason"] == "post_acronym"


def test_a_failed_first_candidate_is_followed_by_the_next_in_seeded_order() -> None:
    """The paper drops a question only when no clean swap is possible: a first drawn
    candidate that fails a post-swap filter gives way to the next one."""
    pool = EntityPool({"GPE": ["Lyon", "NBC"]})
    q = question(["Paris"], "He lived in Paris.")
    seed = seed_for(lambda r: r.choice(["Lyon", "NBC"]) == "NBC")  # NBC drawn first
    record = swap(q, {"Paris": "GPE"}, pool, seed=seed)
    assert record["status"] == "accepted" and record["replacement"] == "Lyon"
    assert record["candidates_tried"] == 2
    assert record["candidates_tried_by_tier"] == {"3": 2}
    assert record["rejected_candidates"] == {"post_acronym": 1}
    assert eligibility_summary([record])["accepted_after_retry"] == 1
    # one draw per tier (the old construction) loses the question
    one = swap_question(0, q, pool, StubNer({"Paris": "GPE"}), seed, max_candidates=1)
    assert one["skip_reason"] == "post_acronym" and one["candidates_tried_by_tier"] == {"3": 1}
    # a first candidate that passes is taken with one try
    lucky = seed_for(lambda r: r.choice(["Lyon", "NBC"]) == "Lyon")
    record = swap(q, {"Paris": "GPE"}, pool, seed=lucky)
    assert (record["replacement"], record["candidates_tried"]) == ("Lyon", 1)
    assert record["rejected_candidates"] == {}


def test_a_question_is_dropped_only_when_no_candidate_passes() -> None:
    pool = EntityPool({"GPE": ["CBS", "NBC", "de Gaulle"]})
    record = swap(question(["Paris"], "He lived in Paris."), {"Paris": "GPE"}, pool)
    assert record["status"] == "skipped" and record["skip_reason"] == "post_acronym"
    assert record["candidates_tried_by_tier"] == {"3": 3}
    assert record["skip_detail"].startswith("3 candidates tried: post_acronym 2")
    # an adjacent duplicate is the candidate's fault too: the next one is tried
    pool = EntityPool({"GPE": ["Lyon", "Nice"]})
    q = question(["Paris"], "He toured Paris, Lyon.")
    seed = seed_for(lambda r: r.choice(["Lyon", "Nice"]) == "Lyon")
    record = swap(q, {"Paris": "GPE"}, pool, seed=seed)
    assert record["replacement"] == "Nice"
    assert record["rejected_candidates"] == {"adjacent_duplicate": 1}


def test_norp_first_falls_back_to_the_label_when_no_norp_candidate_passes() -> None:
    pool = EntityPool({"NORP": ["NATO"], "GPE": ["France"]})
    q = question(["Italian"], "He married an Italian noblewoman.")
    record = swap(q, {"Italian": "GPE"}, pool)
    assert (record["replacement"], record["entity_type"]) == ("France", "GPE")
    assert record["rejected_candidates"] == {"post_acronym": 1}


# --- acceptance: global replacement, aliases, articles, duplicates, leakage -------------------


def test_every_mention_is_replaced_and_other_aliases_are_fully_substituted() -> None:
    text = "The United States signed. Later the United States and the USA left. US law."
    q = question(["United States", "USA"], text)
    record = swap(q, {"United States": "GPE"}, EntityPool({"GPE": ["France"]}))
    # the article before the swapped entity goes with it, at every swapped mention
    assert record["modified_text"] == "France signed. Later France and France left. US law."
    assert record["mentions_replaced"] == 3 and record["substituted_aliases"] == ["USA"]


def test_token_subset_aliases_are_scrubbed() -> None:
    text = "They beat the Pittsburgh Steelers. The Steelers had won in 1979."
    q = question(["Pittsburgh Steelers", "the Pittsburgh Steelers", "Steelers"], text)
    record = swap(q, {"Pittsburgh Steelers": "ORG"}, EntityPool({"ORG": ["Dallas Cowboys"]}))
    assert record["modified_text"] == "They beat Dallas Cowboys. Dallas Cowboys had won in 1979."
    assert record["scrubbed_aliases"] == ["Steelers"]


def test_article_correction() -> None:
    assert substitute_all("It was a Paris hotel.", {"Paris": "Orleans"})[0] == (
        "It was an Orleans hotel."
    )
    assert substitute_all("An Orleans hotel.", {"Orleans": "Paris"})[0] == "A Paris hotel."
    assert substitute_all("a Paris hotel.", {"Paris": "Lyon"})[0] == "a Lyon hotel."
    assert substitute_all("in the Atlanta Falcons", {"Atlanta Falcons": "The Godfather"})[0] == (
        "in the Godfather"
    )
    assert substitute_all("a 1939 car", {"1939": "1899"})[0] == "a 1899 car"  # digits: as is


def test_adjacent_duplicate_is_discarded() -> None:
    pool = EntityPool({"GPE": ["Lyon"]})
    bad = swap(question(["Paris"], "Paris (Paris) is large."), {"Paris": "GPE"}, pool)
    assert bad["skip_reason"] == "adjacent_duplicate"
    good = swap(question(["Paris"], "Paris is large; Paris is old."), {"Paris": "GPE"}, pool)
    assert good["status"] == "accepted"
    # a second gold answer next to the first becomes the same replacement
    two = question(
        ["Spanish moss", "kitchen fire"], "It began as a kitchen fire, Spanish moss burning."
    )
    record = swap(two, {"Spanish moss": "NORP"}, EntityPool({"NORP": ["Muslim"]}))
    assert record["skip_reason"] == "adjacent_duplicate"


def test_leakage_check_rejects_a_normalised_alias_left_behind() -> None:
    pool = EntityPool({"GPE": ["France"]})
    # "U.S." is replaced, but "US" normalises to the same alias and stays
    leaky = swap(question(["U.S."], "The U.S. army left the US base."), {"U.S.": "GPE"}, pool)
    assert leaky["skip_reason"] == "leak" and "U.S." in leaky["skip_detail"]
    clean = swap(question(["U.S."], "The U.S. army left the U.S. base."), {"U.S.": "GPE"}, pool)
    assert clean["status"] == "accepted" and clean["leak_check"] == "pass"
    assert count_leaks([clean]) == 0
    tampered = {**clean, "modified_passage": {**clean["modified_passage"], "text": "US army"}}
    assert count_leaks([clean, tampered]) == 1


def test_the_title_is_swapped_too_so_it_cannot_leak() -> None:
    q = question(["Oasis"], "Oasis were an English rock band.", title="Oasis (band)")
    record = swap(q, {"Oasis": "ORG"}, EntityPool({"ORG": ["Blur"]}))
    assert record["modified_passage"]["title"] == "Blur (band)"
    assert record["passage"]["title"] == "Oasis (band)"


# --- realistic batch: determinism and seed 43 -------------------------------------------------


@pytest.fixture(scope="module")
def squad_sample():
    return read_jsonl(FIXTURES / "squad_sample.jsonl")


@pytest.fixture(scope="module")
def squad_runs(squad_sample, spacy_ner):
    first, pool = build_swaps(squad_sample, spacy_ner, seed=42)
    again, _ = build_swaps(squad_sample, spacy_ner, seed=42)
    other, _ = build_swaps(squad_sample, spacy_ner, seed=43, pool=pool)
    return first, again, other, pool


def test_batch_is_deterministic_and_seed_43_reorders_the_candidates(squad_runs) -> None:
    first, again, other, _ = squad_runs
    assert first == again
    ids = lambda records: {r["qid"] for r in records if r["status"] == "accepted"}  # noqa: E731
    # the seed reshuffles the replacement order: other replacements, and (candidates being
    # tried until one passes) at most a slightly different eligible set (Appendix G)
    chosen = lambda records: {  # noqa: E731
        r["qid"]: r["replacement"] for r in records if r["status"] == "accepted"
    }
    shared = ids(first) & ids(other)
    assert any(chosen(first)[q] != chosen(other)[q] for q in shared)
    assert len(ids(first) ^ ids(other)) <= max(2, len(ids(first)) // 10)
    summary = eligibility_summary(first)
    assert summary["questions"] == 60 and 0 < summary["eligible"] < 60
    assert summary["leaks"] == 0 and eligibility_summary(other)["leaks"] == 0
    assert sum(summary["by_tier"].values()) == summary["eligible"]
    assert sum(summary["skip_reasons"].values()) == 60 - summary["eligible"]
    assert {r["index"] for r in first} == set(range(60))


def test_batch_records_are_complete(squad_runs, squad_sample) -> None:
    first, _, _, pool = squad_runs
    assert sum(map(len, pool.entries.values())) > 50
    for record, q in zip(first, squad_sample, strict=True):
        assert record["qid"] == q["qid"]
        if record["status"] == "accepted":
            assert record["tier"] in {"1", "1b", "2", "3", "4"}
            assert record["entity_type"] in {*INTERNAL_TYPES, "YEAR", "NUMBER"}
            assert record["replacement"] in record["modified_text"]
            assert record["modified_text"] != record["passage"]["text"]
            assert record["leak_check"] == "pass"
        else:
            assert record["skip_reason"]


# --- audit ------------------------------------------------------------------------------------


def _fake_accepted(n_by_tier: dict[str, int]):
    records, k = [], 0
    for tier, n in n_by_tier.items():
        for _ in range(n):
            records.append(
                {
                    "qid": f"q{k}",
                    "index": k,
                    "status": "accepted",
                    "question": f"q {k}?",
                    "answers": [f"Answer{k}"],
                    "passage": {"pid": "p", "title": "", "text": f"Text with Answer{k} in it."},
                    "modified_passage": {
                        "pid": "p",
                        "title": "",
                        "text": f"Text with Other{k} in it.",
                    },
                    "original_span": f"Answer{k}",
                    "replacement": f"Other{k}",
                    "tier": tier,
                    "entity_type": "PERSON",
                }
            )
            k += 1
    records.append({"qid": "skipped", "index": k, "status": "skipped", "skip_reason": "leak"})
    return records


def _qc_rows(records, drop=()):
    return [{"qid": r["qid"]} for r in accepted(records) if r["qid"] not in drop]


def test_audit_sample_is_a_uniform_draw_from_the_qc_rows_and_seeded() -> None:
    records = _fake_accepted({"3": 30, "1": 10})
    # QC dropped five accepted swaps (too few clean hard negatives): never drawn
    dropped = {r["qid"] for r in accepted(records)[:5]}
    qc = _qc_rows(records, dropped)
    rows = audit_sample(records, qc, n=10, seed=1)
    assert len(rows) == 10 and not {r["qid"] for r in rows} & dropped
    # uniform: random.Random(1).sample over the 35 QC rows in their order
    expected = [r["qid"] for r in random.Random(1).sample(qc, 10)]
    assert [r["qid"] for r in rows] == expected
    assert [r["audit_id"] for r in rows] == list(range(1, 11))
    assert all(r["quality"] == "" for r in rows) and list(rows[0]) == list(AUDIT_COLUMNS)
    assert "Other" in rows[0]["modified_excerpt"] and "skipped" not in {r["qid"] for r in rows}
    assert rows == audit_sample(records, qc, n=10, seed=1)
    assert rows != audit_sample(records, qc, n=10, seed=2)
    assert len(audit_sample(records, qc, n=100, seed=1)) == 35  # fewer than n: all of them
    # a QC row without an accepted swap: the files are from different runs
    with pytest.raises(DataError, match="QC row nope has no accepted swap"):
        audit_sample(records, [*qc, {"qid": "nope"}], n=10, seed=1)


def _with_qc(records):
    return records, _qc_rows(records)


def _fill(path: Path, rows, values) -> None:
    filled = [{**r, "quality": v} for r, v in zip(rows, values, strict=True)]
    write_audit_csv(path, filled)


def test_read_audit_returns_fluent_and_borderline(tmp_path: Path) -> None:
    rows = audit_sample(*_with_qc(_fake_accepted({"3": 4})), n=4, seed=0)
    path = tmp_path / "audit.csv"
    write_audit_csv(path, rows)
    with pytest.raises(DataError, match=r"row 1 \(qid q\d\): quality is blank"):
        read_audit(path)
    _fill(path, rows, ["fluent", " Borderline ", "broken", "FLUENT"])
    assert read_audit(path) == [rows[0]["qid"], rows[1]["qid"], rows[3]["qid"]]
    assert read_audit_ratings(path) == {
        rows[0]["qid"]: "fluent",
        rows[1]["qid"]: "borderline",
        rows[2]["qid"]: "broken",
        rows[3]["qid"]: "fluent",
    }


def test_read_audit_rejects_bad_values_naming_row_and_value(tmp_path: Path) -> None:
    rows = audit_sample(*_with_qc(_fake_accepted({"3": 3})), n=3, seed=0)
    path = tmp_path / "audit.csv"
    _fill(path, rows, ["fluent", "great", "broken"])
    with pytest.raises(DataError, match=rf"row 2 \(qid {rows[1]['qid']}\): quality is 'great'"):
        read_audit(path)
    _fill(path, rows, ["fluent", "fluent", "fluent"])
    with path.open("a", encoding="utf-8") as handle:
        csv.writer(handle).writerow([9, rows[0]["qid"]] + [""] * 9 + ["fluent"])
    with pytest.raises(DataError, match="qid appears twice"):
        read_audit(path)
    path.write_text("qid,rating\nq1,fluent\n", encoding="utf-8")
    with pytest.raises(DataError, match="missing column"):
        read_audit(path)
    with pytest.raises(DataError, match="not found"):
        read_audit(tmp_path / "none.csv")


# --- reference comparison ---------------------------------------------------------------------


def test_reference_comparison_counts_shared_swaps_and_type_agreement() -> None:
    ner = StubNer(
        {
            "Carrie Underwood": "PERSON",
            "Lawrence Hilton-Jacobs": "PERSON",
            "Peru": "GPE",
            "Judy Garland": "PERSON",
        }
    )
    pool = EntityPool({"PERSON": ["Linda Warren"]})
    q1 = question(["Carrie Underwood"], "The theme is sung by Carrie Underwood .", qid="a")
    q1["extra"] = {
        "reference_swap": {
            "passage": "The theme is sung by Lawrence Hilton-Jacobs .",
            "substitute": "Lawrence Hilton-Jacobs",
        }
    }
    q2 = question(["Judy Garland"], "It was sung by Judy Garland .", qid="b")
    q2["extra"] = {"reference_swap": {"passage": "It was sung by Peru .", "substitute": "Peru"}}
    q3 = question(["Judy Garland"], "Judy Garland 's song .", qid="c")  # possessive: we skip
    q3["extra"] = {"reference_swap": {"passage": "Peru 's song .", "substitute": "Peru"}}
    questions = [q1, q2, q3]
    records = [swap_question(i, q, pool, ner) for i, q in enumerate(questions)]
    assert [r["status"] for r in records] == ["accepted", "accepted", "skipped"]
    result = reference_comparison(records, questions, ner)
    assert result["questions_with_reference"] == 3
    assert result["both_swapped"] == 2 and result["both_swapped_share"] == pytest.approx(
        2 / 3, abs=1e-4
    )
    assert result["type_agreement"] == 1 and result["type_agreement_rate"] == 0.5
    assert result["type_pairs_ours_to_reference"] == {"PERSON->PERSON": 1, "PERSON->GPE": 1}


# --- QC rows ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def counter(encoder_dir):
    from grabrag.contexts.paired import load_token_counter

    return load_token_counter(str(encoder_dir))


def test_qc_rows_place_the_swapped_passage_among_clean_hard_negatives(counter) -> None:
    pool = EntityPool({"GPE": ["Lyon"]})
    questions = [
        question(["Paris"], "He lived in Paris for years.", qid="a"),
        question(["Rome"], "She lived in Rome.", qid="b"),  # no pool entity: no swap
        question(["Berlin"], "They met in Berlin.", qid="c"),
    ]
    ner = StubNer({"Paris": "GPE", "Berlin": "GPE"})
    records = [swap_question(i, q, pool, ner) for i, q in enumerate(questions)]
    assert [r["status"] for r in records] == ["accepted", "skipped", "accepted"]
    corpus = {
        f"n{k}": {"pid": f"n{k}", "title": f"N{k}", "text": f"Neutral text {k}."} for k in range(8)
    }
    corpus["lyon"] = {"pid": "lyon", "title": "Cities", "text": "Lyon is in France."}
    corpus["paris"] = {"pid": "paris", "title": "Paris", "text": "Capital city."}
    retrieval = {
        "a": {"hard_negatives": ["lyon", "paris", "n0", "n1", "n2", "n3", "n4"]},
        "b": {"hard_negatives": ["n0", "n1", "n2", "n3"]},
        "c": {"hard_negatives": ["n5", "n6", "lyon"]},  # too few clean ones
    }
    rows, report = build_qc_rows(questions, records, retrieval, corpus, seed=42, counter=counter)
    assert [r["qid"] for r in rows] == ["a"] and report[
        "dropped_insufficient_clean_hard_negatives"
    ] == ["c"]
    row = rows[0]
    assert row["condition"] == "QC" and len(row["passages"]) == 5
    roles = Counter(p["role"] for p in row["passages"])
    assert roles == {QC_ROLE: 1, HARD_NEGATIVE: 4}
    assert {p["pid"] for p in row["passages"] if p["role"] == HARD_NEGATIVE} == {
        "n0",
        "n1",
        "n2",
        "n3",
    }
    swapped = next(p for p in row["passages"] if p["role"] == QC_ROLE)
    assert swapped["text"] == "He lived in Lyon for years."
    assert row["replacement"] == "Lyon" and row["tier"] == "3" and row["entity_type"] == "GPE"
    assert row["answer_in_context"] is False and row["replacement_in_context"] is True
    expected = [records[0]["modified_passage"]["pid"], "n0", "n1", "n2", "n3"]
    random.Random(42 + 0).shuffle(expected)
    assert [p["pid"] for p in row["passages"]] == expected
    assert report["qc_rows"] == 1 and report["accepted_swaps"] == 2


def test_the_token_cap_keeps_the_planted_and_the_original_answer(counter) -> None:
    # a 301-token gold passage ("hay" and "Paris" are one token each) with the answer at
    # its end; QX's five passages under a 200-token cap: the three negatives ("Neutral.",
    # 2 tokens each) leave (200 - 6) / 2 = 97 tokens to each long passage. Their heads
    # hold no answer; each keeps the window around its own: "Lyon" in the swapped
    # passage, "Paris" in the original
    text = " ".join(["hay"] * 300) + " Paris"
    pool = EntityPool({"GPE": ["Lyon"]})
    q = question(["Paris"], text, qid="a")
    record = swap_question(0, q, pool, StubNer({"Paris": "GPE"}))
    assert record["status"] == "accepted" and record["replacement"] == "Lyon"
    corpus = {f"n{k}": {"pid": f"n{k}", "title": "", "text": "Neutral."} for k in range(3)}
    retrieval = {"a": {"hard_negatives": ["n0", "n1", "n2"]}}
    rows, report = build_qx_rows([q], [record], retrieval, corpus, 42, counter, max_tokens=200)
    (row,) = rows
    cut = {p["role"]: p for p in row["passages"] if "truncated_from_tokens" in p}
    assert set(cut) == {"gold", QC_ROLE} and row["context_tokens"] <= 200
    assert cut["gold"]["text"].endswith("hay Paris") and cut[QC_ROLE]["text"].endswith("hay Lyon")
    assert cut["gold"]["window_start_token"] == cut[QC_ROLE]["window_start_token"] > 0
    assert row["original_in_context"] and row["replacement_in_context"]
    assert report["original_cut_by_token_cap"] == report["replacement_cut_by_token_cap"] == 0


def test_qx_rows_hold_the_gold_passage_and_its_swapped_twin(counter) -> None:
    pool = EntityPool({"GPE": ["Lyon"]})
    questions = [
        question(["Paris"], "He lived in Paris for years.", qid="a"),
        question(["Rome"], "She lived in Rome.", qid="b"),  # no pool entity: no swap
        question(["Berlin"], "They met in Berlin.", qid="c"),
        question(["Madrid"], "We met in Madrid.", qid="d"),
    ]
    ner = StubNer({"Paris": "GPE", "Berlin": "GPE", "Madrid": "GPE"})
    records = [swap_question(i, q, pool, ner) for i, q in enumerate(questions)]
    assert [r["status"] for r in records] == ["accepted", "skipped", "accepted", "accepted"]
    corpus = {
        f"n{k}": {"pid": f"n{k}", "title": f"N{k}", "text": f"Neutral text {k}."} for k in range(8)
    }
    corpus["lyon"] = {"pid": "lyon", "title": "Cities", "text": "Lyon is in France."}
    corpus["paris"] = {"pid": "paris", "title": "Paris", "text": "Capital city."}
    retrieval = {
        "a": {"hard_negatives": ["lyon", "paris", "n0", "n1", "n2", "n3", "n4"]},
        "b": {"hard_negatives": ["n0", "n1", "n2", "n3"]},
        "c": {"hard_negatives": ["n5", "n6", "lyon"]},  # two clean ones: too few
        "d": {"hard_negatives": ["n5", "lyon", "n6", "n7"]},  # three: enough for QX, not QC
    }
    rows, report = build_qx_rows(questions, records, retrieval, corpus, seed=42, counter=counter)
    assert [r["qid"] for r in rows] == ["a", "d"]
    assert report["qx_rows"] == 2 and report["condition"] == "QX"
    assert report["dropped_insufficient_clean_hard_negatives"] == ["c"]
    row = rows[0]
    assert row["condition"] == "QX" and len(row["passages"]) == 5
    roles = Counter(p["role"] for p in row["passages"])
    assert roles == {"gold": 1, QC_ROLE: 1, HARD_NEGATIVE: 3}
    negatives = [p["pid"] for p in row["passages"] if p["role"] == HARD_NEGATIVE]
    assert sorted(negatives) == ["n0", "n1", "n2"]
    gold = next(p for p in row["passages"] if p["role"] == "gold")
    swapped = next(p for p in row["passages"] if p["role"] == QC_ROLE)
    assert gold["text"] == "He lived in Paris for years."
    assert swapped["text"] == "He lived in Lyon for years."
    assert row["replacement"] == "Lyon" and row["tier"] == "3" and row["entity_type"] == "GPE"
    assert row["answer_in_context"] is True
    assert row["original_in_context"] is True and row["replacement_in_context"] is True
    # the QC construction: gold first, then the swapped twin and the negatives, shuffled
    # with Random(seed + i)
    expected = ["gold", QC_ROLE, "n0", "n1", "n2"]
    random.Random(42 + 0).shuffle(expected)
    assert [p["role"] if p["role"] != HARD_NEGATIVE else p["pid"] for p in row["passages"]] == (
        expected
    )
    # QC on the same inputs keeps fewer questions (it needs one clean negative more)
    qc_rows, _ = build_qc_rows(questions, records, retrieval, corpus, seed=42, counter=counter)
    assert [r["qid"] for r in qc_rows] == ["a"]
    with pytest.raises(ValueError, match="at least 2 passages"):
        build_qx_rows(questions, records, retrieval, corpus, 42, counter, n_passages=1)
    # QX keeps exactly QC's questions: the ones QC lacks are dropped and named
    rows, report = swapped_condition_rows(
        "QX", questions, records, retrieval, corpus, qc_rows, seed=42, counter=counter
    )
    assert [r["qid"] for r in rows] == ["a"]
    assert (report["qx_rows"], report["dropped_not_in_qc"]) == (1, ["d"])


def test_qc_rows_refuse_records_from_another_question_order(counter) -> None:
    q = question(["Paris"], "He lived in Paris.", qid="a")
    record = swap_question(3, q, EntityPool({"GPE": ["Lyon"]}), StubNer({"Paris": "GPE"}))
    with pytest.raises(DataError, match="position 0"):
        build_qc_rows([q], [record], {"a": {"hard_negatives": []}}, {}, 42, counter)


# --- NER backends -----------------------------------------------------------------------------


def test_table4_labels_map_eight_prompts_to_the_internal_types() -> None:
    assert GLINER_LABELS == {
        "person": "PERSON",
        "organization": "ORG",
        "country": "GPE",
        "city": "GPE",
        "nationality or group": "NORP",
        "location": "LOC",
        "event": "EVENT",
        "work of art": "WORK_OF_ART",
    }
    assert set(GLINER_LABELS.values()) == set(INTERNAL_TYPES)


def test_spacy_backend_maps_ontonotes_labels_and_batches(spacy_dir) -> None:
    ner = SpacyNer(spacy_dir)
    assert isinstance(ner, NerBackend)
    texts = ["On 25 July 2017, Ram Nath Kovind took office as President of India.", ""]
    batch = ner.predict(texts)
    assert [(s.text, s.type) for s in batch[0]] == [("Ram Nath Kovind", "PERSON"), ("India", "GPE")]
    assert batch[1] == []  # and DATE was dropped above
    for span in batch[0]:
        assert texts[0][span.start : span.end] == span.text
    assert ner.predict(texts[:1]) == batch[:1]
    with pytest.raises(ValueError, match="unknown NER backend"):
        load_ner("flair", spacy_dir)


def test_chunk_text_keeps_offsets_and_word_limits() -> None:
    text = "One two three. Four five six seven. Eight nine ten eleven twelve thirteen fourteen."
    chunks = chunk_text(text, 5)
    for offset, piece in chunks:
        assert text[offset : offset + len(piece)] == piece and len(piece.split()) <= 5
    assert " ".join(p for _, p in chunks).split() == text.split()
    assert chunk_text("short text", 50) == [(0, "short text")]


@pytest.fixture(scope="module")
def tiny_gliner_dir(tmp_path_factory, encoder_dir) -> Path:
    """A random tiny GLiNER (1-layer BERT backbone, MiniLM vocabulary) saved locally."""
    model_dir, _ = build_tiny_gliner(tmp_path_factory.mktemp("gliner"), encoder_dir)
    return model_dir


def test_gliner_backend_on_a_tiny_random_model(tiny_gliner_dir) -> None:
    ner = load_ner("gliner", tiny_gliner_dir, threshold=0.0, max_words=12)
    assert isinstance(ner, GlinerNer) and ner.threshold == 0.0
    text = (
        "Barack Obama visited Paris in France. The Beatles played in London. "
        "Ram Nath Kovind took office in India after the election in July."
    )
    spans = ner.predict([text, ""])
    assert spans[1] == [] and spans[0]
    for span in spans[0]:
        assert text[span.start : span.end] == span.text and span.type in INTERNAL_TYPES
    assert max(s.end for s in spans[0]) > len(text.split(". ")[0])  # past the first chunk
    strict = load_ner("gliner", tiny_gliner_dir, threshold=0.99)
    assert strict.predict([text]) == [[]]  # an untrained model is never that sure


def test_swap_pipeline_runs_on_the_gliner_backend(tiny_gliner_dir) -> None:
    ner = NerCache(load_ner("gliner", tiny_gliner_dir, threshold=0.0))
    questions = [
        question(["Linda Warren"], "Linda Warren met Barack Obama in Paris.", qid="a"),
        question(["1939"], "Built in 1939 by Robert Moses.", qid="b"),
    ]
    records, pool = build_swaps(questions, ner, seed=42)
    assert set(pool.entries) <= set(INTERNAL_TYPES) and sum(map(len, pool.entries.values()))
    assert records[1]["tier"] == "1"
    # at threshold 0 the random model tags word pieces of the passage; they drive tier 3/4
    assert records[0]["status"] == "accepted" and records[0]["tier"] in {"3", "4"}
    assert records[0]["entity_type"] in INTERNAL_TYPES
    assert eligibility_summary(records)["leaks"] == 0
