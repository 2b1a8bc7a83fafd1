"""The run model: what one validated config runs, built from the config alone.

:class:`Run` holds the datasets by kind (configured, seed replicates, Table 13's
sensitivity variant, the TruthfulQA probe's), the construction seeds, the policies in
scope and the datasets each method runs on, the features switched on, the tables and
figures they produce, which files each job reads and the final targets. Every path comes
from the output declarations (:mod:`grabrag.core.outputs`), every model's backend from
:mod:`grabrag.generation.backends`. ``rules/common.smk`` builds one ``Run`` and its input
functions ask it; :mod:`grabrag.pipeline.plan` and the tests ask it too. Nothing here
knows Snakemake: a cell is a mapping of wildcard names to values (a job's wildcards
qualify).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from grabrag.contexts.paired import PAIRED_CONDITIONS
from grabrag.core import outputs, registry
from grabrag.core.builds import replicate_name, sensitivity_variant_name
from grabrag.core.conditions import (
    CLOSED_BOOK,
    CLOSED_BOOK_PROMPT,
    SEED_COMPARED,
    TRUTHFULQA,
    TRUTHFULQA_CONDITIONS,
)
from grabrag.generation.backends import ModelEntry, VerifierEntry, model_entries, verifier_entry
from grabrag.generation.prompts import CONTEXT_PROMPTS
from grabrag.generation.reask import audit_concurrency, own_concurrency
from grabrag.pipeline.cells import Cell, cell_file, cells, files, stable
from grabrag.pipeline.files import (
    CDD_DIAGNOSTICS_FILE,
    CLOSED_BOOK_FILE,
    CONTEXT_FILE,
    DECISION_FILE,
    EVID_EFFICIENCY_FILE,
    EVID_SWEEP_FILE,
    EXTRA_TABLES,
    FIGURE_FILE,
    FIXED_QUESTIONS,
    GENERATION_FILE,
    GENERATION_REPORT_FILE,
    P3_SWEEP_FILE,
    PER_BUILD,
    REASK_TABLE,
    TABLE_FILE,
    TABLE_PAGE_FILE,
    TABLE_PAGES,
)
from grabrag.pipeline.scope import (
    method_datasets,
    policies_reading,
    policy_input_file,
    scoped_policies,
)
from grabrag.report.reproduction import published_numbers
from grabrag.report.specs import figure_names, paper_order, report_labels, table_names, table_spec
from grabrag.scoring.truthfulness import configured_scorer

# The context settings each condition's rows read: editing one rebuilds only the
# conditions that read it (the tokenizer is an input of every context job).
CONTEXT_KEYS = {
    "Q100": ("n_passages", "max_context_tokens"),
    "Q50": ("n_passages", "n_gold_q50", "max_context_tokens"),
    "Q0": ("n_passages", "max_context_tokens"),
    # no passage, but the same questions: a question short of hard negatives is dropped
    # from every condition
    CLOSED_BOOK: ("n_passages",),
    "QC": ("n_passages", "max_context_tokens"),
    "QX": ("n_passages", "max_context_tokens"),
}


class Run:
    """What one validated config runs. ``local_threads``: a local model job's threads when
    its entry sets none (the rules pass a share of the cores)."""

    def __init__(self, config: Mapping[str, Any], local_threads: int = 1) -> None:
        self.config = config
        self.local_threads = local_threads
        self.datasets = sorted(config["datasets"])
        self.models = sorted(config["models"])
        # The order tables and figures list models and datasets in: the config's.
        self.listed_order = {
            "models": list(config["models"]),
            "datasets": list(config["datasets"]),
        }
        self.conditions = list(config["generation"]["conditions"])
        self.policies = list(config["policies"]["names"])
        # EvidentialRAG policies and the CDD family (CDD, CDD-alpha, the prompt-only
        # baselines) among the configured ones.
        self.evid_policies = self._scoped("evidential")
        self.cdd_family = self._scoped("cdd")
        self.evid_datasets = self._method_datasets("evidential") if self.evid_policies else []
        self.cdd_datasets = self._method_datasets("cdd") if self.cdd_family else []
        self.question_limits = registry.question_limits(config)
        # Table 6: datasets whose QC audit sample a person has rated (qc.audit_filled).
        self.audited_datasets = [d for d in self.datasets if d in config["qc"]["audit_filled"]]

        # Table 13's sensitivity variant (grabrag.core.builds): shares the base dataset's
        # questions, corpus, retrieval, entity pool and closed-book answers and redoes the
        # contexts, swaps, Q0/QC generation, NLI and policies. Only Table 13 reads it.
        self.sensitivity_variants: dict[str, Mapping[str, Any]] = {}
        if config["seed_sensitivity"]:
            sensitivity = config["seed_sensitivity"]
            self.sensitivity_variants[sensitivity_variant_name(sensitivity)] = sensitivity
        self.variant_conditions = [c for c in SEED_COMPARED if c in self.conditions]

        # Construction seeds (seeds): the outputs of `seed` keep the paths of a single-seed
        # run; every other seed rebuilds each dataset as a replicate with nothing shared.
        # Tables read replicates per seed and across the seeds.
        self.base_seed = config["seed"]
        self.extra_seeds = [seed for seed in config["seeds"] if seed != self.base_seed]
        self.seeds = [self.base_seed, *self.extra_seeds]
        self.replicates = {
            replicate_name(dataset, seed, self.base_seed): {"dataset": dataset, "seed": seed}
            for seed in self.extra_seeds
            for dataset in self.datasets
        }

        # CDD's TruthfulQA misconception-injection probe: a dataset of its own with its
        # own two conditions, on which every configured policy runs.
        self.truthfulqa_probe = config["truthfulqa_probe"]
        self.truthfulqa_datasets = [TRUTHFULQA] if self.truthfulqa_probe else []
        probe, nli = self.truthfulqa_probe, config["nli"]
        self.truthfulqa_scorer = configured_scorer(probe, nli) if probe else None

        # CDD and CDD_ALPHA both read the CDD traces; the baselines among the configured.
        self.cdd_traces = bool(policies_reading(self.policies, registry.CDD_TRACES))
        self.cdd_baselines = policies_reading(self.policies, registry.CDD_CELL)
        self.runs_nli = bool(policies_reading(self.policies, registry.NLI))
        # Tables outside the registry, after the papers' tables: the reproduction report,
        # the cost ledger and the re-ask audit (our determinism check, when it is on).
        self.reask_questions = config["reask_audit"]["questions"]
        self.extra_tables = [t for t in EXTRA_TABLES if t != REASK_TABLE or self.reask_questions]

        self._scope_report()
        self.model_entries = model_entries(config, local_threads)
        self.dataset_scopes = {
            outputs.ALL_DATASETS: self.datasets,
            outputs.EVIDENTIAL_DATASETS: self.evid_datasets,
            outputs.CDD_DATASETS: self.cdd_datasets,
            outputs.CDD_TRACE_DATASETS: self.cdd_datasets if self.cdd_traces else [],
            outputs.CDD_DIAGNOSTIC_DATASETS: (
                self.cdd_datasets if self.features.cdd_diagnostics else []
            ),
            outputs.AUDITED_DATASETS: self.audited_datasets,
            outputs.SENSITIVITY_VARIANT_DATASETS: list(self.sensitivity_variants),
            outputs.TRUTHFULQA_DATASETS: self.truthfulqa_datasets,
        }

    def _scope_report(self) -> None:
        """The features this config switches on, and the tables and figures they produce."""
        config = self.config
        self.features = registry.Features(
            conditions=tuple(self.conditions),
            evidential=bool(self.evid_datasets),
            cdd_family=bool(self.cdd_family),
            cdd_traces=self.cdd_traces,
            cdd_diagnostics=self.cdd_traces and bool(config["cdd"]["diagnostics"]),
            audited=bool(self.audited_datasets),
            seed_sensitivity=bool(self.sensitivity_variants),
            truthfulqa_probe=bool(self.truthfulqa_probe),
        )
        self.table_names = table_names(self.features)
        # The tables each seed's build remakes: those built from outputs every build has
        # (the metrics, EvidentialRAG's sweeps, CDD's diagnostics), with a companion across
        # the seeds; those from the metrics alone also over the seeds' questions pooled.
        self.seeded_tables = [
            name
            for name in self.table_names
            if table_spec(name).reads and set(table_spec(name).reads) <= PER_BUILD
        ]
        # every seed's questions pooled: not where the seeds share their questions (the
        # same question's copies are no independent draws)
        redrawn = self.config["seeds_redraw"] != FIXED_QUESTIONS
        self.pooled_tables = [
            name
            for name in self.seeded_tables
            if redrawn and table_spec(name).reads == (outputs.METRICS,)
        ]
        self.figure_names = figure_names(self.features)
        # The report lists the tables in the papers' order, the figures as declared.
        self.table_labels = report_labels([*paper_order(self.table_names), *self.extra_tables])
        self.figure_labels = report_labels(self.figure_names)

    # --- scope ------------------------------------------------------------------------

    def _scoped(self, section: str) -> list[str]:
        return scoped_policies(self.config, section)

    def _method_datasets(self, section: str) -> list[str]:
        """The datasets a method runs on, sorted as :attr:`datasets`."""
        return sorted(method_datasets(self.config, section))

    def runs_method(self, section: str, dataset: str) -> bool:
        """Whether a method (``evidential``, ``cdd``) runs on a built dataset: on a seed
        replicate where it runs on the dataset the replicate rebuilds."""
        return self.configured_dataset(dataset) in self._method_datasets(section)

    @property
    def built_datasets(self) -> list[str]:
        """The datasets the GRAB-RAG stages build questions, corpus and contexts for (the
        probe's dataset has rules of its own for those)."""
        return [*self.config["datasets"], *self.sensitivity_variants, *self.replicates]

    def wildcard_values(self) -> dict[str, list[str]]:
        """The values each wildcard may take in this run."""
        probe = TRUTHFULQA_CONDITIONS if self.truthfulqa_probe else ()
        return {
            "asset": list(self.config["assets"]),
            "dataset": [*self.built_datasets, *self.truthfulqa_datasets],
            "seed": [str(seed) for seed in self.extra_seeds],
            "model": list(self.config["models"]),
            "condition": [*self.conditions, *probe],
            "policy": self.policies,
            "questions": [str(n) for n in sorted(set(self.question_limits.values()))],
        }

    # --- built datasets ---------------------------------------------------------------

    def replicate_name(self, dataset: str, seed: int) -> str:
        return replicate_name(dataset, seed, self.base_seed)

    def configured_dataset(self, dataset: str) -> str:
        """The ``datasets`` entry a built dataset (itself, a seed replicate or Table 13's
        variant) takes its adapter, asset, sizes and method scopes from."""
        for derived in (self.replicates, self.sensitivity_variants):
            if dataset in derived:
                return derived[dataset]["dataset"]
        return dataset

    def base_dataset(self, dataset: str) -> str:
        """The dataset whose questions, corpus and retrieval a dataset uses: Table 13's
        variant the base dataset's, any other its own."""
        if dataset in self.sensitivity_variants:
            return self.sensitivity_variants[dataset]["dataset"]
        return dataset

    def construction_seed(self, dataset: str) -> int:
        """The per-question seed base: Random(seed + i) for shuffles and swaps."""
        for derived in (self.sensitivity_variants, self.replicates):
            if dataset in derived:
                return derived[dataset]["seed"]
        return self.base_seed

    def sample_seed(self, dataset: str) -> int:
        """The seed the question sample and the corpus order are drawn with: a seed
        replicate's own (``seeds_redraw: questions``) or the base seed's (``construction``:
        every seed on the same questions); Table 13's variant keeps the base questions."""
        if self.config["seeds_redraw"] == FIXED_QUESTIONS:
            return self.base_seed
        return self.replicates.get(dataset, {}).get("seed", self.base_seed)

    def dataset_config(self, dataset: str) -> dict[str, Any]:
        """The ``datasets`` entry of a built dataset."""
        return stable(self.config["datasets"][self.configured_dataset(dataset)])

    def labelled(self, keys: Sequence[Cell]) -> list[Cell]:
        """Cells of seed replicates named by their configured dataset: what a replicate's
        metrics call their rows, so its tables read like the base seed's. (Table 13's
        variant keeps its own name: its table sets it beside the base dataset.)"""
        return [
            (
                {**key, "dataset": self.replicates[key["dataset"]]["dataset"]}
                if key["dataset"] in self.replicates
                else key
            )
            for key in keys
        ]

    def seeded(self, keys: Sequence[Cell]) -> list[dict[str, Any]]:
        """The cells ``keys`` (of configured datasets) in every seed's build, seed by seed."""
        return [
            {**key, "dataset": self.replicate_name(key["dataset"], seed)}
            for seed in self.seeds
            for key in keys
        ]

    # --- models -----------------------------------------------------------------------

    def model(self, name: str) -> ModelEntry:
        return self.model_entries[name]

    def verifier(self, model: str) -> VerifierEntry:
        """P4's verifier in the cells of generator ``model``."""
        return verifier_entry(self.config["nli"], self.model(model), self.local_threads)

    def evaluator(self, model: str) -> ModelEntry:
        """The EvidentialRAG evaluator: the configured model, or the generator itself."""
        return self.model(self.config["evidential"]["evaluator"] or model)

    def served_models(self) -> dict[str, dict[str, Any]]:
        """For the tables' note: each served model's server, model name and constraint."""
        return {m: self.model(m).served_note() for m in self.models if self.model(m).served}

    def decoding(self) -> dict[str, dict[str, Any]]:
        """For the tables' batching note: how many calls each model decodes side by side
        (a GGUF's ``batch``, a served model's ``concurrency``), and whether the re-ask
        audit measured what that changes."""
        return {
            m: {
                "side_by_side": own_concurrency(self.config["models"][m]),
                "served": self.model(m).served,
                "audited": bool(self.reask_questions),
            }
            for m in self.models
        }

    def reask_cells(self) -> list[dict[str, Any]]:
        """The generation cells the re-ask audit sends again (none when it is off): every
        model on every configured dataset and condition (not the seed rebuilds)."""
        if not self.reask_questions:
            return []
        return cells(model=self.models, dataset=self.datasets, condition=self.conditions)

    def reproduction_inputs(self) -> list[str]:
        """The tidy tables of this run that the papers' published numbers name."""
        named = {row["table"] for row in published_numbers()}
        return [f"results/tables/{t}.tidy.csv" for t in self.table_names if t in named]

    def reask_generation_cells(self) -> list[dict[str, Any]]:
        """The generation files (as cells) the re-asked calls are compared with."""
        return [{**c, "prompt": p} for c in self.reask_cells() for p in CONTEXT_PROMPTS]

    def reask_concurrency(self, model: str) -> int:
        """The concurrency model ``model``'s calls are re-asked at."""
        configured = self.config["reask_audit"]["concurrency"]
        return audit_concurrency(self.config["models"][model], configured)

    # --- settings each job reads --------------------------------------------------------

    def generation_settings(self) -> dict[str, Any]:
        """The decoding settings only: changing ``conditions`` must not rerun finished cells."""
        generation = self.config["generation"]
        return stable({k: v for k, v in generation.items() if k != "conditions"})

    def cdd_generation_settings(self) -> dict[str, Any]:
        """Decoding settings CDD uses: its own step limit replaces generation.max_tokens,
        so changing the latter (or the condition list) does not rerun finished CDD cells."""
        settings = {k: v for k, v in self.generation_settings().items() if k != "max_tokens"}
        return stable({**settings, "max_tokens": self.config["cdd"]["step_max_tokens"]})

    def fusion_settings(self) -> dict[str, Any]:
        """lambda, tau1, tau2 and merge_f1 of the EVID / EVID_CB policies."""
        evidential = self.config["evidential"]
        return stable({k: evidential[k] for k in ("lam", "tau1", "tau2", "merge_f1")})

    def context_settings(self, condition: str | None) -> dict[str, Any]:
        """The ``contexts`` keys one condition's rows read (None: every key)."""
        contexts = self.config["contexts"]
        keys = CONTEXT_KEYS[condition] if condition else contexts
        return stable({key: contexts[key] for key in keys})

    def tokenizer_asset(self) -> str:
        return self.config["contexts"]["tokenizer"] or self.config["retrieval"]["encoder"]

    def policy_settings(self, policy: str) -> dict[str, Any]:
        """The settings one policy depends on (its only params: editing another policy's
        setting reruns nothing of this one)."""
        return stable(registry.policy(policy).config_settings(self.config))

    # --- policies and their cells -------------------------------------------------------

    def dataset_policies(self, dataset: str) -> list[str]:
        """The configured policies that run on one dataset (a scoped one, e.g. EVID and the
        CDD family, only on the datasets its config section names)."""
        scopes = {p: registry.policy(p).scope for p in self.policies}
        return [
            p for p in self.policies if scopes[p] is None or self.runs_method(scopes[p], dataset)
        ]

    def metric_policies(self, dataset: str) -> list[str]:
        """Policies the metrics (or the TruthfulQA probe's table) of one dataset evaluate.
        Table 13's variant runs those that need no model pass of their own (P0-P4, and a
        module's policy that reads their cells): EvidentialRAG's and CDD's passes would be
        wasted, as Table 13 shows neither."""
        if dataset in self.sensitivity_variants:
            return [p for p in self.policies if not registry.policy(p).own_pass]
        if dataset in self.truthfulqa_datasets:
            return self.policies  # the probe runs every policy that can run on it
        return self.dataset_policies(dataset)

    def metric_cells(self, dataset: str) -> list[tuple[str, str]]:
        """(model, condition) pairs the metrics of one dataset read."""
        if dataset in self.sensitivity_variants:
            model = self.sensitivity_variants[dataset]["model"]
            return [(model, c) for c in self.variant_conditions]
        return [(model, condition) for model in self.models for condition in self.conditions]

    def metric_decision_cells(self, dataset: str) -> list[dict[str, Any]]:
        """The decision files (as cells) the metrics of one dataset read."""
        return [
            {"model": model, "dataset": dataset, "condition": condition, "policy": policy}
            for model, condition in self.metric_cells(dataset)
            for policy in self.metric_policies(dataset)
        ]

    def metric_context_cells(self, dataset: str) -> list[dict[str, Any]]:
        """The context files (as cells) the metrics of one dataset read."""
        conditions = dict.fromkeys(condition for _, condition in self.metric_cells(dataset))
        return cells(dataset=[dataset], condition=list(conditions))

    def all_decision_cells(self) -> list[dict[str, Any]]:
        """Every decision file the metrics of the configured datasets read."""
        return [cell for d in self.datasets for cell in self.metric_decision_cells(d)]

    def all_context_cells(self) -> list[dict[str, Any]]:
        return cells(dataset=self.datasets, condition=self.conditions)

    def audit_decision_cells(self, dataset: str) -> list[dict[str, Any]]:
        """Table 6's decision files (as cells): every model and policy at Q0 and QC."""
        return cells(
            model=self.models,
            dataset=[dataset],
            condition=self.variant_conditions,
            policy=self.dataset_policies(dataset),
        )

    def generation_report_cells(self, model: str, dataset: str) -> list[dict[str, Any]]:
        """Every generation file (as cells) of one model x dataset: the context prompts at
        each condition, then the closed-book pass."""
        return cells(
            model=[model], dataset=[dataset], condition=self.conditions, prompt=CONTEXT_PROMPTS
        ) + cells(
            model=[model], dataset=[dataset], condition=[CLOSED_BOOK], prompt=[CLOSED_BOOK_PROMPT]
        )

    def evidential_cells(self, model: str, dataset: str) -> list[dict[str, Any]]:
        """The EVID / EVID_CB files (as cells) of one model x dataset."""
        return cells(
            model=[model], dataset=[dataset], condition=self.conditions, policy=self.evid_policies
        )

    def cdd_decision_cells(self, model: str, dataset: str) -> list[dict[str, Any]]:
        """The decision files (as cells) of P1 and the CDD family in one model x dataset."""
        return cells(
            model=[model],
            dataset=[dataset],
            condition=self.conditions,
            policy=[p for p in ("P1", *self.cdd_family) if p in self.policies],
        )

    # --- the files a job reads ------------------------------------------------------------

    def closed_book_file(self, cell: Cell) -> str:
        """The CB answers: the closed-book pass sees no context, so a variant reuses them."""
        return cell_file(CLOSED_BOOK_FILE, cell, dataset=self.base_dataset(cell["dataset"]))

    def base_file(self, stage: str, name: str, dataset: str) -> str:
        """A file of the base dataset's ``stage`` (data, retrieval, qc)."""
        return f"results/{stage}/{self.base_dataset(dataset)}/{name}"

    def policy_inputs(self, cell: Cell) -> dict[str, str]:
        """What one policy job reads, as its registry entry declares it."""
        declared = registry.policy(cell["policy"]).inputs
        closed_book = self.closed_book_file(cell)
        return {k: policy_input_file(s, k, cell, closed_book) for k, s in declared.items()}

    def p3_sweep_qc_input(self, cell: Cell) -> dict[str, str]:
        """P1 at QC for the P3 sweep's HwSA column, when the config has a QC condition."""
        if "QC" not in self.conditions:
            return {}
        return {"p1_qc": cell_file(GENERATION_FILE, cell, condition="QC", prompt="P1")}

    def audit_ratings(self, dataset: str) -> str:
        """The filled QC audit of one dataset (qc.audit_filled)."""
        return self.config["qc"]["audit_filled"][dataset]

    # --- tables and figures -----------------------------------------------------------
    # Each reads output kinds declared in grabrag.core.outputs; their files follow from
    # the declaration and this config, so no rule lists a table's or figure's inputs.

    def cell_conditions(self, dataset: str | None) -> list[str] | tuple[str, ...]:
        """The conditions of a dataset's cells: the probe's two on its own, else the config's."""
        if dataset in self.truthfulqa_datasets:
            return TRUTHFULQA_CONDITIONS
        return self.conditions

    def output_cells(self, name: str) -> list[dict[str, Any]]:
        """Every cell of output kind ``name`` this config produces, its axes in their
        order: the config's models, the datasets of its scope, the generation conditions,
        the policies that run on the cell's dataset, the context prompts."""
        spec = outputs.output(name)
        values = {
            "model": lambda cell: self.models,
            "dataset": lambda cell: self.dataset_scopes[spec.datasets],
            "condition": lambda cell: self.cell_conditions(cell.get("dataset")),
            "policy": lambda cell: self.metric_policies(cell["dataset"]),
            "prompt": lambda cell: list(CONTEXT_PROMPTS),
        }
        found: list[dict[str, Any]] = [{}]
        for axis in spec.axes:
            found = [{**cell, axis: value} for cell in found for value in values[axis](cell)]
        if spec.per_seed:
            found = [{**cell, "seed": seed} for seed in self.seeds for cell in found]
        return found

    def output_files(self, name: str, keys: Sequence[Cell]) -> list[str]:
        """The files of output kind ``name`` for the cells ``keys``; a kind without a
        pattern is a file the config names per dataset (the filled QC audit)."""
        spec = outputs.output(name)
        if spec.pattern is None:
            return [self.audit_ratings(key["dataset"]) for key in keys]
        if spec.per_seed:
            keys = [
                {**key, "dataset": self.replicate_name(key["dataset"], key["seed"])} for key in keys
            ]
        return files(spec.pattern, keys)

    def report_cells(self, reads: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        """The cell each input file of a table or figure is about, by output kind."""
        return {name: self.output_cells(name) for name in reads}

    def report_inputs(self, reads: Sequence[str], seed: int | None = None) -> dict[str, list[str]]:
        """The files of each output kind a table or figure reads; with ``seed``, from that
        construction seed's build of each dataset."""
        found = {}
        for name in reads:
            keys = self.output_cells(name)
            if seed is not None:
                keys = [
                    {**key, "dataset": self.replicate_name(key["dataset"], seed)} for key in keys
                ]
            found[name] = self.output_files(name, keys)
        return found

    def table_page_files(self, pages: str) -> list[str]:
        """The HTML pages of one report folder (a key of TABLE_PAGES): every table, or
        each table across the construction seeds (none with one seed)."""
        if pages == "tables":
            return files(TABLE_PAGE_FILE, cells(table=[*self.table_names, *self.extra_tables]))
        if not self.extra_seeds:
            return []
        return [f"results/tables/across_seeds/{name}.html" for name in self.seeded_tables]

    # --- targets ------------------------------------------------------------------------

    def policy_files(self, model: str, dataset: str) -> list[str]:
        decisions = cells(
            model=[model],
            dataset=[dataset],
            condition=self.conditions,
            policy=self.dataset_policies(dataset),
        )
        return files(DECISION_FILE, decisions) + [
            P3_SWEEP_FILE.format(model=model, dataset=dataset)
        ]

    def evidential_files(self, model: str, dataset: str) -> list[str]:
        """The per-model x dataset EvidentialRAG summaries (the sweep and the efficiency)."""
        if not self.evid_datasets or not self.runs_method("evidential", dataset):
            return []
        return [
            EVID_SWEEP_FILE.format(model=model, dataset=dataset),
            EVID_EFFICIENCY_FILE.format(model=model, dataset=dataset),
        ]

    def cdd_files(self, model: str, dataset: str) -> list[str]:
        """The per-model x dataset CDD summary."""
        if not self.cdd_datasets or not self.runs_method("cdd", dataset):
            return []
        return [CDD_DIAGNOSTICS_FILE.format(model=model, dataset=dataset)]

    def targets(self) -> list[str]:
        """The final targets of the run (rule ``all``)."""
        targets = []
        for dataset in [*self.datasets, *self.replicates]:
            targets += files(CONTEXT_FILE, cells(dataset=[dataset], condition=PAIRED_CONDITIONS))
            targets.append(f"results/contexts/{dataset}/report.json")
            targets += [
                f"results/qc/{dataset}/summary.json",
                CONTEXT_FILE.format(dataset=dataset, condition="QC"),
            ]
            if dataset in self.datasets:  # a person rates the base seed's QC sample
                targets.append(f"results/qc/{dataset}/audit_sample.csv")
            if "QX" in self.conditions:
                targets.append(CONTEXT_FILE.format(dataset=dataset, condition="QX"))
            for model in self.models:
                targets.append(GENERATION_REPORT_FILE.format(model=model, dataset=dataset))
                targets += self.policy_files(model, dataset)
                targets += self.evidential_files(model, dataset)
                targets += self.cdd_files(model, dataset)
        targets += files(TABLE_FILE, cells(table=[*self.table_names, *self.extra_tables]))
        targets += files(FIGURE_FILE, cells(figure=self.figure_names))
        for table in self.seeded_tables if self.extra_seeds else ():
            targets += [f"results/tables/seed{seed}/{table}.csv" for seed in self.extra_seeds]
            targets.append(f"results/tables/across_seeds/{table}.csv")
        targets += [
            f"results/report/{pages}" for pages in TABLE_PAGES if self.table_page_files(pages)
        ]
        return targets
