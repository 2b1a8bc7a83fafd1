"""What a table or a figure is, declared once: its name, what it reads (output kinds of
:mod:`grabrag.core.outputs`), which config settings it uses (:data:`SETTINGS`), when a config
produces it, and how it is built from the :class:`Sources` its job reads.

The paper's tables are declared in their family's module (``TABLES`` at the end of
:mod:`grabrag.report.grabrag_tables`, ``p3_tables``, ``audit_tables``,
``evidential_tables``, ``cdd_tables``, ``truthfulqa_tables``), the figures in
:mod:`grabrag.report.figures` (``FIGURES``); a config's ``modules`` may add more with
:func:`register_table` and :func:`register_figure`. Each table and figure is a job of its
own: it reruns when what it reads, its settings, or the code of the module that declares
it changes.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grabrag.core.builds import audited_datasets, sensitivity_variant_name
from grabrag.core.outputs import output
from grabrag.core.registry import Features, question_limits


class Sources:
    """What one table or figure job reads, each loaded on first use: the job's input files
    by output name, the cell each file is about, and the settings it declared."""

    def __init__(
        self,
        files: Mapping[str, Sequence[str]],
        cells: Mapping[str, Sequence[Mapping[str, str]]],
        settings: Mapping[str, Any],
    ) -> None:
        self.files, self.cells, self.settings = files, cells, settings
        self._read: dict[str, Any] = {}

    def read(self, name: str) -> Any:
        """The files of output ``name`` through its reader (a frame, or (cell, rows) pairs)."""
        if name not in self._read:
            if name not in self.files:
                raise ValueError(
                    f"this job does not read {name!r}: add it to the table's or figure's reads"
                )
            self._read[name] = output(name).read(self.files[name], self.cells[name])
        return self._read[name]

    def setting(self, name: str) -> Any:
        if name not in self.settings:
            raise ValueError(
                f"this job has no setting {name!r}: add it to the table's or figure's settings"
            )
        return self.settings[name]


def _p3(config: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "cutoff": config["policies"]["confidence_cutoff"],
        "threshold": config["policies"]["f1_threshold"],
    }


def _fusion(config: Mapping[str, Any]) -> dict[str, Any]:
    return {key: config["evidential"][key] for key in ("lam", "tau1", "tau2")}


def _seed_sensitivity(config: Mapping[str, Any]) -> dict[str, Any]:
    spec = config["seed_sensitivity"]
    if not spec:
        return {}
    return {sensitivity_variant_name(spec): {**spec, "base_seed": config["seed"]}}


def _audit(config: Mapping[str, Any]) -> dict[str, Any]:
    """The audited datasets in the config's order, with the bootstrap that resamples them."""
    return {
        "datasets": audited_datasets(config),
        "bootstrap": config["bootstrap"],
        "seed": config["seed"],
    }


SETTINGS: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "p3": _p3,  # policies.confidence_cutoff and f1_threshold, as cutoff and threshold
    "fusion": _fusion,  # evidential.lam, tau1, tau2
    "seed_sensitivity": _seed_sensitivity,  # the variant dataset's spec, with the base seed
    "audit": _audit,  # the audited datasets, the bootstrap and its seed
    "ner_backend": lambda config: config["ner"]["backend"],
    "bootstrap": lambda config: {**config["bootstrap"], "seed": config["seed"]},
    # policy -> N: a method run on each dataset's first N questions only
    "question_limits": question_limits,
}
"""The config settings a table or figure may use, by name: its job gets those it declares
and only those, so editing one reruns the outputs that show it and no other."""


@dataclass(frozen=True)
class ReportItem:
    """What tables and figures share: name, what is read, settings, when it is produced."""

    name: str
    build: Callable[[Sources], Any]
    reads: tuple[str, ...] = ()
    settings: tuple[str, ...] = ()
    when: Callable[[Features], bool] = lambda features: True

    def __post_init__(self) -> None:
        for name in self.reads:
            output(name)  # an unknown output is an error at once
        unknown = [name for name in self.settings if name not in SETTINGS]
        if unknown:
            raise ValueError(
                f"{self.name}: unknown setting {', '.join(unknown)} (known: {', '.join(SETTINGS)})"
            )

    def code_file(self) -> Path:
        """The file that builds it: its job's code besides the rule's script."""
        return Path(inspect.getfile(self.build)).resolve()

    def config_settings(self, config: Mapping[str, Any]) -> dict[str, Any]:
        return {name: SETTINGS[name](config) for name in self.settings}


@dataclass(frozen=True)
class TableSpec(ReportItem):
    """A table: ``results/tables/<name>.*``, its caption ``workflow/report/tables/<name>.rst``
    (or ``caption``, for a table from a module: a file beside that module); ``build``
    returns a :class:`~grabrag.report.tabular.Table`."""

    caption: str | None = None


@dataclass(frozen=True)
class FigureSpec(ReportItem):
    """A figure: ``results/figures/<name>.pdf``/``.png``, its caption
    ``workflow/report/figures/<name>.rst`` (or ``caption``, for a figure from a module: a
    file beside that module); ``build`` returns a matplotlib figure."""

    caption: str | None = None


# The modules that declare the paper's tables and figures, in the order a run lists them.
TABLE_MODULES = (
    "grabrag.report.grabrag_tables",
    "grabrag.report.p3_tables",
    "grabrag.report.knowledge_tables",
    "grabrag.report.audit_tables",
    "grabrag.report.evidential_tables",
    "grabrag.report.cdd_tables",
    "grabrag.report.truthfulqa_tables",
)
FIGURE_MODULES = ("grabrag.report.figures",)
_REGISTERED_TABLES: dict[str, TableSpec] = {}
_REGISTERED_FIGURES: dict[str, FigureSpec] = {}


def register_table(spec: TableSpec) -> TableSpec:
    """Add a table from a config's module (``modules``); its caption is ``spec.caption``."""
    return _register(spec, _REGISTERED_TABLES, tables())


def register_figure(spec: FigureSpec) -> FigureSpec:
    """Add a figure from a config's module (``modules``); its caption is ``spec.caption``."""
    return _register(spec, _REGISTERED_FIGURES, figures())


def _register(spec: Any, registered: dict[str, Any], known: Mapping[str, Any]) -> Any:
    if spec.name in known and known[spec.name] is not spec:
        raise ValueError(f"a table or figure named {spec.name} is already declared")
    if spec.caption is None:
        raise ValueError(f"{spec.name}: a table or figure from a module needs its caption file")
    registered[spec.name] = spec
    return spec


def _declared(modules: Sequence[str], attribute: str) -> list[Any]:
    return [
        spec for module in modules for spec in getattr(importlib.import_module(module), attribute)
    ]


def tables() -> dict[str, TableSpec]:
    """Every table by name: the paper's, then those modules registered."""
    return {s.name: s for s in [*_declared(TABLE_MODULES, "TABLES"), *_REGISTERED_TABLES.values()]}


def figures() -> dict[str, FigureSpec]:
    """Every figure by name: the paper's, then those modules registered."""
    declared = [*_declared(FIGURE_MODULES, "FIGURES"), *_REGISTERED_FIGURES.values()]
    return {s.name: s for s in declared}


# GRAB-RAG's numbered tables: "table11b_ece15" is Table 11b.
_NUMBERED = re.compile(r"table(\d+)([a-z]?)_")


def paper_order(tables: Sequence[str]) -> list[str]:
    """Tables in the order a reader of the papers looks for them: GRAB-RAG's numbered
    tables by number (Table 11b after 11, Table 12 after 11b), then the others as declared:
    our additions to GRAB-RAG, EvidentialRAG's, CDD's, the TruthfulQA probe's, then those
    a config's modules registered."""
    declared = {name: position for position, name in enumerate(tables)}

    def key(name: str) -> tuple[int, int, str, int]:
        match = _NUMBERED.match(name)
        if match:
            return (0, int(match.group(1)), match.group(2), 0)
        return (1, 0, "", declared[name])

    return sorted(tables, key=key)


def report_labels(names: Sequence[str]) -> dict[str, str]:
    """Each name with its position in ``names`` ("07 table7_hwsa_ci"): the report sorts
    its items by label as text, so the zero-padded position keeps them in this order."""
    width = max(2, len(str(len(names))))
    return {name: f"{i:0{width}d} {name}" for i, name in enumerate(names, 1)}


def table_spec(name: str) -> TableSpec:
    return _named(tables(), name, "table")


def figure_spec(name: str) -> FigureSpec:
    return _named(figures(), name, "figure")


def _named(known: Mapping[str, Any], name: str, kind: str) -> Any:
    if name not in known:
        raise ValueError(f"unknown {kind} {name!r}; known: {', '.join(known)}")
    return known[name]


def table_names(features: Features) -> list[str]:
    """The tables a config with these features produces."""
    return [name for name, spec in tables().items() if spec.when(features)]


def figure_names(features: Features) -> list[str]:
    """The figures a config with these features produces."""
    return [name for name, spec in figures().items() if spec.when(features)]
