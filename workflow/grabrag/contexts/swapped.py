"""The context conditions built from the QC swaps (GRAB-RAG section 3.3): QC, the swapped
gold passage among hard negatives, and QX (ours), the original gold passage beside its
swapped twin. Shuffle, token cap and rendering are ``contexts.build_context_row``'s, so QC
and QX rows read like the other conditions' rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grabrag.contexts.paired import GOLD, HARD_NEGATIVE, TokenCounter, build_context_row
from grabrag.contexts.swaps import accepted
from grabrag.core.errors import DataError
from grabrag.core.text import contains_alias
from grabrag.data.retrieval import passage_text

QC_ROLE = "swapped_gold"
GOLD_ROLE = GOLD  # the original gold passage beside its swapped twin (QX)


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
        # The cap keeps the planted replacement in the swapped passage and the answer in
        # QX's original one, as it keeps a gold passage's answer in Q100 and Q50.
        keep = {QC_ROLE: planted, GOLD_ROLE: aliases}
        row = build_context_row(
            index, question, condition, passages, seed, counter, max_tokens, keep
        )
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


# What each swapped condition is built by, and the question set it is restricted to.
_SWAPPED = {
    # QC stays a subset of the paired question set: a question dropped from Q0 for too few
    # hard negatives is dropped here too.
    "QC": (build_qc_rows, "dropped_not_in_paired_set"),
    # QX holds exactly QC's questions: it needs one clean hard negative fewer, so on its own
    # it could keep a question that QC (and so HwSA's pairing) lacks.
    "QX": (build_qx_rows, "dropped_not_in_qc"),
}


def swapped_condition_rows(
    condition: str,
    questions: Sequence[dict[str, Any]],
    swap_records: Sequence[dict[str, Any]],
    retrieval: dict[str, dict[str, Any]],
    corpus: dict[str, dict[str, str]],
    paired: Sequence[dict[str, Any]],
    seed: int,
    counter: TokenCounter,
    n_passages: int = 5,
    max_tokens: int = 1500,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows of ``condition`` (QC or QX) for the questions of the ``paired`` condition's
    rows (Q0 for QC, QC for QX), and the builder's report with the row count and the
    questions dropped for not being there."""
    build, dropped = _SWAPPED[condition]
    rows, report = build(
        questions, swap_records, retrieval, corpus, seed, counter, n_passages, max_tokens
    )
    kept = {r["qid"] for r in paired}
    unpaired = [r["qid"] for r in rows if r["qid"] not in kept]
    rows = [r for r in rows if r["qid"] in kept]
    return rows, {**report, f"{condition.lower()}_rows": len(rows), dropped: unpaired}
