"""What a config's sections scope: the policies that read a source, the policies a method
section owns, and the datasets a method runs on (the run model and the plan ask)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from grabrag.core import registry
from grabrag.core.conditions import TRUTHFULQA
from grabrag.pipeline.cells import Cell, cell_file
from grabrag.pipeline.files import CONTEXT_FILE, METHOD_CONTEXT_FILE


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
