"""The knowledge x context split (ours, not a paper's metric): every policy's outcomes at
Q100, Q50, Q0 and QC split by whether the model knows the answer without context (its
closed-book pass answered it correctly, EM against the gold answers) and by what the
context does (supportive at Q100 and Q50, insufficient at Q0, misleading at QC).

Two rates get names of their own, each in one quadrant:

- **over-refusal**: the model knows the answer and the context supports it, yet it
  abstains (Q100 and Q50, among the questions it knows);
- **misled**: the model knows the answer, yet at QC it answers with the planted
  replacement (the paper's echo, normalised match), following the swap over what it knew.

The split needs no model call: the closed-book rows, the decision rows and the context
rows exist already. Each rate has a paired percentile-bootstrap CI over the dataset's
questions, from the same resample matrix (and seed) as the dataset's metrics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from grabrag.core.errors import DataError
from grabrag.evaluation.block import Block, column, rate, total
from grabrag.evaluation.cells import CellColumns
from grabrag.evaluation.evaluate import dataset_seed
from grabrag.evaluation.inputs import DatasetFrame
from grabrag.scoring.answers import ECHO, row_em
from grabrag.scoring.bootstrap import resample_counts

# What the context of each condition does, in the paper's order of the conditions.
CONTEXT_KIND = {
    "Q100": "supportive",
    "Q50": "supportive",
    "Q0": "insufficient",
    "QC": "misleading",
}
KNOWS, DOES_NOT_KNOW = "knows", "does not know"
NO_QUADRANT = "no question of the cell is in this quadrant"
NO_CLOSED_BOOK = "no closed-book row for the model: its knowledge is unknown"


def knowledge(ds: DatasetFrame, closed_book: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """1 where the closed-book pass answered the question correctly (EM), per question in
    the frame's order; a question without a closed-book row is a :class:`DataError`."""
    known = np.zeros(ds.n)
    seen = set()
    for row in closed_book:
        qid = row.get("qid")
        if qid in ds.position:
            known[ds.position[qid]] = row_em(row, ds.gold[qid])
            seen.add(qid)
    missing = [q for q in ds.qids if q not in seen]
    if missing:
        raise DataError(
            f"dataset {ds.name}: {len(missing)} questions have no closed-book row (e.g. "
            f"{missing[:3]}); rerun generate_closed_book"
        )
    return known


def quadrant_block(cell: CellColumns, known: np.ndarray) -> Block:
    """The rows of one cell's two quadrants: questions, answer / abstain / correct rates,
    and the named rate of the quadrant (over-refusal, misled) where it has one."""
    block = Block()
    c = cell.condition
    echo = cell.category[ECHO] if c == "QC" else np.zeros_like(cell.present)
    for who, mask in ((KNOWS, known), (DOES_NOT_KNOW, 1 - known)):
        key = column(c, who)
        for name, values in (
            ("present", cell.present),
            ("answered", cell.answered),
            ("abstained", cell.abstained),
            ("em", cell.em),
            ("echo", echo),
        ):
            block.columns[f"{key}.{name}"] = values * mask
        n = total(f"{key}.present")
        condition = f"{c}|{who}"
        block.add("questions", condition, n, n, NO_QUADRANT, count=True)
        for metric, name in (("answer_rate", "answered"), ("abstain_rate", "abstained")):
            block.add(metric, condition, rate(f"{key}.{name}", f"{key}.present"), n, NO_QUADRANT)
        block.add("em", condition, rate(f"{key}.em", f"{key}.present"), n, NO_QUADRANT)
        if who == KNOWS and CONTEXT_KIND[c] == "supportive":
            over = rate(f"{key}.abstained", f"{key}.present")
            block.add("over_refusal", condition, over, n, NO_QUADRANT)
        if c == "QC":
            followed = rate(f"{key}.echo", f"{key}.present")
            block.add("misled" if who == KNOWS else "echo", condition, followed, n, NO_QUADRANT)
    return block


def knowledge_context_rows(
    dataset: str,
    decisions: Mapping[tuple[str, str, str], Sequence[Mapping[str, Any]]],
    closed_book: Mapping[str, Sequence[Mapping[str, Any]]],
    contexts: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    n_resamples: int,
    seed: int,
    confidence_level: float,
    question_limits: Mapping[str, int] | None = None,
) -> list[dict[str, Any]]:
    """Tidy rows (model, dataset, policy, condition, context, knowledge, metric, value,
    ci_low, ci_high, n, reason) of one dataset. ``decisions``: (model, condition, policy)
    -> rows, the conditions of :data:`CONTEXT_KIND` only; ``closed_book``: model -> its CB
    rows; ``contexts``: condition -> context rows; ``question_limits``: policy -> N for a
    policy that runs on the first N questions only."""
    ds = DatasetFrame(dataset, contexts)
    counts = resample_counts(ds.n, n_resamples, dataset_seed(seed, dataset), dtype=np.float32)
    known: dict[str, np.ndarray] = {}
    out = []
    for (model, condition, policy), rows in sorted(decisions.items()):
        if condition not in CONTEXT_KIND:
            continue
        if model not in closed_book:
            raise DataError(f"{model}/{dataset}: {NO_CLOSED_BOOK}")
        if model not in known:
            known[model] = knowledge(ds, closed_book[model])
        limit = (question_limits or {}).get(policy)
        indexed = ds.cell((model, dataset, condition, policy), rows, limit)
        cell = CellColumns(ds, condition, indexed, policy)
        head = {"model": model, "dataset": dataset, "policy": policy}
        for row in quadrant_block(cell, known[model]).run(counts, confidence_level, head):
            condition_name, who = row["condition"].split("|")
            out.append(
                {
                    **row,
                    "condition": condition_name,
                    "context": CONTEXT_KIND[condition_name],
                    "knowledge": who,
                }
            )
    return out
