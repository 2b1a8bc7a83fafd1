"""Checking the QC swaps once they are built (GRAB-RAG Appendix C, Table 6).

The eligibility summary with its leak recount, the flat swap table for a spreadsheet, the
uniform sample of the QC questions for the paper's manual quality audit and the reader of
the filled audit, and the comparison with Longpre et al.'s (2021) own substitutions on
BIG-bench NQ.
"""

from __future__ import annotations

import csv
import random
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from grabrag.contexts.entity_pool import NerCache, as_ner_cache
from grabrag.contexts.ner import NerBackend
from grabrag.contexts.swap_spans import boundary_pattern, occurrences, value_type
from grabrag.contexts.swap_tiers import TIERS
from grabrag.contexts.swaps import accepted
from grabrag.core.errors import DataError
from grabrag.core.io import write_csv
from grabrag.core.text import contains_alias, normalize_answer

AUDIT_QUALITIES = ("fluent", "borderline", "broken")


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


def excerpt(text: str, needle: str, width: int = 200) -> str:
    """``width`` characters either side of the first mention of ``needle`` (on word
    boundaries, any case), with an ellipsis where cut; the text's start when absent."""
    match = re.search(boundary_pattern(needle), text, re.IGNORECASE) if needle else None
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


def audit_sample(
    records: Sequence[dict[str, Any]],
    qc_rows: Sequence[dict[str, Any]],
    n: int = 100,
    seed: int = 42,
) -> list[dict]:
    """The paper's manual audit of one dataset (Appendix C: 100 per dataset, a uniform
    random draw from its QC-eligible set): ``n`` of the questions of the QC context rows,
    drawn with ``random.Random(seed)``, with their swaps and a blank ``quality``.

    The frame is the QC rows, not every accepted swap: QC drops a swap with too few clean
    hard negatives, and a rated question outside QC would have no HwSA@QC to recompute
    (Table 6). The draw order is the rows' order, so the rater sees no tier order.
    Fill ``quality`` with fluent, borderline or broken (Appendix C rubric).
    """
    swaps = {r["qid"]: r for r in accepted(records)}
    frame = []
    for row in qc_rows:
        record = swaps.get(row["qid"])
        if record is None:
            raise DataError(
                f"QC row {row['qid']} has no accepted swap in the swaps file; rebuild the QC "
                "contexts from these swaps"
            )
        frame.append(record)
    chosen = random.Random(seed).sample(frame, min(n, len(frame)))
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
                "original_excerpt": excerpt(r["passage"]["text"], r["original_span"]),
                "modified_excerpt": excerpt(r["modified_passage"]["text"], r["replacement"]),
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
    for start, end in occurrences(text, target)[:1]:
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
    cache = as_ner_cache(ner)
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
