"""The evaluation's inputs: decision and context rows read from their files (the only file
access of the evaluation), and the question frame of one dataset that checks every cell
against its context rows.

The frame fixes the order of a dataset's questions (every per-question column and the
bootstrap's resample matrix use it), their gold answers and which of them are QC-eligible.
Cells must be complete: a cell's qids must be exactly those of the context rows of its
(dataset, condition), or, for a policy whose method runs on a dataset's first N questions
only (``evidential.n_questions``, ``cdd.n_questions``), of those rows among the first N;
anything else is a DataError naming the cell.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from grabrag.contexts.paired import sample_position
from grabrag.core.conditions import NAMES
from grabrag.core.decisions import ABSTAIN, ANSWER
from grabrag.core.errors import DataError
from grabrag.core.io import read_jsonl

CellKey = tuple[str, str, str, str]  # (model, dataset, condition, policy)


def read_decision_files(
    cells: Iterable[tuple[Mapping[str, str], str | Path]],
) -> dict[CellKey, list[dict[str, Any]]]:
    """Decision rows keyed (model, dataset, condition, policy), from (cell, path) pairs
    whose cell names its ``model``, ``dataset``, ``condition`` and ``policy``."""
    return {
        (c["model"], c["dataset"], c["condition"], c["policy"]): read_jsonl(path)
        for c, path in cells
    }


def read_context_files(
    cells: Iterable[tuple[Mapping[str, str], str | Path]],
) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Context rows keyed (dataset, condition), from (cell, path) pairs whose cell names
    its ``dataset`` and ``condition``."""
    return {(c["dataset"], c["condition"]): read_jsonl(path) for c, path in cells}


class DatasetFrame:
    """Questions of one dataset in a fixed order, their gold answers and QC eligibility."""

    def __init__(self, dataset: str, contexts: Mapping[str, Sequence[Mapping[str, Any]]]):
        self.name = dataset
        self.by_condition: dict[str, dict[str, Mapping[str, Any]]] = {}
        for condition, rows in contexts.items():
            index: dict[str, Mapping[str, Any]] = {}
            for position, row in enumerate(rows, start=1):
                if "qid" not in row or "answers" not in row:
                    raise DataError(
                        f"context rows of {dataset}/{condition}, row {position}: "
                        "'qid' or 'answers' is missing"
                    )
                if row["qid"] in index:
                    raise DataError(
                        f"context rows of {dataset}/{condition}: qid {row['qid']} twice"
                    )
                index[row["qid"]] = row
            self.by_condition[condition] = index
        if not self.by_condition:
            raise DataError(f"no context rows for dataset {dataset}")
        order: dict[str, tuple[int, str]] = {}
        for condition in (*NAMES, *self.by_condition):
            for qid, row in self.by_condition.get(condition, {}).items():
                index_value = row.get("index")
                order.setdefault(
                    qid, (index_value if isinstance(index_value, int) else 10**12, qid)
                )
        self.qids = sorted(order, key=order.__getitem__)
        self.position = {qid: i for i, qid in enumerate(self.qids)}
        self.n = len(self.qids)
        self.gold: dict[str, list[str]] = {}
        for condition in reversed(list(self.by_condition)):
            for qid, row in self.by_condition[condition].items():
                self.gold[qid] = list(row["answers"])
        self.qc = self.by_condition.get("QC", {})
        self.eligible = np.zeros(self.n, dtype=bool)
        for qid in self.qc:
            self.eligible[self.position[qid]] = True

    def cell(
        self,
        key: CellKey,
        rows: Sequence[Mapping[str, Any]],
        first_questions: int | None = None,
    ) -> dict[str, Mapping[str, Any]]:
        """Rows of a cell indexed by qid; they must cover its condition's questions exactly,
        or with ``first_questions`` N, those among the first N questions of the sample."""
        model, dataset, condition, policy = key
        label = f"cell {model}/{dataset}/{condition}/{policy}"
        if condition not in self.by_condition:
            raise DataError(f"{label}: no context rows for {dataset}/{condition}")
        expected = self.by_condition[condition]
        if first_questions is not None:
            source = f"context rows of {dataset}/{condition}"
            expected = {
                qid: row
                for qid, row in expected.items()
                if sample_position(row, source) < first_questions
            }
        index: dict[str, Mapping[str, Any]] = {}
        for position, row in enumerate(rows, start=1):
            for column in ("qid", "decision"):
                if column not in row:
                    raise DataError(f"{label}, row {position}: column {column!r} is missing")
            qid = row["qid"]
            if qid in index:
                raise DataError(f"{label}: qid {qid} appears more than once")
            if row.get("condition") not in (None, condition):
                raise DataError(f"{label}: qid {qid} has condition {row['condition']!r}")
            if row.get("policy") not in (None, policy):
                raise DataError(f"{label}: qid {qid} has policy {row['policy']!r}")
            if row["decision"] not in (ANSWER, ABSTAIN, None):
                raise DataError(f"{label}: qid {qid} has unknown decision {row['decision']!r}")
            index[qid] = row
        unknown = [q for q in index if q not in expected]
        missing = [q for q in expected if q not in index]
        if unknown or missing:
            raise DataError(
                f"{label}: rows do not match the context rows of {dataset}/{condition} "
                f"({len(missing)} questions missing, e.g. {missing[:3]}; {len(unknown)} unknown, "
                f"e.g. {unknown[:3]}"
                + (f", of the first {first_questions} questions" if first_questions else "")
                + "); rerun the rule that writes this cell"
            )
        return index
