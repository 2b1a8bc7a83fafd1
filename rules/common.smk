# Config validation, wildcard constraints and input functions shared by every stage, and
# the only home of state derived from the config (datasets, policies, tables, ...): the
# other rule files read it and define none, so their include order does not matter.

import functools
import itertools
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))

from grabrag.core import registry
from grabrag.data.assets import manifest_path
from grabrag.pipeline.codehash import code_hash, module_code_hash
from grabrag.core.conditions import (
    CLOSED_BOOK,
    SEED_COMPARED,
    TRUTHFULQA,
    TRUTHFULQA_CONDITIONS,
)
from grabrag.pipeline.config import validate_config
from grabrag.contexts.paired import PAIRED_CONDITIONS
from grabrag.contexts.truthfulqa import TRUTHFULQA_CONTEXTS
from grabrag.core.errors import ConfigError
from grabrag.core import outputs
from grabrag.policies.paper import p3_sweep_grid
from grabrag.generation.prompts import CLOSED_BOOK_PROMPT, CONTEXT_PROMPTS
from grabrag.report.specs import (
    figure_names,
    figure_spec,
    figures,
    paper_order,
    report_labels,
    table_names,
    table_spec,
    tables,
)
from grabrag.report.tabular import render_caption, render_rst

try:
    config.update(validate_config(config))
except ConfigError as _error:
    raise WorkflowError(f"Invalid config: {_error}") from None

# One conda environment for every rule (paths in rule files are relative to rules/).
GRABRAG_ENV = "../envs/grabrag.yaml"
RESOURCES = config["resources_dir"]


def _model_threads():
    """A model job's CPU threads in a local run: the cores shared among the GPU jobs that
    run at once (`--resources gpu=N` runs N, each on a device of its own, see
    grabrag.core.devices), so that N of them fit side by side instead of each asking for every
    core. One GPU slot (the default profile's gpu=1): every core. On a cluster the
    profile's set-threads gives each job its own."""
    slots = workflow.global_resources.get("gpu")
    slots = getattr(slots, "value", slots)
    if isinstance(workflow.cores, int) and isinstance(slots, int) and slots > 1:
        return max(1, workflow.cores // slots)
    return workflow.cores


MODEL_THREADS = _model_threads()

# The CPU chain that makes every condition's contexts (data, retrieval, contexts, the QC and
# QX swaps) runs ahead of the model jobs, which wait on it anyway, and its jobs that take
# every core run first of all: Snakemake reserves no cores, so once one-thread model jobs
# run, a job that asks for every core waits for a moment when none holds one (on two cores
# the QC swaps waited two minutes, and the QC and QX cells ran last).
PREPARATION_PRIORITY = 10
ALL_CORES_PRIORITY = 20


def ner_threads():
    """The NER jobs' threads: GLiNER's torch takes every core; spaCy's small pipeline one, so
    that on a small machine its jobs fit beside a model job instead of waiting for all cores."""
    return 1 if config["ner"]["backend"] == "spacy" else workflow.cores


def ner_priority():
    return ALL_CORES_PRIORITY if ner_threads() > 1 else PREPARATION_PRIORITY


DATASETS = sorted(config["datasets"])
MODELS = sorted(config["models"])
# The order tables and figures list models and datasets in: the config's.
LISTED_ORDER = {"models": list(config["models"]), "datasets": list(config["datasets"])}
GENERATION_CONDITIONS = config["generation"]["conditions"]
POLICIES = config["policies"]["names"]


def _scoped(section):
    """The configured policies a method's config section scopes (grabrag.core.registry)."""
    return [p for p in POLICIES if registry.policy(p).scope == section]


# EvidentialRAG policies (rules/evidential.smk) among the configured ones.
EVID_POLICIES = _scoped("evidential")
# CDD, CDD-alpha and the prompt-only baselines (rules/cdd.smk) among the configured ones.
CDD_FAMILY = _scoped("cdd")


def _method_datasets(section):
    """The datasets a method runs on (`<section>.datasets`, null = all): EvidentialRAG and
    CDD cost several LLM calls per question, so a config may scope them."""
    names = config[section]["datasets"]
    return DATASETS if names is None else [d for d in DATASETS if d in names]


def runs_method(section, dataset):
    """Whether a method (`evidential`, `cdd`) runs on a built dataset: on a seed replicate
    where it runs on the dataset the replicate rebuilds."""
    return configured_dataset(dataset) in _method_datasets(section)


EVID_DATASETS = _method_datasets("evidential") if EVID_POLICIES else []
CDD_DATASETS = _method_datasets("cdd") if CDD_FAMILY else []
# Table 6: datasets whose QC audit sample a person has rated (qc.audit_filled).
AUDITED_DATASETS = [d for d in DATASETS if d in config["qc"]["audit_filled"]]

# Table 13 (seed sensitivity): one model x dataset rebuilt with another construction seed.
# The variant is a dataset of its own, "<dataset>_seed<seed>", that shares the base
# dataset's questions, corpus, retrieval, entity pool and closed-book answers (none of them
# depends on the per-question seed) and redoes the contexts, swaps, Q0/QC generation, NLI
# and policies. It stays out of DATASETS: only Table 13 reads it.
SEED_VARIANTS = {}
if config["seed_sensitivity"]:
    _sensitivity = config["seed_sensitivity"]
    SEED_VARIANTS[f"{_sensitivity['dataset']}_seed{_sensitivity['seed']}"] = _sensitivity
SEED_VARIANT_CONDITIONS = [c for c in SEED_COMPARED if c in GENERATION_CONDITIONS]

# Construction seeds (`seeds`): the outputs of `seed` keep the paths of a single-seed run;
# every other seed N rebuilds each dataset as a replicate "<dataset>_seedN" with its own
# question sample, corpus, retrieval, contexts, swaps, model passes, policies and metrics
# (nothing shared: the sample itself is drawn with the seed). Replicates stay out of
# DATASETS: tables read them per seed (results/tables/seedN/) and across the seeds
# (results/tables/across_seeds/).
BASE_SEED = config["seed"]
EXTRA_SEEDS = [seed for seed in config["seeds"] if seed != BASE_SEED]
SEEDS = [BASE_SEED, *EXTRA_SEEDS]
REPLICATES = {
    f"{dataset}_seed{seed}": {"dataset": dataset, "seed": seed}
    for seed in EXTRA_SEEDS
    for dataset in DATASETS
}


def replicate_name(dataset, seed):
    """A dataset as built with one construction seed: itself for `seed`."""
    return dataset if seed == BASE_SEED else f"{dataset}_seed{seed}"


def configured_dataset(dataset):
    """The `datasets` entry a built dataset (itself, a seed replicate or Table 13's
    variant) takes its adapter, asset, sizes and method scopes from."""
    for derived in (REPLICATES, SEED_VARIANTS):
        if dataset in derived:
            return derived[dataset]["dataset"]
    return dataset


def labelled(keys):
    """Cells of seed replicates named by their configured dataset: what a replicate's
    metrics call their rows, so its tables read like the base seed's. (Table 13's variant
    keeps its own name: its table sets it beside the base dataset.)"""
    return [
        (
            {**key, "dataset": REPLICATES[key["dataset"]]["dataset"]}
            if key["dataset"] in REPLICATES
            else key
        )
        for key in keys
    ]


def seeded(keys):
    """The cells `keys` (of configured datasets) in every seed's build, seed by seed."""
    return [
        {**key, "dataset": replicate_name(key["dataset"], seed)} for seed in SEEDS for key in keys
    ]


# CDD's TruthfulQA misconception-injection probe (rules/truthfulqa.smk): a dataset of its
# own with its own two conditions, on which every configured policy runs. It stays out of
# DATASETS: only its table reads it.
TRUTHFULQA_PROBE = config["truthfulqa_probe"]
TRUTHFULQA_DATASETS = [TRUTHFULQA] if TRUTHFULQA_PROBE else []

# CDD and CDD_ALPHA both read the CDD traces; the baselines among the configured policies.
CDD_TRACES = any(registry.CDD_TRACES in registry.policy(p).inputs.values() for p in POLICIES)
CDD_BASELINES = [p for p in POLICIES if registry.CDD_CELL in registry.policy(p).inputs.values()]


# What this config turns on, for the tables and figures it produces (grabrag.report.tables).
FEATURES = registry.Features(
    conditions=tuple(GENERATION_CONDITIONS),
    evidential=bool(EVID_DATASETS),
    cdd_family=bool(CDD_FAMILY),
    cdd_traces=CDD_TRACES,
    cdd_diagnostics=CDD_TRACES and bool(config["cdd"]["diagnostics"]),
    audited=bool(AUDITED_DATASETS),
    seed_sensitivity=bool(SEED_VARIANTS),
    truthfulqa_probe=bool(TRUTHFULQA_PROBE),
)
# The tables and figures this config produces (grabrag.report.specs).
TABLE_NAMES = table_names(FEATURES)
# The tables built from the metrics alone: those a seed's build and the seeds pooled
# remake (the others read per-seed outputs, such as the audit, that only the base seed has).
SEEDED_TABLES = [name for name in TABLE_NAMES if table_spec(name).reads == ("metrics",)]
FIGURE_NAMES = figure_names(FEATURES)
# The report lists the tables in the papers' order, the figures as declared.
TABLE_LABELS = report_labels(paper_order(TABLE_NAMES))
FIGURE_LABELS = report_labels(FIGURE_NAMES)


def p3_sweep_qc_input(wildcards):
    """P1 at QC for the P3 sweep's HwSA column, when the config has a QC condition."""
    if "QC" not in GENERATION_CONDITIONS:
        return {}
    return {"p1_qc": cell_file(GENERATION_FILE, wildcards, condition="QC", prompt="P1")}


def _alternatives(names):
    return "|".join(re.escape(n) for n in sorted(names))


# The datasets the GRAB-RAG stages build questions, corpus and contexts for: the probe's
# dataset has rules of its own for those (rules/truthfulqa.smk).
BUILT_DATASETS = _alternatives([*config["datasets"], *SEED_VARIANTS, *REPLICATES])


wildcard_constraints:
    asset=_alternatives(config["assets"]),
    dataset=_alternatives([*config["datasets"], *SEED_VARIANTS, *REPLICATES, *TRUTHFULQA_DATASETS]),
    seed=_alternatives(map(str, EXTRA_SEEDS)) if EXTRA_SEEDS else "(?!)",
    model=_alternatives(config["models"]),
    condition=_alternatives(
        [*GENERATION_CONDITIONS, *(TRUTHFULQA_CONDITIONS if TRUTHFULQA_PROBE else ())]
    ),
    policy=_alternatives(POLICIES),
    table=_alternatives(tables()),
    figure=_alternatives(figures()),


def cells(**values):
    """Every combination of the given wildcard values, in `expand`'s order, each a dict
    such as {"model": ..., "dataset": ...}. A rule passes them as a param beside the files
    `files` names after them: its script learns what each file is about from the param,
    never from the path."""
    return [dict(zip(values, combo)) for combo in itertools.product(*values.values())]


def files(pattern, keys):
    """The file of each key of `cells` (pattern: wildcard names in braces)."""
    return [pattern.format(**key) for key in keys]


def cell_file(pattern, wildcards, **values):
    """The file of one job's cell: `pattern` filled from its wildcards, `values` added or
    in their place (e.g. a policy rule's input from another stage of the same cell)."""
    return pattern.format_map({**wildcards, **values})


# The per-cell files other stages read. The rule that writes one spells its path out in
# its output (Snakemake's guidelines: literal results/ paths there); the readers, rules
# and input functions alike, name it by these patterns.
CONTEXT_FILE = "results/contexts/{dataset}/{condition}.jsonl"
GENERATION_FILE = "results/generation/{model}/{dataset}/{condition}/{prompt}.jsonl"
EVIDENTIAL_FILE = "results/evidential/{model}/{dataset}/{condition}/{policy}.jsonl"
DECISION_FILE = "results/policies/{model}/{dataset}/{condition}/{policy}.jsonl"


def stable(mapping):
    """A key-sorted copy: params compare by value, so reordering the YAML reruns nothing."""
    return json.loads(json.dumps(mapping, sort_keys=True))


def model_settings(wildcards):
    """The model's config entry, as a param of the jobs that load it."""
    return stable(config["models"][wildcards.model])


def checkpoint_in(directory, name):
    """Param function: the hidden checkpoint file `name` in a job's output folder
    (`directory` is a function of the wildcards)."""
    return lambda wildcards: f"{directory(wildcards)}/{name}"


def base_dataset(dataset):
    """The dataset whose questions, corpus and retrieval a (seed-variant) dataset uses."""
    return SEED_VARIANTS[dataset]["dataset"] if dataset in SEED_VARIANTS else dataset


def base_file(stage, name):
    """Input function: a file of the base dataset's `stage` (data, retrieval, qc)."""
    return lambda wildcards: f"results/{stage}/{base_dataset(wildcards.dataset)}/{name}"


def construction_seed(wildcards):
    """The per-question seed base: Random(seed + i) for shuffles and swaps."""
    for derived in (SEED_VARIANTS, REPLICATES):
        if wildcards.dataset in derived:
            return derived[wildcards.dataset]["seed"]
    return config["seed"]


def sample_seed(wildcards):
    """The seed the question sample and the corpus order are drawn with: a seed
    replicate's own; Table 13's variant keeps the base questions."""
    return REPLICATES.get(wildcards.dataset, {}).get("seed", config["seed"])


def dataset_config(wildcards):
    """The `datasets` entry of a built dataset, as a param."""
    return stable(config["datasets"][configured_dataset(wildcards.dataset)])


def closed_book_cell(wildcards):
    """The CB answers: the closed-book pass sees no context, so a seed variant reuses them."""
    return cell_file(
        GENERATION_FILE,
        wildcards,
        dataset=base_dataset(wildcards.dataset),
        condition=CLOSED_BOOK,
        prompt=CLOSED_BOOK_PROMPT,
    )


def metric_policies(dataset):
    """Policies the metrics (or the TruthfulQA probe's table) of one dataset evaluate. A
    seed variant (Table 13) runs those that need no model pass of their own (P0-P4, and a
    module's policy that reads their cells): EvidentialRAG's and CDD's passes would be
    wasted, as Table 13 shows neither."""
    if dataset in SEED_VARIANTS:
        return [p for p in POLICIES if not registry.policy(p).own_pass]
    if dataset in TRUTHFULQA_DATASETS:
        return POLICIES  # the probe runs every policy that can run on it
    return dataset_policies(dataset)


def dataset_policies(dataset):
    """The configured policies that run on one dataset (a scoped one, e.g. EVID and the
    CDD family, only on the datasets its config section names)."""
    scopes = {p: registry.policy(p).scope for p in POLICIES}
    return [p for p in POLICIES if scopes[p] is None or runs_method(scopes[p], dataset)]


def metric_cells(dataset):
    """(model, condition) pairs the metrics of one dataset read."""
    if dataset in SEED_VARIANTS:
        return [(SEED_VARIANTS[dataset]["model"], c) for c in SEED_VARIANT_CONDITIONS]
    return [(model, condition) for model in MODELS for condition in GENERATION_CONDITIONS]


def metric_decision_cells(dataset):
    """The decision files (as `cells`) the metrics of one dataset read."""
    return [
        {"model": model, "dataset": dataset, "condition": condition, "policy": policy}
        for model, condition in metric_cells(dataset)
        for policy in metric_policies(dataset)
    ]


def metric_context_cells(dataset):
    """The context files (as `cells`) the metrics of one dataset read."""
    conditions = dict.fromkeys(condition for _, condition in metric_cells(dataset))
    return cells(dataset=[dataset], condition=list(conditions))


def audit_decision_cells(wildcards):
    """Table 6's decision files (as `cells`): every model and policy at Q0 and QC."""
    return cells(
        model=MODELS,
        dataset=[wildcards.dataset],
        condition=SEED_VARIANT_CONDITIONS,
        policy=dataset_policies(wildcards.dataset),
    )


# Every decision and context file the metrics of the (non-variant) datasets read.
ALL_DECISION_CELLS = [cell for dataset in DATASETS for cell in metric_decision_cells(dataset)]
ALL_CONTEXT_CELLS = cells(dataset=DATASETS, condition=GENERATION_CONDITIONS)


def audit_ratings(wildcards):
    """The filled QC audit of one dataset (qc.audit_filled)."""
    return config["qc"]["audit_filled"][wildcards.dataset]


def ner_tokenizer_asset():
    """The GLiNER backbone's tokenizer asset (ner.tokenizer), when the config names one."""
    name = config["ner"].get("tokenizer")
    return asset_manifest(name) if name else []


def asset_manifest(name):
    """The file target that stands for one materialised asset."""
    return manifest_path(RESOURCES, name)


def dataset_asset(wildcards):
    return asset_manifest(config["datasets"][configured_dataset(wildcards.dataset)]["asset"])


def served(model):
    """Whether models.<model> is called through its endpoint (no GGUF, no GPU in the job)."""
    return bool(config["models"][model].get("endpoint"))


def model_asset(wildcards):
    """The model's GGUF; none for a served model."""
    if served(wildcards.model):
        return []
    return asset_manifest(config["models"][wildcards.model]["asset"])


def served_models():
    """For the tables' note: each served model's server, model name and constraint."""
    return {
        model: {
            k: config["models"][model]["endpoint"][k] for k in ("base_url", "model", "constraint")
        }
        for model in MODELS
        if served(model)
    }


# A served model's jobs are light HTTP clients: one thread, no GPU slot (the server holds
# the GPUs), so they run side by side and the server batches their requests.
def llm_threads(model):
    """The CPU threads of a job that runs `model`: one for a served model, the model's
    `threads` where set, else a share of the cores (MODEL_THREADS)."""
    if served(model):
        return 1
    return config["models"][model].get("threads") or MODEL_THREADS


def llm_gpus(model):
    """A GPU slot only for a GGUF that offloads layers: a model on the CPU (n_gpu_layers 0)
    or behind a server holds none, so its jobs run side by side as far as their threads
    allow instead of queueing for a device they do not use."""
    entry = config["models"][model]
    return 0 if served(model) or entry.get("n_gpu_layers", 0) == 0 else 1


def model_threads(wildcards):
    return llm_threads(wildcards.model)


def model_gpus(wildcards):
    return llm_gpus(wildcards.model)


def generation_settings():
    """The decoding settings only: changing `conditions` must not rerun finished cells."""
    return stable({k: v for k, v in config["generation"].items() if k != "conditions"})


def generation_report_cells(wildcards):
    """Every generation file (as `cells`) of one model x dataset: the context prompts at
    each condition, then the closed-book pass."""
    return cells(
        model=[wildcards.model],
        dataset=[wildcards.dataset],
        condition=GENERATION_CONDITIONS,
        prompt=CONTEXT_PROMPTS,
    ) + cells(
        model=[wildcards.model],
        dataset=[wildcards.dataset],
        condition=[CLOSED_BOOK],
        prompt=[CLOSED_BOOK_PROMPT],
    )


def nli_asset(wildcards):
    """The verifier's weights: the configured asset, or the generator's own GGUF (llm)."""
    if nli_served(wildcards):
        return []
    name = config["nli"]["asset"] or config["models"][wildcards.model]["asset"]
    return asset_manifest(name)


def nli_served(wildcards):
    """The llm verifier with no asset of its own labels through a served generator."""
    nli = config["nli"]
    return nli["backend"] == "llm" and not nli["asset"] and served(wildcards.model)


# The llm verifier runs with its generator's n_gpu_layers and threads (its own GGUF too);
# a transformers model may sit on a GPU (nli.device), so it keeps its slot.
def nli_threads(wildcards):
    if nli_served(wildcards):
        return 1
    if config["nli"]["backend"] == "llm" and not served(wildcards.model):
        return llm_threads(wildcards.model)
    return MODEL_THREADS


def nli_gpus(wildcards):
    # llm_gpus: no slot for a served generator (nli_served) nor for one on the CPU
    return llm_gpus(wildcards.model) if config["nli"]["backend"] == "llm" else 1


def generation_dir(wildcards):
    return f"results/generation/{wildcards.model}/{wildcards.dataset}/{wildcards.condition}"


def closed_book_dir(wildcards):
    return f"results/generation/{wildcards.model}/{wildcards.dataset}/{CLOSED_BOOK}"


def generation_cell(wildcards, prompt):
    return cell_file(GENERATION_FILE, wildcards, prompt=prompt)


def evidential_dir(wildcards):
    return f"results/evidential/{wildcards.model}/{wildcards.dataset}/{wildcards.condition}"


# The file each input source of a policy (grabrag.core.registry.SOURCES) names in one cell.
POLICY_SOURCES = {
    registry.GENERATION: lambda wildcards, key: generation_cell(wildcards, key),
    registry.CLOSED_BOOK_PASS: lambda wildcards, key: closed_book_cell(wildcards),
    registry.NLI: lambda wildcards, key: (
        f"results/nli/{wildcards.model}/{wildcards.dataset}/{wildcards.condition}.jsonl"
    ),
    registry.EVIDENTIAL: lambda wildcards, key: cell_file(EVIDENTIAL_FILE, wildcards, policy=key),
    registry.CDD_TRACES: lambda wildcards, key: f"{cdd_dir(wildcards)}/traces.jsonl",
    registry.CDD_CELL: lambda wildcards, key: f"{cdd_dir(wildcards)}/{key}.jsonl",
}


def policy_inputs(wildcards):
    """What one policy reads, as its registry entry declares it."""
    sources = registry.policy(wildcards.policy).inputs
    return {key: POLICY_SOURCES[source](wildcards, key) for key, source in sources.items()}


def policy_code(wildcards):
    """The code of the module whose function decides a policy (its closure in the library,
    or a config module's file and its helpers), as a param: editing P3's code reruns P3's
    jobs and what reads them, not P0's."""
    return extension_code(registry.policy(wildcards.policy).code_file())


def policy_settings(wildcards):
    """The settings one policy depends on (its only params: editing another policy's
    setting reruns nothing of this one)."""
    return stable(registry.policy(wildcards.policy).config_settings(config))


def policy_files(model, dataset):
    decisions = cells(
        model=[model],
        dataset=[dataset],
        condition=GENERATION_CONDITIONS,
        policy=dataset_policies(dataset),
    )
    return files(DECISION_FILE, decisions) + [f"results/policies/{model}/{dataset}/P3_sweep.csv"]


def evaluator_name(wildcards):
    """The EvidentialRAG evaluator: the configured model, or the generator itself (null)."""
    return config["evidential"]["evaluator"] or wildcards.model


def evaluator_asset(wildcards):
    if served(evaluator_name(wildcards)):
        return []
    return asset_manifest(config["models"][evaluator_name(wildcards)]["asset"])


def evaluator_threads(wildcards):
    return llm_threads(evaluator_name(wildcards))


def evaluator_gpus(wildcards):
    return llm_gpus(evaluator_name(wildcards))


def fusion_settings():
    """lambda, tau1, tau2 and merge_f1 of the EVID / EVID_CB policies."""
    return stable({k: config["evidential"][k] for k in ("lam", "tau1", "tau2", "merge_f1")})


def evidential_files(model, dataset):
    """The per-model x dataset EvidentialRAG summaries (the sweep and the efficiency)."""
    if not EVID_DATASETS or not runs_method("evidential", dataset):
        return []
    return [
        f"results/evidential/{model}/{dataset}/sweep.csv",
        f"results/evidential/{model}/{dataset}/efficiency.json",
    ]


def evidential_cells(wildcards):
    """The EVID / EVID_CB files (as `cells`) of one model x dataset."""
    return cells(
        model=[wildcards.model],
        dataset=[wildcards.dataset],
        condition=GENERATION_CONDITIONS,
        policy=EVID_POLICIES,
    )


# --- CDD (rules/cdd.smk) ---------------------------------------------------------


def cdd_dir(wildcards):
    return f"results/cdd/{wildcards.model}/{wildcards.dataset}/{wildcards.condition}"


def cdd_files(model, dataset):
    """The per-model x dataset CDD summary (targets of `all`)."""
    if not CDD_DATASETS or not runs_method("cdd", dataset):
        return []
    return [f"results/cdd/{model}/{dataset}/diagnostics.csv"]


def cdd_decision_cells(wildcards):
    """The decision files (as `cells`) of P1 and the CDD family in one model x dataset."""
    return cells(
        model=[wildcards.model],
        dataset=[wildcards.dataset],
        condition=GENERATION_CONDITIONS,
        policy=[p for p in ("P1", *CDD_FAMILY) if p in POLICIES],
    )


def cdd_generation_settings():
    """Decoding settings CDD uses: its own step limit replaces generation.max_tokens, so
    changing the latter (or the condition list) does not rerun finished CDD cells."""
    settings = {k: v for k, v in generation_settings().items() if k != "max_tokens"}
    return stable({**settings, "max_tokens": config["cdd"]["step_max_tokens"]})


SCRIPTS_DIR = Path(workflow.basedir) / "workflow" / "scripts"
LIBRARY_DIR = Path(workflow.basedir) / "workflow" / "grabrag"


@functools.cache
def script_code(script):
    """The code a rule's script runs, as a param: a hash of the script and of every module
    of grabrag that it imports, directly or through other modules (found by reading the
    imports, grabrag/pipeline/codehash.py), in a normalised form that comments, layout and
    docstrings do not change. Snakemake reruns a job when its own script changes, not when
    a module the script imports does; this param makes an edit of that code rerun the job.
    A hash, not the files as inputs: Snakemake's mtime check did not fire for inputs
    outside the working directory, and touching a file without changing it reruns nothing.
    Each script-running rule passes it (check_rules, called at the end of the Snakefile,
    makes sure); each module is read and parsed once per `snakemake` call."""
    return code_hash(SCRIPTS_DIR / script, LIBRARY_DIR)


@functools.cache
def extension_code(path):
    """The hash of one module's code: a library module with its closure in the library, a
    config module (``modules``) with the helper modules it imports from its own folder."""
    return module_code_hash(Path(path), LIBRARY_DIR)


def _may_use_gpu(gpu):
    """A rule's gpu resource: a number, or a function of the job (a served model's jobs
    take none), which may."""
    try:
        return bool(getattr(gpu, "value", gpu))
    except ValueError:
        return True


def check_rules():
    """Every script-running rule passes `code=script_code(<its script>)`, and every GPU
    rule writes a benchmark; one added or copied without them is an error at once, not a
    silent miss."""
    for each in workflow.rules:
        if each.script is not None:
            script = Path(str(each.script)).name
            code = each.params.get("code") if "code" in each.params.keys() else None
            if code != script_code(script):
                raise WorkflowError(
                    f'{each.name} runs {script}, so its params need code=script_code("{script}")'
                )
        if "gpu" in each.resources and not each.benchmark and _may_use_gpu(each.resources["gpu"]):
            raise WorkflowError(f"{each.name} uses a GPU, so it needs a benchmark file")


# --- tables and figures (rules/report.smk) ---------------------------------------------
# Each reads output kinds declared in grabrag.core.outputs; their files follow from the
# declaration and this config, so no rule lists a table's or figure's inputs.

# The datasets each dataset scope of an output kind stands for in this config.
DATASET_SCOPES = {
    outputs.ALL_DATASETS: DATASETS,
    outputs.EVIDENTIAL_DATASETS: EVID_DATASETS,
    outputs.CDD_DATASETS: CDD_DATASETS,
    outputs.CDD_TRACE_DATASETS: CDD_DATASETS if CDD_TRACES else [],
    outputs.CDD_DIAGNOSTIC_DATASETS: CDD_DATASETS if FEATURES.cdd_diagnostics else [],
    outputs.AUDITED_DATASETS: AUDITED_DATASETS,
    outputs.SEED_VARIANT_DATASETS: list(SEED_VARIANTS),
    outputs.TRUTHFULQA_DATASETS: TRUTHFULQA_DATASETS,
}


def cell_conditions(dataset):
    """The conditions of a dataset's cells: the probe's two on its own, else the config's."""
    return TRUTHFULQA_CONDITIONS if dataset in TRUTHFULQA_DATASETS else GENERATION_CONDITIONS


def output_cells(name):
    """Every cell of output kind `name` this config produces, its axes in their order:
    the config's models, the datasets of its scope, the generation conditions, the
    policies that run on the cell's dataset, the context prompts."""
    spec = outputs.output(name)
    values = {
        "model": lambda cell: MODELS,
        "dataset": lambda cell: DATASET_SCOPES[spec.datasets],
        "condition": lambda cell: cell_conditions(cell.get("dataset")),
        "policy": lambda cell: metric_policies(cell["dataset"]),
        "prompt": lambda cell: list(CONTEXT_PROMPTS),
    }
    found = [{}]
    for axis in spec.axes:
        found = [{**cell, axis: value} for cell in found for value in values[axis](cell)]
    if spec.per_seed:
        found = [{**cell, "seed": seed} for seed in SEEDS for cell in found]
    return found


def output_files(name, keys):
    """The files of output kind `name` for the cells `keys`; a kind without a pattern is
    a file the config names per dataset (the filled QC audit)."""
    pattern = outputs.output(name).pattern
    if pattern is None:
        return [config["qc"]["audit_filled"][key["dataset"]] for key in keys]
    if outputs.output(name).per_seed:
        keys = [{**key, "dataset": replicate_name(key["dataset"], key["seed"])} for key in keys]
    return files(pattern, keys)


def report_item(wildcards):
    """The table or figure spec of one job (grabrag.report.specs)."""
    if "table" in wildcards.keys():
        return table_spec(wildcards.table)
    return figure_spec(wildcards.figure)


def report_inputs(wildcards):
    """The files of each output kind a table or figure reads, by kind."""
    return {name: output_files(name, output_cells(name)) for name in report_item(wildcards).reads}


def seed_report_inputs(wildcards):
    """The files a table reads, from one construction seed's build of each dataset."""
    seed = int(wildcards.seed)
    return {
        name: output_files(
            name,
            [
                {**key, "dataset": replicate_name(key["dataset"], seed)}
                for key in output_cells(name)
            ],
        )
        for name in report_item(wildcards).reads
    }


def across_seeds_caption(table):
    """An across-seed table's caption: the seeds, what its columns are, and the table's own."""
    listed = ", ".join(map(str, SEEDS))
    own = render_caption(caption_template("tables", table), config)
    return (
        f"Across construction seeds {listed}: each number of {table} as mean +/- sd over "
        "the seeds (EvidentialRAG's form; sd with n - 1), and beside it the same number over "
        "every seed's questions pooled, with its paired-bootstrap 95% CI where the table "
        f"gives one. Numbers as in the table's tidy file (rates as fractions). {table}: {own}"
    )


def report_cells(wildcards):
    """The cell each input file of a table or figure is about, by output kind."""
    return {name: output_cells(name) for name in report_item(wildcards).reads}


def report_settings(wildcards):
    """The config settings a table or figure declares (grabrag.report.specs.SETTINGS),
    only those, so editing one reruns the outputs that show it and no other."""
    return stable(report_item(wildcards).config_settings(config))


def report_code(wildcards):
    """The code of the module that declares a table or figure (its closure in the library,
    or a config module's file and its helpers), as a param: editing it reruns the outputs
    that module declares, and no other."""
    return extension_code(report_item(wildcards).code_file())


@functools.cache
def caption_template(kind, name):
    """A table's or figure's caption file: workflow/report/<kind>/<name>.rst, or the file a
    module's spec names (relative to that module's folder)."""
    spec = table_spec(name) if kind == "tables" else figure_spec(name)
    if spec.caption is None:
        path = Path(workflow.basedir) / "workflow" / "report" / kind / f"{name}.rst"
    else:
        path = spec.code_file().parent / spec.caption
    if not path.is_file():
        raise WorkflowError(
            f"{kind[:-1]} {name}: no caption file at {path}; write its caption there"
        )
    return path.read_text(encoding="utf-8")


def report_caption(kind):
    """Input function: the caption the report shows, rendered with this config."""
    return lambda wildcards: render_rst(caption_template(kind, wildcards[kind[:-1]]), config)


def table_caption(wildcards):
    """A table's caption on one line, as its Markdown and LaTeX files carry it."""
    return render_caption(caption_template("tables", wildcards.table), config)


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


def context_settings(condition):
    """The `contexts` keys one condition's rows read, as a param (None: every key)."""
    keys = CONTEXT_KEYS[condition] if condition else config["contexts"]
    return stable({key: config["contexts"][key] for key in keys})


def tokenizer_asset():
    return config["contexts"]["tokenizer"] or config["retrieval"]["encoder"]


def context_files(dataset):
    return files(CONTEXT_FILE, cells(dataset=[dataset], condition=PAIRED_CONDITIONS))


def all_targets():
    targets = []
    for dataset in [*DATASETS, *REPLICATES]:
        targets += context_files(dataset)
        targets.append(f"results/contexts/{dataset}/report.json")
        targets += [
            f"results/qc/{dataset}/summary.json",
            CONTEXT_FILE.format(dataset=dataset, condition="QC"),
        ]
        if dataset in DATASETS:  # a person rates the base seed's QC sample
            targets.append(f"results/qc/{dataset}/audit_sample.csv")
        if "QX" in GENERATION_CONDITIONS:
            targets.append(CONTEXT_FILE.format(dataset=dataset, condition="QX"))
        for model in MODELS:
            targets.append(f"results/generation/{model}/{dataset}/report.json")
            targets += policy_files(model, dataset)
            targets += evidential_files(model, dataset)
            targets += cdd_files(model, dataset)
    targets += [f"results/tables/{name}.csv" for name in TABLE_NAMES]
    targets += [f"results/figures/{figure}.pdf" for figure in FIGURE_NAMES]
    for table in SEEDED_TABLES if EXTRA_SEEDS else ():
        targets += [f"results/tables/seed{seed}/{table}.csv" for seed in EXTRA_SEEDS]
        targets.append(f"results/tables/across_seeds/{table}.csv")
    targets += [f"results/report/{pages}" for pages in TABLE_PAGES if table_page_files(pages)]
    return targets


# The report's two folders of table pages (rule table_pages) and their category there.
TABLE_PAGES = {"tables": "Tables", "tables_across_seeds": "Tables across seeds"}


def table_page_files(pages):
    """The HTML pages of one report folder (a key of TABLE_PAGES): every table, or each
    table across the construction seeds (none with one seed)."""
    if pages == "tables":
        return [f"results/tables/{name}.html" for name in TABLE_NAMES]
    return [f"results/tables/across_seeds/{name}.html" for name in SEEDED_TABLES if EXTRA_SEEDS]
