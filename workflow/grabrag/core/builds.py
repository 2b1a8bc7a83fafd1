"""The names of the datasets a run builds besides the configured ones, declared once.

A configured dataset (an entry of ``datasets``) can be built twice more, each time as a
dataset of its own with its own results folders, and each under a name that says which:

- a **seed replicate** ``<dataset>_seed<N>``: the whole dataset drawn again with a further
  construction seed N of ``seeds`` (new questions, corpus, contexts, swaps, model passes);
- Table 13's **sensitivity variant** ``<dataset>_sensitivity<N>`` of ``seed_sensitivity``:
  the *same* questions, corpus and retrieval, their contexts and swaps redone with seed N.

The two never share a name, so a run may list the sensitivity seed in ``seeds`` too; the
config check rejects a configured dataset whose name one of them would take.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any


def replicate_name(dataset: str, seed: int, base_seed: int) -> str:
    """A configured dataset as built with one construction seed: itself for the base seed."""
    return dataset if seed == base_seed else f"{dataset}_seed{seed}"


def sensitivity_variant_name(sensitivity: Mapping[str, Any]) -> str:
    """Table 13's variant of ``seed_sensitivity``'s dataset, rebuilt with its seed."""
    return f"{sensitivity['dataset']}_sensitivity{sensitivity['seed']}"


_DERIVED = re.compile(r"^(?P<base>.+)_(?:seed|sensitivity)[0-9]+$")


def derived_base(name: str) -> str | None:
    """The configured dataset a replicate's or a variant's name was made from, read off
    the name (None for a name of neither form); for ordering rows, where the config is not
    at hand."""
    match = _DERIVED.match(name)
    return match["base"] if match else None


def audited_datasets(config: Mapping[str, Any]) -> list[str]:
    """The datasets whose QC audit sample a person has rated (``qc.audit_filled``), in the
    config's order (Table 6)."""
    return [d for d in config["datasets"] if d in config["qc"]["audit_filled"]]
