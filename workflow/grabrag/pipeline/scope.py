"""What a config's sections scope: the policies that read a source, the policies a method
section owns, the datasets a method runs on (the run model and the plan ask), and the
file each policy input is in a cell."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from grabrag.core import outputs, registry
from grabrag.core.conditions import TRUTHFULQA
from grabrag.pipeline.cells import Cell, cell_file
from grabrag.pipeline.files import (
    CDD_CELL_FILE,
    CDD_TRACE_FILE,
    CONTEXT_FILE,
    EVIDENTIAL_FILE,
    GENERATION_FILE,
    METHOD_CONTEXT_FILE,
    NLI_FILE,
)

# The file of each registry source in a policy's cell; ``key`` (the input's name in the
# policy's declaration) names the prompt's or the policy's file where a source has several.
_SOURCE_FILES = {
    registry.GENERATION: lambda cell, key: cell_file(GENERATION_FILE, cell, prompt=key),
    registry.NLI: lambda cell, key: cell_file(NLI_FILE, cell),
    registry.EVIDENTIAL: lambda cell, key: cell_file(EVIDENTIAL_FILE, cell, policy=key),
    registry.CDD_TRACES: lambda cell, key: cell_file(CDD_TRACE_FILE, cell),
    registry.CDD_CELL: lambda cell, key: cell_file(CDD_CELL_FILE, cell, policy=key),
}


def policies_reading(policies: Sequence[str], source: str) -> list[str]:
    """The policies among ``policies`` whose registry entry reads ``source`` (one of
    :data:`grabrag.core.registry.SOURCES`): e.g. the NLI verdicts, the CDD traces."""
    return [p for p in policies if source in registry.policy(p).inputs.values()]


def scoped_policies(config: Mapping[str, Any], section: str) -> list[str]:
    """The configured policies a method's config section (``evidential``, ``cdd``) scopes."""
    return [p for p in config["policies"]["names"] if registry.policy(p).scope == section]


def method_datasets(config: Mapping[str, Any], section: str) -> list[str]:
    """The configured datasets a method runs on (``<section>.datasets``, null = all), in
    the config's order."""
    names = config[section].get("datasets")
    return [d for d in config["datasets"] if names is None or d in names]


def method_context_files(
    config: Mapping[str, Any], section: str, cell: Cell, conditions: Sequence[str]
) -> list[str]:
    """The context rows a method's job (``evidential``, ``cdd``) reads at each of
    ``conditions``: the condition's, or with ``<section>.n_questions`` N those of the
    dataset's first N questions (rule method_contexts); the probe's always in full."""
    limit = config[section]["n_questions"]
    full = limit is None or cell["dataset"] == TRUTHFULQA
    pattern = CONTEXT_FILE if full else METHOD_CONTEXT_FILE
    return [cell_file(pattern, cell, condition=c, questions=limit) for c in conditions]


def policy_input_file(source: str, key: str, cell: Cell, closed_book_file: str) -> str:
    """The file one policy input (``key``: ``source``) is in a policy's ``cell``: a registry
    source's; the CB pass's ``closed_book_file`` (a variant reuses its base dataset's); or,
    for a method a module adds, the same cell's file of the output kind it names."""
    if source == registry.CLOSED_BOOK_PASS:
        return closed_book_file
    if source in _SOURCE_FILES:
        return _SOURCE_FILES[source](cell, key)
    return cell_file(outputs.output(source).pattern, cell)
