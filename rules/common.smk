# Config validation, wildcard constraints and input functions shared by every stage.

import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "workflow"))

from grabrag.assets import manifest_path
from grabrag.config import validate_config
from grabrag.contexts import CONDITIONS
from grabrag.errors import ConfigError
from grabrag.prompts import CLOSED_BOOK_PROMPT, CONTEXT_PROMPTS

try:
    config.update(validate_config(config))
except ConfigError as _error:
    raise WorkflowError(f"Invalid config: {_error}") from None

# One conda environment for every rule (paths in rule files are relative to rules/).
GRABRAG_ENV = "../envs/grabrag.yaml"
RESULTS = config["results_dir"]
RESOURCES = config["resources_dir"]
DATASETS = sorted(config["datasets"])
MODELS = sorted(config["models"])
GENERATION_CONDITIONS = config["generation"]["conditions"]


def _alternatives(names):
    return "|".join(re.escape(n) for n in sorted(names))


wildcard_constraints:
    asset=_alternatives(config["assets"]),
    dataset=_alternatives(config["datasets"]),
    model=_alternatives(config["models"]),
    condition=_alternatives(GENERATION_CONDITIONS),


def stable(mapping):
    """A key-sorted copy: params compare by value, so reordering the YAML reruns nothing."""
    return json.loads(json.dumps(mapping, sort_keys=True))


def asset_manifest(name):
    """The file target that stands for one materialised asset."""
    return manifest_path(RESOURCES, name)


def dataset_asset(wildcards):
    return asset_manifest(config["datasets"][wildcards.dataset]["asset"])


def model_asset(wildcards):
    return asset_manifest(config["models"][wildcards.model]["asset"])


def generation_settings():
    """The decoding settings only: changing `conditions` must not rerun finished cells."""
    return stable({k: v for k, v in config["generation"].items() if k != "conditions"})


def generation_cells(model, dataset):
    cells = [
        f"{RESULTS}/generation/{model}/{dataset}/{condition}/{prompt}.jsonl"
        for condition in GENERATION_CONDITIONS
        for prompt in CONTEXT_PROMPTS
    ]
    cells.append(f"{RESULTS}/generation/{model}/{dataset}/Qclosed/{CLOSED_BOOK_PROMPT}.jsonl")
    return cells


def tokenizer_asset():
    return config["contexts"]["tokenizer"] or config["retrieval"]["encoder"]


def context_files(dataset):
    return [f"{RESULTS}/contexts/{dataset}/{condition}.jsonl" for condition in CONDITIONS]


def all_targets():
    targets = []
    for dataset in DATASETS:
        targets += context_files(dataset)
        targets.append(f"{RESULTS}/contexts/{dataset}/report.json")
        targets += [
            f"{RESULTS}/qc/{dataset}/summary.json",
            f"{RESULTS}/contexts/{dataset}/QC.jsonl",
        ]
        if dataset in config["qc"]["audit_filled"]:
            targets.append(f"{RESULTS}/qc/{dataset}/audit_hwsa.csv")
        for model in MODELS:
            targets.append(f"{RESULTS}/generation/{model}/{dataset}/report.json")
    return targets
