"""The knowledge x context table (ours, not a paper's): each policy's outcomes at Q100, Q50,
Q0 and QC split by whether the model knows the answer closed-book and what the context
does, with over-refusal and misled answers as named rates
(:mod:`grabrag.evaluation.knowledge_context`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from grabrag.core.outputs import CLOSED_BOOK_ROWS, CONTEXT_ROWS, DECISION_ROWS
from grabrag.evaluation.evaluate import policy_sort_key
from grabrag.evaluation.knowledge_context import (
    CONTEXT_KIND,
    DOES_NOT_KNOW,
    KNOWS,
    knowledge_context_rows,
)
from grabrag.report.specs import Sources, TableSpec
from grabrag.report.table_cells import pct_ci
from grabrag.report.tabular import Table, in_order

# The rate columns, by the metric that fills them.
COLUMNS = {
    "answer_rate": "Answered %",
    "abstain_rate": "Abstained %",
    "em": "Correct (EM) %",
    "over_refusal": "Over-refusal %",
    "misled": "Misled %",
}
# The named rates are defined in one quadrant each: blank elsewhere.
NOT_DEFINED = ""


def table_knowledge_context(rows: Sequence[Mapping[str, Any]]) -> Table:
    """One row per (model, dataset, policy, condition, knowledge), from the tidy rows of
    :func:`~grabrag.evaluation.knowledge_context.knowledge_context_rows`."""
    cells: dict[tuple[str, str, str, str, str], dict[str, Mapping[str, Any]]] = {}
    for row in rows:
        key = (row["model"], row["dataset"], row["policy"], row["condition"], row["knowledge"])
        cells.setdefault(key, {})[row["metric"]] = row
    models = in_order("models", {key[0] for key in cells})
    datasets = in_order("datasets", {key[1] for key in cells})
    conditions = list(CONTEXT_KIND)

    def order(key: tuple[str, str, str, str, str]) -> tuple[Any, ...]:
        model, dataset, policy, condition, who = key
        return (
            models.index(model),
            datasets.index(dataset),
            policy_sort_key(policy),
            conditions.index(condition),
            (KNOWS, DOES_NOT_KNOW).index(who),
        )

    out = []
    for key in sorted(cells, key=order):
        model, dataset, policy, condition, who = key
        metrics = cells[key]
        line: dict[str, Any] = {
            "Model": model,
            "Dataset": dataset,
            "Policy": policy,
            "Condition": condition,
            "Context": CONTEXT_KIND[condition],
            "Closed book": who,
            "n": int(metrics["questions"]["value"]),
        }
        for metric, name in COLUMNS.items():
            found = metrics.get(metric)
            line[name] = (
                NOT_DEFINED
                if found is None
                else pct_ci(found["value"], found["ci_low"], found["ci_high"], n=found["n"])
            )
        out.append(line)
    return Table(out)


def _build(s: Sources) -> Table:
    bootstrap = s.setting("bootstrap")
    contexts: dict[str, dict[str, list]] = {}
    for cell, rows in s.read(CONTEXT_ROWS):
        contexts.setdefault(cell["dataset"], {})[cell["condition"]] = rows
    closed_book: dict[str, dict[str, list]] = {}
    for cell, rows in s.read(CLOSED_BOOK_ROWS):
        closed_book.setdefault(cell["dataset"], {})[cell["model"]] = rows
    decisions: dict[str, dict[tuple[str, str, str], list]] = {}
    for cell, rows in s.read(DECISION_ROWS):
        if cell["condition"] in CONTEXT_KIND:
            key = (cell["model"], cell["condition"], cell["policy"])
            decisions.setdefault(cell["dataset"], {})[key] = rows
    tidy = []
    for dataset, cells in decisions.items():
        tidy += knowledge_context_rows(
            dataset,
            cells,
            closed_book.get(dataset, {}),
            contexts[dataset],
            n_resamples=bootstrap["n_resamples"],
            seed=bootstrap["seed"],
            confidence_level=bootstrap["confidence_level"],
            question_limits=s.setting("question_limits"),
        )
    return table_knowledge_context(tidy)


TABLES = (
    TableSpec(
        "knowledge_context",
        _build,
        (DECISION_ROWS, CLOSED_BOOK_ROWS, CONTEXT_ROWS),
        ("bootstrap", "question_limits"),
    ),
)
