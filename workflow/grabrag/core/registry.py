"""Every policy the workflow knows, each one declaration, and the features of a config that
decide which tables and figures it produces (:class:`Features`).

A :class:`Policy` says what the policy is called (in legends, tables and Table 2), which
family it belongs to and whether it is one of GRAB-RAG's own, which stored files it reads
(in terms the rules turn into paths: :data:`SOURCES`), how it decides, which config
settings it depends on, and which metrics and tables apply to it. Every list of policies
the stages use (the paper's macro averages, the answer ECE of Eqs. 26-27, the route
shares, the CDD tables, the policy tables and figures) is derived from these
declarations, so a policy from a module behaves like a built-in one everywhere.

The built-in policies are declared below, in the order every table and figure lists them;
their ``decide`` is named as ``"module:function"`` and imported only when a policy job
runs, so this module imports nothing of the stages and sits at the bottom of the library.
A config adds policies with a module that calls :func:`register` (see docs/extending.md)::

    policies:
      modules: [path/to/my_policy.py]     # or an importable module name
      names: [P0, P1, ..., MY_POLICY]
      options: {MY_POLICY: {...}}         # its settings, when it has any
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grabrag.core.conditions import CLOSED_BOOK_PROMPT, NAMES
from grabrag.core.plugins import load_modules  # noqa: F401  (the config check and tests call it here)

# Where a policy's input comes from, per model x dataset x condition cell. The key the
# rows arrive under in ``decide`` names the file where a source holds several:
GENERATION = "generation"  # generation/<m>/<d>/<condition>/<key>.jsonl (a prompt's cell)
CLOSED_BOOK_PASS = "closed_book"  # generation/<m>/<d>/Qclosed/CB.jsonl (the CB pass)
NLI = "nli"  # nli/<m>/<d>/<condition>.jsonl (the verifier's labels)
EVIDENTIAL = "evidential"  # evidential/<m>/<d>/<condition>/<key>.jsonl
CDD_TRACES = "cdd_traces"  # cdd/<m>/<d>/<condition>/traces.jsonl
CDD_CELL = "cdd"  # cdd/<m>/<d>/<condition>/<key>.jsonl (a prompt-only baseline's rows)
SOURCES = (GENERATION, CLOSED_BOOK_PASS, NLI, EVIDENTIAL, CDD_TRACES, CDD_CELL)
# The sources a policy's own model passes write: a policy reading none of them costs no
# model call of its own beyond the shared P0-P2, CB and NLI passes.
OWN_PASS_SOURCES = (EVIDENTIAL, CDD_TRACES, CDD_CELL)

# The families a policy belongs to: whose method it is, and so on which page it is described.
GRABRAG, EVIDENTIAL_RAG, CDD = "grabrag", "evidentialrag", "cdd"

Rows = Sequence[Mapping[str, Any]]
Decide = Callable[[Mapping[str, Rows], Mapping[str, Any]], list[dict[str, Any]]]


def own_options(name: str) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """The default settings of a policy: its entry under ``policies.options``."""

    def settings(config: Mapping[str, Any]) -> dict[str, Any]:
        return dict(config["policies"]["options"].get(name, {}))

    return settings


def confidence_settings(*keys: str) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """P3's and P4's settings: ``cutoff`` and ``threshold`` from ``policies``."""
    names = {"cutoff": "confidence_cutoff", "threshold": "f1_threshold"}
    return lambda config: {key: config["policies"][names[key]] for key in keys}


def gate_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """CDD-alpha's settings: its contradiction gate and the lexical gate's threshold."""
    return {"gate_threshold": config["cdd"]["gate_threshold"], "gate": config["cdd"]["gate"]}


def _declared(source: str) -> bool:
    """Whether ``source`` names a declared output kind (a method's own rows, from the
    module that declares the method's policy): its file in the policy's cell is the input."""
    from grabrag.core import outputs  # only for such a source: the built-in ones need none

    return source in outputs.outputs()


@dataclass(frozen=True)
class Policy:
    """One abstention policy.

    ``decide(inputs, settings)`` gets the rows of each input keyed as in ``inputs`` and the
    dict ``settings(config)`` returns (the policy job's only params, so editing another
    policy's setting reruns nothing of this one), and returns one decision row per
    question: ``qid, index, condition, policy, decision, answer, confidence, rule``. It is
    a function, or ``"module:function"`` imported when the policy runs.
    """

    name: str
    decide: Decide | str
    inputs: Mapping[str, str]  # key -> one of SOURCES, or a declared output kind's name
    label: str | None = None  # figure legends; default: the name
    printed: str | None = None  # tables; default: the name
    title: str | None = None  # Table 2's row name; default: the label
    colour: str | None = None  # figures; default: one of a spare palette
    settings: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
    scope: str | None = None  # config section whose `datasets` list scopes it
    family: str = GRABRAG  # whose method it is (GRABRAG, EVIDENTIAL_RAG, CDD, or a module's)
    paper: bool = False  # one of GRAB-RAG's P0-P4: the paper's macro averages pool these only
    in_policy_tables: bool = True  # Tables 1, 2, 7, 8, 10, normalised HwSA, selection bias...
    in_figures: bool = True  # the figures that draw every policy
    answer_ece: bool = False  # EvidentialRAG's answer ECE (Eqs. 26-27) is computed for it
    routed: bool = False  # its rows carry EvidentialRAG's route: the route shares apply
    in_cdd_tables: bool = False  # CDD's accuracy tables compare it (CDD vs the baselines)

    def __post_init__(self) -> None:
        unknown = sorted(s for s in set(self.inputs.values()) - set(SOURCES) if not _declared(s))
        if unknown:
            raise ValueError(
                f"policy {self.name}: unknown input source {', '.join(unknown)} (known: "
                f"{', '.join(SOURCES)}, or an output kind declared before the policy)"
            )

    @property
    def described(self) -> str:
        """The name with a word on what it is, as Table 2 prints it."""
        return self.title or self.label or self.name

    @property
    def shown(self) -> str:
        """The name as the tables print it."""
        return self.printed or self.name

    @property
    def own_pass(self) -> bool:
        """Whether it reads a model pass of its own (EvidentialRAG's, CDD's, a baseline's,
        or a method's whose rows are an output kind of its module)."""
        return any(s in OWN_PASS_SOURCES or s not in SOURCES for s in self.inputs.values())

    def config_settings(self, config: Mapping[str, Any]) -> dict[str, Any]:
        return dict((self.settings or own_options(self.name))(config))

    def decide_function(self) -> Decide:
        """The decide function, imported now when it is named as ``"module:function"``."""
        if callable(self.decide):
            return self.decide
        module, _, function = self.decide.partition(":")
        return getattr(importlib.import_module(module), function)

    def code_file(self) -> Path:
        """The file that defines the decide function (whose code a policy job runs)."""
        if callable(self.decide):
            return Path(inspect.getfile(self.decide)).resolve()
        spec = importlib.util.find_spec(self.decide.partition(":")[0])
        return Path(spec.origin).resolve()


_P1_CB = {"P1": GENERATION, CLOSED_BOOK_PROMPT: CLOSED_BOOK_PASS}
_BASELINES = (
    ("CAI", "CAI (conflict-aware)", "#e7298a"),
    ("SHAM", "SHAM (sham CoT)", "#7f7f7f"),
    ("REFLECT", "REFLECT (reflection)", "#e6ab02"),
    ("FILTER", "FILTER (prompt-filtered)", "#17becf"),
)
_PAPER = "grabrag.policies.paper"
_EVIDENTIAL = "grabrag.evidential.decisions"
_CDD = "grabrag.cdd.decisions"

BUILTIN = (
    Policy(
        "P0",
        f"{_PAPER}:decide_p0",
        {"P0": GENERATION},
        "P0 (none)",
        colour="#4c72b0",
        paper=True,
        answer_ece=True,
    ),
    Policy(
        "P1",
        f"{_PAPER}:decide_p1",
        {"P1": GENERATION},
        "P1 (IDK)",
        colour="#dd8452",
        paper=True,
        answer_ece=True,
        in_cdd_tables=True,
    ),
    Policy(
        "P2", f"{_PAPER}:decide_p2", {"P2": GENERATION}, "P2 (CoT)", colour="#55a868", paper=True
    ),
    Policy(
        "P3",
        f"{_PAPER}:decide_p3",
        _P1_CB,
        "P3 (conflict)",
        colour="#c44e52",
        settings=confidence_settings("cutoff", "threshold"),
        paper=True,
    ),
    Policy(
        "P4",
        f"{_PAPER}:decide_p4",
        {**_P1_CB, "NLI": NLI},
        "P4 (NLI)",
        colour="#8172b3",
        settings=confidence_settings("cutoff"),
        paper=True,
    ),
    Policy(
        "EVID",
        f"{_EVIDENTIAL}:decide_evid",
        {"EVID": EVIDENTIAL},
        title="EVID (EvidentialRAG)",
        colour="#937860",
        scope="evidential",
        family=EVIDENTIAL_RAG,
        answer_ece=True,
        routed=True,
    ),
    Policy(
        "EVID_CB",
        f"{_EVIDENTIAL}:decide_evid_cb",
        {"EVID_CB": EVIDENTIAL},
        "EVID+CB",
        "EVID+CB",
        title="EVID+CB (+ closed-book source)",
        colour="#da8bc3",
        scope="evidential",
        family=EVIDENTIAL_RAG,
        answer_ece=True,
        routed=True,
    ),
    Policy(
        "CDD",
        f"{_CDD}:decide_cdd",
        {"CDD": CDD_TRACES},
        colour="#1b9e77",
        scope="cdd",
        family=CDD,
        in_policy_tables=False,
        in_cdd_tables=True,
    ),
    Policy(
        "CDD_ALPHA",
        f"{_CDD}:decide_cdd_alpha",
        {"P1": GENERATION, "CDD": CDD_TRACES},
        "CDD-alpha",
        "CDD-alpha",
        colour="#66a61e",
        settings=gate_settings,
        scope="cdd",
        family=CDD,
        in_policy_tables=False,
        in_cdd_tables=True,
    ),
    *(
        Policy(
            name,
            f"{_CDD}:decide_{name.lower()}",
            {name: CDD_CELL},
            label,
            colour=colour,
            scope="cdd",
            family=CDD,
            in_policy_tables=False,
            in_cdd_tables=True,
        )
        for name, label, colour in _BASELINES
    ),
)
"""The built-in policies, in the order every table and figure lists them."""

PAPER_POLICIES = tuple(p.name for p in BUILTIN if p.paper)
"""GRAB-RAG's own policies: the paper's macro averages (Table 3, Table 6's macro row,
section 6) pool these only, so adding a policy leaves those numbers as they were."""

_REGISTRY: dict[str, Policy] = {p.name: p for p in BUILTIN}


@dataclass(frozen=True)
class Features:
    """What a config turns on that decides which tables (and figures) it produces."""

    conditions: tuple[str, ...] = NAMES
    evidential: bool = False  # EvidentialRAG policies configured (on some dataset)
    cdd_family: bool = False  # CDD, CDD-alpha or a prompt-only baseline configured
    cdd_traces: bool = False  # CDD or CDD-alpha: their traces exist
    cdd_diagnostics: bool = False  # cdd.diagnostics with traces
    audited: bool = False  # some dataset's QC audit is filled in
    seed_sensitivity: bool = False  # Table 13's sensitivity variant is configured
    truthfulqa_probe: bool = False  # CDD's TruthfulQA misconception-injection probe


def register(policy: Policy) -> Policy:
    """Add ``policy``; a second policy under a registered name is an error."""
    if policy.name in _REGISTRY and _REGISTRY[policy.name] is not policy:
        raise ValueError(f"a policy named {policy.name} is already registered")
    _REGISTRY[policy.name] = policy
    return policy


def policies() -> dict[str, Policy]:
    """Every registered policy by name, built-ins first."""
    return dict(_REGISTRY)


def policy(name: str) -> Policy:
    if name not in _REGISTRY:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


def question_limits(config: Mapping[str, Any]) -> dict[str, int]:
    """Policy -> N for the configured policies whose method runs on each dataset's first N
    questions only (``<scope>.n_questions``, a small run's choice, ours); not on the
    TruthfulQA probe's dataset, whose size is its own."""
    limits = {}
    for name in config["policies"]["names"]:
        section = policy(name).scope
        if section is not None and config[section].get("n_questions") is not None:
            limits[name] = int(config[section]["n_questions"])
    return limits


def names(where: Callable[[Policy], bool] | None = None) -> list[str]:
    """The registered names in registration order, those ``where`` holds for if given."""
    return [name for name, p in _REGISTRY.items() if where is None or where(p)]


def decide(
    name: str, inputs: Mapping[str, Rows], settings: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Decision rows of the registered policy ``name`` from ``inputs`` keyed as its
    :attr:`Policy.inputs`; ``settings`` as its ``settings(config)`` returns them."""
    spec = policy(name)
    missing = [key for key in spec.inputs if key not in inputs]
    if missing:
        raise ValueError(f"policy {name} needs inputs {', '.join(missing)}")
    return spec.decide_function()(inputs, settings or {})


def with_cell(
    rows: Rows, model: str, dataset: str, condition: str, policy: str
) -> list[dict[str, Any]]:
    """Decision rows led by the cell they belong to (model, dataset, condition, policy),
    so every decision file loads into one frame and filters. A row that names another
    condition or policy is a policy bug, reported as such."""
    out = []
    for row in rows:
        for key, value in (("condition", condition), ("policy", policy)):
            if row.get(key, value) != value:
                raise ValueError(
                    f"policy {policy}: a decision row for question {row.get('qid')!r} says "
                    f"{key} {row[key]!r}, but the cell is {condition}/{policy}; its decide "
                    "function must return the rows of the cell it was given"
                )
        rest = {k: v for k, v in row.items() if k not in ("condition", "policy")}
        out.append(
            {"model": model, "dataset": dataset, "condition": condition, "policy": policy, **rest}
        )
    return out
