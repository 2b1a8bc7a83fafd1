"""The policies the workflow knows, each declared once, and the features of a config that
decide which tables and figures it produces (:class:`Features`).

A :class:`Policy` says what the policy is called, which stored files it reads (in terms
the rules turn into paths: :data:`SOURCES`), how it decides, which of its config settings
it depends on, and whether the policy tables and the figures that compare every policy
show it. The rules (``rules/common.smk``), the config check, the policy, metrics, table
and figure scripts all read this registry, so adding a policy is one module that calls
:func:`register` plus a config entry naming it::

    policies:
      modules: [path/to/my_policy.py]     # or an importable module name
      names: [P0, P1, ..., MY_POLICY]
      options: {MY_POLICY: {...}}         # its settings, when it has any

The built-in policies register themselves in :mod:`grabrag.policies.paper`, in the order every
table and figure lists them; a module's policies come after them, in registration order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grabrag.core.conditions import NAMES
from grabrag.core.plugins import load_modules  # noqa: F401  (the config check and tests call it here)

# Where a policy's input comes from, per model x dataset x condition cell. The key the
# rows arrive under in ``decide`` names the file where a source holds several:
GENERATION = "generation"  # generation/<m>/<d>/<condition>/<key>.jsonl (a prompt's cell)
CLOSED_BOOK = "closed_book"  # generation/<m>/<d>/Qclosed/CB.jsonl (the question's CB pass)
NLI = "nli"  # nli/<m>/<d>/<condition>.jsonl (the verifier's labels)
EVIDENTIAL = "evidential"  # evidential/<m>/<d>/<condition>/<key>.jsonl
CDD_TRACES = "cdd_traces"  # cdd/<m>/<d>/<condition>/traces.jsonl
CDD_CELL = "cdd"  # cdd/<m>/<d>/<condition>/<key>.jsonl (a prompt-only baseline's rows)
SOURCES = (GENERATION, CLOSED_BOOK, NLI, EVIDENTIAL, CDD_TRACES, CDD_CELL)

PAPER_POLICIES = ("P0", "P1", "P2", "P3", "P4")
"""GRAB-RAG's own policies: the paper's macro averages (Table 3, Table 6's macro row,
section 6) pool these only, so adding a policy leaves those numbers as they were."""

Rows = Sequence[Mapping[str, Any]]
Decide = Callable[[Mapping[str, Rows], Mapping[str, Any]], list[dict[str, Any]]]


def own_options(name: str) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """The default settings of a policy: its entry under ``policies.options``."""

    def settings(config: Mapping[str, Any]) -> dict[str, Any]:
        return dict(config["policies"]["options"].get(name, {}))

    return settings


@dataclass(frozen=True)
class Policy:
    """One abstention policy.

    ``decide(inputs, settings)`` gets the rows of each input keyed as in ``inputs`` and the
    dict ``settings(config)`` returns (the policy job's only params, so editing another
    policy's setting reruns nothing of this one), and returns one decision row per
    question: ``qid, index, condition, policy, decision, answer, confidence, rule``.
    """

    name: str
    decide: Decide
    inputs: Mapping[str, str]  # key -> one of SOURCES
    label: str | None = None  # figure legends; default: the name
    printed: str | None = None  # tables; default: the name
    title: str | None = None  # Table 2's row name; default: the label
    colour: str | None = None  # figures; default: one of a spare palette
    settings: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
    scope: str | None = None  # config section whose `datasets` list scopes it
    in_policy_tables: bool = True  # Tables 1, 2, 7, 8, 10, normalised HwSA, selection bias...
    in_figures: bool = True  # the figures that draw every policy

    def __post_init__(self) -> None:
        unknown = sorted(set(self.inputs.values()) - set(SOURCES))
        if unknown:
            raise ValueError(
                f"policy {self.name}: unknown input source {', '.join(unknown)} "
                f"(known: {', '.join(SOURCES)})"
            )

    @property
    def described(self) -> str:
        """The name with a word on what it is, as Table 2 prints it."""
        return self.title or self.label or self.name

    def config_settings(self, config: Mapping[str, Any]) -> dict[str, Any]:
        return dict((self.settings or own_options(self.name))(config))


_REGISTRY: dict[str, Policy] = {}


@dataclass(frozen=True)
class Features:
    """What a config turns on that decides which tables (and figures) it produces."""

    conditions: tuple[str, ...] = NAMES
    evidential: bool = False  # EvidentialRAG policies configured (on some dataset)
    cdd_family: bool = False  # CDD, CDD-alpha or a prompt-only baseline configured
    cdd_traces: bool = False  # CDD or CDD-alpha: their traces exist
    cdd_diagnostics: bool = False  # cdd.diagnostics with traces
    audited: bool = False  # some dataset's QC audit is filled in
    seed_sensitivity: bool = False  # a seed variant is configured


def register(policy: Policy) -> Policy:
    """Add ``policy``; a second policy under a registered name is an error."""
    if policy.name in _REGISTRY and _REGISTRY[policy.name] is not policy:
        raise ValueError(f"a policy named {policy.name} is already registered")
    _REGISTRY[policy.name] = policy
    return policy


def policies() -> dict[str, Policy]:
    """Every registered policy by name, built-ins first."""
    from grabrag.policies import paper as _builtin  # noqa: F401  (registers the built-in policies)

    return dict(_REGISTRY)


def policy(name: str) -> Policy:
    known = policies()
    if name not in known:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(known)}")
    return known[name]


def names() -> list[str]:
    return list(policies())
