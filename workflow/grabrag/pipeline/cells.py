"""Cells and their files: the one vocabulary the run model and the rules share.

A cell is a dict of wildcard values (``{"model": ..., "dataset": ...}``); a rule passes the
cells it reads as a param beside the files they name, so its script learns what each
file is about from the param, never from the path.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any

Cell = Mapping[str, Any]


def stable(mapping: Any) -> Any:
    """A key-sorted copy: params compare by value, so reordering the YAML reruns nothing."""
    return json.loads(json.dumps(mapping, sort_keys=True))


def cells(**values: Sequence[Any]) -> list[dict[str, Any]]:
    """Every combination of the given wildcard values, in ``expand``'s order, each a dict
    such as {"model": ..., "dataset": ...}. A rule passes them as a param beside the files
    :func:`files` names after them: its script learns what each file is about from the
    param, never from the path."""
    return [dict(zip(values, combo, strict=True)) for combo in itertools.product(*values.values())]


def files(pattern: str, keys: Sequence[Cell]) -> list[str]:
    """The file of each key of :func:`cells` (pattern: wildcard names in braces)."""
    return [pattern.format(**key) for key in keys]


def cell_file(pattern: str, cell: Cell, **values: Any) -> str:
    """The file of one job's cell: ``pattern`` filled from its wildcards, ``values`` added
    or in their place (e.g. a policy job's input from another stage of the same cell)."""
    return pattern.format_map({**cell, **values})
