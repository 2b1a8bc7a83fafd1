"""Several construction seeds as one sample: every seed's questions pooled, so that the
metrics (and their paired bootstrap, which resamples questions and keeps each question's
decisions under every policy together) run over all of them at once.

A seed's build of a dataset draws its own questions; the same question drawn by two seeds
is two draws, so each pooled question is named by its seed as well (``<qid>@seed<N>``),
and the questions of the first seed come first, then the second's, each in its own order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from grabrag.contexts.paired import SEED_STRIDE
from grabrag.core.errors import DataError
from grabrag.evaluation.inputs import CellKey

Rows = Sequence[Mapping[str, Any]]


def pooled_qid(qid: str, seed: int) -> str:
    return f"{qid}@seed{seed}"


def _pooled_rows(rows: Rows, seed: int, place: int, label: str) -> list[dict[str, Any]]:
    out = []
    for position, row in enumerate(rows, start=1):
        if "qid" not in row:
            raise DataError(f"{label}, row {position}: 'qid' is missing")
        pooled = {**row, "qid": pooled_qid(row["qid"], seed)}
        if isinstance(row.get("index"), int):
            pooled["index"] = place * SEED_STRIDE + row["index"]
        out.append(pooled)
    return out


def pool_seeds(
    decisions: Mapping[int, Mapping[CellKey, Rows]],
    contexts: Mapping[int, Mapping[tuple[str, str], Rows]],
) -> tuple[dict[CellKey, list[dict[str, Any]]], dict[tuple[str, str], list[dict[str, Any]]]]:
    """Decision and context rows of every seed (seed -> cell -> rows, cells named by their
    configured dataset) as the rows of one sample: each cell's rows of all seeds in one
    list, the seeds in the order given. Every seed must have the same cells."""
    seeds = list(decisions)
    if list(contexts) != seeds:
        raise DataError(
            f"the seeds' decision files ({seeds}) and context files ({list(contexts)}) differ"
        )
    pooled_decisions: dict[CellKey, list[dict[str, Any]]] = {}
    pooled_contexts: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for place, seed in enumerate(seeds):
        for name, source, target in (
            ("cell", decisions[seed], pooled_decisions),
            ("contexts", contexts[seed], pooled_contexts),
        ):
            first = decisions[seeds[0]] if name == "cell" else contexts[seeds[0]]
            if set(source) != set(first):
                raise DataError(
                    f"seed {seed} has other {name} keys than seed {seeds[0]}: "
                    f"{sorted(set(source) ^ set(first))}"
                )
            for key, rows in source.items():
                label = f"seed {seed}, {name} {'/'.join(key)}"
                target.setdefault(key, []).extend(_pooled_rows(rows, seed, place, label))
    return pooled_decisions, pooled_contexts
