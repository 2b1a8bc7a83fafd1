# The Snakemake anchor of the run: config validation, the run model (grabrag.pipeline.run,
# which knows what this config runs and which files each job reads), wildcard constraints,
# one-line input functions grouped by the rule file that uses them, code hashes and
# captions. The rule files define no state of their own, so their include order does not
# matter.

import functools
import hashlib
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))

from grabrag.contexts.paired import PAIRED_CONDITIONS
from grabrag.contexts.truthfulqa import TRUTHFULQA_CONTEXTS
from grabrag.core import registry
from grabrag.core.conditions import CLOSED_BOOK, TRUTHFULQA
from grabrag.core.errors import ConfigError
from grabrag.core.outputs import TRUTHFULQA_DECISIONS
from grabrag.data.assets import manifest_path
from grabrag.data.datasets import adapter_code_file
from grabrag.generation.backends import module_backend
from grabrag.generation.prompts import CONTEXT_PROMPTS
from grabrag.pipeline.codehash import code_hash, module_code_hash
from grabrag.pipeline.config import validate_config
from grabrag.pipeline.ledger_inputs import ledger_files, planned_calls
from grabrag.pipeline.cells import cell_file, files, stable
from grabrag.pipeline.files import (
    CDD_CELL_FILE,
    CONTEXT_FILE,
    DECISION_FILE,
    EVIDENTIAL_FILE,
    GENERATION_FILE,
    REASK_FILE,
    REASK_TABLE,
    REPRODUCTION_TABLES,
    TABLE_PAGES,
)
from grabrag.pipeline.run import Run
from grabrag.pipeline.scope import method_context_files
from grabrag.policies.paper import p3_sweep_grid
from grabrag.report.specs import figure_spec, figures, table_spec, tables
from grabrag.report.tabular import render_caption, render_rst

try:
    config.update(validate_config(config))
except ConfigError as _error:
    raise WorkflowError(f"Invalid config: {_error}") from None

# One conda environment for every rule (paths in rule files are relative to rules/).
GRABRAG_ENV = "../envs/grabrag.yaml"
RESOURCES = config["resources_dir"]


def _model_threads():
    """A local model job's CPU threads: the cores shared among the GPU jobs that run at
    once (`--resources gpu=N` runs N, each on a device of its own, see
    grabrag.core.devices), so that N of them fit side by side instead of each asking for
    every core. One GPU slot (the default profile's gpu=1): every core. On a cluster the
    profile's set-threads gives each job its own."""
    slots = workflow.global_resources.get("gpu")
    slots = getattr(slots, "value", slots)
    if isinstance(workflow.cores, int) and isinstance(slots, int) and slots > 1:
        return max(1, workflow.cores // slots)
    return workflow.cores


MODEL_THREADS = _model_threads()
RUN = Run(config, local_threads=MODEL_THREADS)

# The CPU chain that makes every condition's contexts (data, retrieval, contexts, the QC and
# QX swaps) runs ahead of the model jobs, which wait on it anyway, and its jobs that take
# every core run first of all: Snakemake reserves no cores, so once one-thread model jobs
# run, a job that asks for every core waits for a moment when none holds one (on two cores
# the QC swaps waited two minutes, and the QC and QX cells ran last).
PREPARATION_PRIORITY = 10
ALL_CORES_PRIORITY = 20


def _alternatives(names):
    return "|".join(re.escape(n) for n in sorted(names)) if names else "(?!)"


wildcard_constraints:
    **{name: _alternatives(values) for name, values in RUN.wildcard_values().items()},
    table=_alternatives(tables()),
    figure=_alternatives(figures()),


def asset_manifest(name):
    """The file target that stands for one materialised asset ([] for none)."""
    return manifest_path(RESOURCES, name) if name else []


# --- rules/assets.smk -----------------------------------------------------------------
asset_spec = lambda w: stable(config["assets"][w.asset])

# --- rules/data.smk and rules/contexts.smk --------------------------------------------
BUILT_DATASETS = _alternatives(RUN.built_datasets)
dataset_asset = lambda w: asset_manifest(
    config["datasets"][RUN.configured_dataset(w.dataset)]["asset"]
)
# An adapter from a config module is code of the dataset's build: editing it rebuilds that
# dataset (a built-in adapter is part of prepare_data's own code).
dataset_config = lambda w: with_adapter_code(RUN.dataset_config(w.dataset))
sample_seed = lambda w: RUN.sample_seed(w.dataset)
construction_seed = lambda w: RUN.construction_seed(w.dataset)
base_file = lambda stage, name: lambda w: RUN.base_file(stage, name, w.dataset)
TOKENIZER = asset_manifest(RUN.tokenizer_asset())

# --- rules/qc.smk ----------------------------------------------------------------------
NER = asset_manifest(config["ner"]["asset"])
NER_TOKENIZER = asset_manifest(config["ner"].get("tokenizer"))
# GLiNER's torch takes every core; spaCy's small pipeline one, so that on a small machine
# its jobs fit beside a model job instead of waiting for all cores.
NER_THREADS = 1 if config["ner"]["backend"] == "spacy" else workflow.cores
NER_PRIORITY = ALL_CORES_PRIORITY if NER_THREADS > 1 else PREPARATION_PRIORITY
pool_source = lambda w: dataset_asset(w) if config["qc"]["pool"] == "dataset_gold" else []
dataset_adapter = lambda w: config["datasets"][RUN.configured_dataset(w.dataset)]["adapter"]

# --- model jobs: rules/endpoint.smk, generate.smk, reask.smk, policies.smk (nli),
# evidential.smk, cdd.smk
SERVED_MODELS = _alternatives(RUN.served_models())
# What stands for a model among a job's inputs: a local model's asset manifest, a served
# model's canary file (rules/endpoint.smk).
model_input = lambda entry: entry.proof or asset_manifest(entry.asset)
model_asset = lambda w: model_input(RUN.model(w.model))
model_settings = lambda w: backend_settings(RUN.model(w.model))
model_threads = lambda w: RUN.model(w.model).threads
model_gpus = lambda w: RUN.model(w.model).gpus
closed_book_cell = lambda w: RUN.closed_book_file(w)


def checkpoint_in(stage, name, condition=None):
    """Param function: the hidden checkpoint file `name` in a job's output folder."""
    return lambda w: f"results/{stage}/{w.model}/{w.dataset}/{condition or w.condition}/{name}"


generation_report_cells = lambda w: RUN.generation_report_cells(w.model, w.dataset)

# --- rules/policies.smk ----------------------------------------------------------------
verifier_asset = lambda w: (
    RUN.model(w.model).proof
    if RUN.verifier(w.model).served
    else asset_manifest(RUN.verifier(w.model).asset)
)
verifier_threads = lambda w: RUN.verifier(w.model).threads
verifier_gpus = lambda w: RUN.verifier(w.model).gpus
policy_inputs = lambda w: RUN.policy_inputs(w)
policy_settings = lambda w: RUN.policy_settings(w.policy)
# The code of the module whose function decides a policy: editing P3's code reruns P3's
# jobs and what reads them, not P0's.
policy_code = lambda w: extension_code(registry.policy(w.policy).code_file())
p3_sweep_qc_input = lambda w: RUN.p3_sweep_qc_input(w)

# --- rules/truthfulqa.smk -------------------------------------------------------------
scores_by_nli = RUN.truthfulqa_scorer == "nli"
truthfulqa_score_cells = lambda w: [
    c for c in RUN.output_cells(TRUTHFULQA_DECISIONS) if c["model"] == w.model
]
truthfulqa_score_inputs = lambda w: {
    "questions": f"results/data/{TRUTHFULQA}/questions.jsonl",
    "decisions": RUN.output_files(TRUTHFULQA_DECISIONS, truthfulqa_score_cells(w)),
    **({"nli": asset_manifest(config["nli"]["asset"])} if scores_by_nli else {}),
}
truthfulqa_scorer_threads = lambda w: RUN.verifier(w.model).threads if scores_by_nli else 1
truthfulqa_scorer_gpus = lambda w: RUN.verifier(w.model).gpus if scores_by_nli else 0

# --- rules/evidential.smk --------------------------------------------------------------
evaluator_name = lambda w: RUN.evaluator(w.model).name
evaluator_settings = lambda w: backend_settings(RUN.evaluator(w.model))
evaluator_asset = lambda w: model_input(RUN.evaluator(w.model))
evaluator_threads = lambda w: RUN.evaluator(w.model).threads
evaluator_gpus = lambda w: RUN.evaluator(w.model).gpus
evidential_cells = lambda w: RUN.evidential_cells(w.model, w.dataset)
evidential_contexts = lambda w: method_context_files(config, "evidential", w, [w.condition])[0]
evidential_condition_contexts = lambda w: method_context_files(
    config, "evidential", w, RUN.conditions
)

# --- rules/cdd.smk ---------------------------------------------------------------------
cdd_decision_cells = lambda w: RUN.cdd_decision_cells(w.model, w.dataset)
cdd_contexts = lambda w: method_context_files(config, "cdd", w, [w.condition])[0]
cdd_condition_contexts = lambda w: method_context_files(config, "cdd", w, RUN.conditions)

# --- rules/report.smk ------------------------------------------------------------------
LEDGER_FILES = ledger_files(RUN)
audit_ratings = lambda w: RUN.audit_ratings(w.dataset)
audit_decision_cells = lambda w: RUN.audit_decision_cells(w.dataset)
metric_decision_cells = lambda w: RUN.metric_decision_cells(w.dataset)
metric_context_cells = lambda w: RUN.metric_context_cells(w.dataset)
report_item = lambda w: table_spec(w.table) if "table" in w.keys() else figure_spec(w.figure)
report_inputs = lambda w: RUN.report_inputs(report_item(w).reads)
seed_report_inputs = lambda w: RUN.report_inputs(report_item(w).reads, seed=int(w.seed))
report_cells = lambda w: RUN.report_cells(report_item(w).reads)
report_settings = lambda w: stable(report_item(w).config_settings(config))
# The code of the module that declares a table or figure: editing it reruns the outputs
# that module declares, and no other.
report_code = lambda w: extension_code(report_item(w).code_file())


# --- code hashes -----------------------------------------------------------------------
SCRIPTS_DIR = Path(workflow.basedir) / "workflow" / "scripts"
LIBRARY_DIR = Path(workflow.basedir) / "workflow" / "grabrag"
# The papers' published numbers (rules/report.smk: reproduction), by the hash of their
# contents: editing them reruns the report; the workflow's own folder is not an input, so a
# copy of the workflow elsewhere reruns nothing.
PUBLISHED_NUMBERS = hashlib.sha256(
    b"".join(p.read_bytes() for p in sorted((LIBRARY_DIR / "report" / "published").glob("*.csv")))
).hexdigest()[:16]


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


def with_adapter_code(dataset):
    """A dataset's entry, with its adapter's code hash when a config module declared it."""
    path = adapter_code_file(dataset["adapter"])
    return dataset if path is None else {**dataset, "adapter_code": extension_code(path)}


def backend_settings(entry):
    """A model's entry as its jobs' param, with its backend's code hash when a config
    module declared that backend: editing the module reruns the model's jobs."""
    backend = module_backend(entry.settings)
    settings = stable(entry.settings)
    return (
        settings
        if backend is None
        else {**settings, "backend_code": extension_code(backend.code_file())}
    )


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


# --- captions --------------------------------------------------------------------------


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


def extra_caption(name):
    """The caption on one line of a table outside the registry (the reproduction report,
    the re-ask audit): workflow/report/tables/<name>.rst."""
    path = Path(workflow.basedir) / "workflow" / "report" / "tables" / f"{name}.rst"
    return render_caption(path.read_text(encoding="utf-8"), config)


def across_seeds_caption(table):
    """An across-seed table's caption: the seeds, what its columns are, and the table's own."""
    listed = ", ".join(map(str, RUN.seeds))
    own = render_caption(caption_template("tables", table), config)
    if table in RUN.pooled_tables:
        pooled = (
            "and beside it the same number over every seed's questions pooled, with its "
            "paired-bootstrap 95% CI where the table gives one"
        )
    else:
        pooled = "with no pooled estimate (the table's inputs exist per seed only)"
    return (
        f"Across construction seeds {listed}: each number of {table} as mean +/- sd over "
        f"the seeds (EvidentialRAG's form; our sd, with n - 1), {pooled}. Numbers as in "
        f"the table's tidy file (rates as fractions). {table}: {own}"
    )
