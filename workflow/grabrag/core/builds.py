"""The names of the datasets a run builds besides the configured ones, declared once.

A configured dataset (an entry of ``datasets``) can be built twice more, each time as a
dataset of its own with its own results folders:

- a **seed replicate** ``<dataset>_seed<N>``: the whole dataset drawn again with a further
  construction seed N of ``seeds`` (new questions, corpus, contexts, swaps, model passes);
- Table 13's **sensitivity variant** ``<dataset>_seed<N>`` of ``seed_sensitivity``: the
  *same* questions, corpus and retrieval, their contexts and swaps redone with seed N.

Both keep the folder name the seed gives them (results of earlier runs stay where they
are); the config check rejects a ``seed_sensitivity.seed`` that ``seeds`` also lists, so
one name never means both. The code calls them by their two names: a replicate is about
``seeds``, a variant about Table 13.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def replicate_name(dataset: str, seed: int, base_seed: int) -> str:
    """A configured dataset as built with one construction seed: itself for the base seed."""
    return dataset if seed == base_seed else f"{dataset}_seed{seed}"


def sensitivity_variant_name(sensitivity: Mapping[str, Any]) -> str:
    """Table 13's variant of ``seed_sensitivity``'s dataset, rebuilt with its seed."""
    return f"{sensitivity['dataset']}_seed{sensitivity['seed']}"


def audited_datasets(config: Mapping[str, Any]) -> list[str]:
    """The datasets whose QC audit sample a person has rated (``qc.audit_filled``), in the
    config's order (Table 6)."""
    return [d for d in config["datasets"] if d in config["qc"]["audit_filled"]]
