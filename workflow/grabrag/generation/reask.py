"""The re-ask audit: is a model's decoding as deterministic as the run assumes?

Greedy decoding is deterministic on one call at a time, but batched decoding (the
in-process ``batch``) and a serving engine under concurrent load (a served model's
``concurrency``) change the shape of the arithmetic, and a near tie between two tokens can
then flip. The audit measures it instead of assuming it: the first ``questions`` questions
of every generation cell (model x dataset x condition, the context prompts P0-P2) are sent
again at another concurrency, never from the response cache, and each re-asked call's
decision is compared with the cell's own (:func:`compare_rows`; the table:
:func:`grabrag.report.reask_table.agreement_table`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# The fields of a generation row the audit compares, coarsest first.
COMPARED = ("decision", "answer", "confidence", "raw")


def own_concurrency(model: Mapping[str, Any]) -> int:
    """How many calls a model entry's jobs decode side by side: a served model's
    ``endpoint.concurrency``, a GGUF's ``batch``."""
    endpoint = model.get("endpoint")
    if endpoint:
        return int(endpoint.get("concurrency", 1))
    return int(model.get("batch", 1))


def audit_concurrency(model: Mapping[str, Any], configured: int | None) -> int:
    """The concurrency of the re-ask: the configured one, or by default another than the
    model's own (one call at a time for a model that decodes side by side, else 4)."""
    if configured is not None:
        return configured
    return 1 if own_concurrency(model) > 1 else 4


def audit_model(model: Mapping[str, Any], concurrency: int) -> dict[str, Any]:
    """The model entry the re-ask job opens: the same model at the audit's concurrency."""
    endpoint = model.get("endpoint")
    if endpoint:
        return {**model, "endpoint": {**endpoint, "concurrency": concurrency}}
    return {**model, "batch": concurrency}


def reasked_questions(context_rows: Sequence[dict[str, Any]], questions: int) -> list[dict]:
    """The rows the audit sends again: the cell's first ``questions``, in file order."""
    return list(context_rows[:questions])


def compare_rows(
    original: Sequence[Mapping[str, Any]], reasked: Sequence[Mapping[str, Any]]
) -> dict[str, int]:
    """For each compared field, how many re-asked calls match the cell's own call of the
    same question and prompt (``calls``: how many were compared). Answers count as the
    same only where the decisions are, confidences only where the answers are too, and so
    on, so each count is at most the one before."""
    by_call = {(row["qid"], row["prompt"]): row for row in original}
    counts = {"calls": 0, **dict.fromkeys(COMPARED, 0)}
    for row in reasked:
        mine = by_call.get((row["qid"], row["prompt"]))
        if mine is None:
            raise ValueError(
                f"re-asked question {row['qid']!r} ({row['prompt']}) is not in its "
                "generation cell: the cell was rebuilt after the audit; rerun the audit"
            )
        counts["calls"] += 1
        for field in COMPARED:
            if row.get(field) != mine.get(field):
                break
            counts[field] += 1
    return counts


def pooled_agreement(
    cells: Sequence[Mapping[str, Any]],
    reasked: Sequence[Sequence[Mapping[str, Any]]],
    originals: Sequence[Sequence[Mapping[str, Any]]],
) -> dict[str, dict[str, int]]:
    """:func:`compare_rows` of every audited cell (``reasked[i]`` and ``originals[i]``:
    cell ``i``'s re-asked rows and its own rows of every context prompt), summed per
    model in the cells' order."""
    pooled: dict[str, dict[str, int]] = {}
    for cell, again, own in zip(cells, reasked, originals, strict=True):
        counts = compare_rows(own, again)
        total = pooled.setdefault(cell["model"], dict.fromkeys(counts, 0))
        for key, value in counts.items():
            total[key] += value
    return pooled
