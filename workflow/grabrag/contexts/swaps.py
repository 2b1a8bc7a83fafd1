"""The QC (misleading context) entity-swap pipeline: GRAB-RAG section 3.3 and Appendix C.

For each question the pipeline finds the answer in a gold passage and replaces it with a
plausible wrong span, or records why no clean swap exists. Every rule below is the
paper's, in its order; where the paper is silent, the choice made is said in a comment
marked "Choice:".

1. Entity pool (``entity_pool.py``): NER over all gold passages; spans pass the
   span-validity filters (all types) and the type-specific quality filters, then NORP
   entries leave GPE and LOC.
2. Answer-span location (``swap_spans.py``): word-boundary regex; retry after stripping
   outer quotes, brackets and parentheses.
3. Pre-swap skips (``swap_spans.py``): a "(born ...)" parenthetical sharing a token with
   the answer, or an answer token of >= 6 characters in possessive form ("token's").
4. Tiers (``swap_tiers.py``), in order, first accepted swap wins: 1 year, 1b embedded
   year, 2 numeric, 3 NER replacement (NORP first for demonym adjectives), 4 sub-entity.
5. Replacement selection (``swap_tiers.py``), post-swap filters (``swap_spans.py``), and
   here: global replacement of every mention, full substitution of the other aliases,
   a/an correction, alias scrubbing, the adjacent-duplicate discard and the leakage
   check. The pool's candidates are tried in seeded order until one passes every filter
   (a question is dropped only when no clean swap is possible); each record says how many
   were tried. A definite article before an answer that is a whole entity goes with the
   swapped span (Table 5).

This module is the per-question driver: it runs the steps above on each question and
writes its accepted or skipped record. All randomness of question i (0-based position)
comes from ``random.Random(seed + i)``. The eligibility summary and the manual audit of
the swaps are ``audit.py``; the QC and QX context rows built from them are
``swapped.py``.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from grabrag.contexts.entity_pool import (
    EntityPool,
    NerCache,
    as_ner_cache,
    build_entity_pool,
    gold_passage_texts,
)
from grabrag.contexts.ner import NerBackend
from grabrag.contexts.swap_spans import (
    Located,
    _aliases,
    _tokens,
    adjacent_duplicate,
    born_parenthetical_overlap,
    locate_answer,
    possessive_answer_token,
    post_swap_reason,
    strip_outer,
    substitute_all,
)
from grabrag.contexts.swap_tiers import (
    ACCEPTANCE,
    NO_CANDIDATE,
    NOT_APPLICABLE,
    POST_FILTER,
    Plan,
    TierFailure,
    _tier_embedded_year,
    _tier_ner,
    _tier_numeric,
    _tier_sub_entity,
    _tier_year,
)
from grabrag.core.progress import Progress
from grabrag.core.text import contains_alias, normalize_answer

_LEADING_ARTICLE = re.compile(r"(?:the|a|an)\s+(?=\S)", re.IGNORECASE)


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


# The tiers of one question, in the paper's order: (tier, its plans, drawn when tried).
TierPlans = list[tuple[str, Callable[[], Iterable[Plan]]]]


def _locate(question: dict[str, Any], aliases: Sequence[str]) -> Located | tuple[str, str]:
    """The located answer, or (skip reason, detail) when there is none to swap or a
    pre-swap skip applies."""
    if not aliases:
        return "no_answer", ""
    if not any(p["text"].strip() for p in question.get("gold_passages") or []):
        return "no_gold_passage", ""
    located = locate_answer(question)
    if located is None:
        return "answer_not_located", ""
    text = question["gold_passages"][located.passage_index]["text"]
    born = born_parenthetical_overlap(text, aliases)
    if born:
        return "born_parenthetical", born
    possessive = possessive_answer_token(text, aliases)
    if possessive:
        return "possessive_answer_token", possessive
    return located


def _tier_plans(
    located: Located,
    text: str,
    cache: NerCache,
    pool: EntityPool,
    rng: random.Random,
    aliases: Sequence[str],
) -> TierPlans:
    """Each tier with the plans it offers for the located answer, drawn only when the
    tier is tried (the earlier tiers' draws come first from the one ``rng``)."""
    core = located.text
    return [
        ("1", lambda: [_tier_year(core, rng)]),
        ("1b", lambda: [_tier_embedded_year(core, rng)]),
        ("2", lambda: [_tier_numeric(core, rng)]),
        ("3", lambda: _tier_ner(located, text, cache, pool, rng, aliases)),
        ("4", lambda: _tier_sub_entity(located, text, cache, pool, rng, aliases)),
    ]


def _first_accepted_tier(
    tiers: TierPlans,
    passage: dict[str, Any],
    located: Located,
    aliases: Sequence[str],
    max_candidates: int | None,
    attempts: dict[str, str],
    tried_by_tier: dict[str, int],
    failures: list[tuple[int, int, TierFailure]],
) -> tuple[str, Plan, dict[str, Any], Counter[str]] | None:
    """(tier, plan, applied swap, rejected candidates) of the first tier whose swap is
    accepted, None when none is. Every tier tried records its failure reason in
    ``attempts``, its candidates tried in ``tried_by_tier`` and its failure (with its
    depth and order) in ``failures``."""
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
        return tier, plan, applied, rejected
    return None


def _accepted_record(
    index: int,
    question: dict[str, Any],
    passage: dict[str, Any],
    located: Located,
    aliases: Sequence[str],
    seed: int,
    won: tuple[str, Plan, dict[str, Any], Counter[str]],
    attempts: dict[str, str],
    tried_by_tier: dict[str, int],
) -> dict[str, Any]:
    """The record of an accepted swap: the passage before and after, the swapped span,
    the tier and its bookkeeping."""
    tier, plan, applied, rejected = won
    text = passage["text"]
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


def _no_swap(
    index: int,
    question: dict[str, Any],
    failures: list[tuple[int, int, TierFailure]],
    attempts: dict[str, str],
    tried_by_tier: dict[str, int],
) -> dict[str, Any]:
    """The skip record when no tier swapped: the failure that got furthest (the later
    tier on a tie), or "no_applicable_tier" when no tier applied at all."""
    deepest = max(failures, key=lambda f: (f[0], f[1]))
    extra = {"tier_attempts": attempts, "candidates_tried_by_tier": tried_by_tier}
    if deepest[0] == NOT_APPLICABLE:
        return _skip(index, question, "no_applicable_tier", "", **extra)
    failure = deepest[2]
    return _skip(index, question, failure.reason, failure.detail, **extra)


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
    located = _locate(question, aliases)
    if not isinstance(located, Located):
        return _skip(index, question, *located)
    passage = question["gold_passages"][located.passage_index]
    tiers = _tier_plans(located, passage["text"], cache, pool, rng, aliases)
    attempts: dict[str, str] = {}
    tried_by_tier: dict[str, int] = {}
    failures: list[tuple[int, int, TierFailure]] = []
    won = _first_accepted_tier(
        tiers, passage, located, aliases, max_candidates, attempts, tried_by_tier, failures
    )
    if won is None:
        return _no_swap(index, question, failures, attempts, tried_by_tier)
    return _accepted_record(
        index, question, passage, located, aliases, seed, won, attempts, tried_by_tier
    )


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
