"""Config validation against the one JSON schema, with defaults filled in.

Run as a command, it checks config files before a run, as ``snakemake --configfile`` would
combine them, and names the file, line and column of a YAML error (Snakemake reads
``--configfile`` before the workflow starts and says only that a file is not YAML)::

    python -m grabrag.pipeline.config config/paper.yaml my_changes.yaml
"""

from __future__ import annotations

import copy
import re
import sys
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from grabrag.core import registry
from grabrag.core.builds import replicate_name, sensitivity_variant_name
from grabrag.core.conditions import NAMES as CONDITION_NAMES
from grabrag.core.conditions import TRUTHFULQA
from grabrag.core.errors import ConfigError
from grabrag.core.plugins import config_modules
from grabrag.data.datasets import ADAPTERS
from grabrag.generation.backends import backend_names

SCHEMA_FILE = "config.schema.yaml"


def load_schema() -> dict[str, Any]:
    """The schema, with the registered policies as the names ``policies.names`` accepts,
    the adapters of :data:`grabrag.data.datasets.ADAPTERS` as those ``datasets.*.adapter`` does,
    and the conditions of :mod:`grabrag.core.conditions` as ``generation.conditions``'s names
    and default."""
    text = resources.files("grabrag").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    schema = yaml.safe_load(text)
    properties = schema["properties"]
    properties["policies"]["properties"]["names"]["items"]["enum"] = registry.names()
    dataset = properties["datasets"]["additionalProperties"]["properties"]
    dataset["adapter"]["enum"] = list(ADAPTERS)
    conditions = properties["generation"]["properties"]["conditions"]
    conditions["items"]["enum"] = list(CONDITION_NAMES)
    conditions["default"] = list(CONDITION_NAMES)
    return schema


def _with_defaults(validator_class: type) -> type:
    """A validator that fills ``default`` values of object properties as it validates."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):  # type: ignore[no-untyped-def]
        if isinstance(instance, dict):
            for name, subschema in properties.items():
                if "default" in subschema and name not in instance:
                    instance[name] = copy.deepcopy(subschema["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


_Validator = _with_defaults(jsonschema.Draft7Validator)


def _key_path(error: jsonschema.ValidationError) -> str:
    parts = [str(p) for p in error.absolute_path]
    return ".".join(parts) if parts else "(top level)"


def _describe(error: jsonschema.ValidationError) -> str:
    if error.validator == "additionalProperties":
        return f"config key '{_key_path(error)}': {error.message} (unknown key: check its spelling)"
    if error.validator == "oneOf" and _key_path(error).startswith("assets."):
        return (
            f"config key '{_key_path(error)}': an asset needs exactly one source: "
            "'pypi' (with 'member' and 'container_sha256'), 'path', or 'hub'"
        )
    return f"config key '{_key_path(error)}': {error.message}"


def _check_hub_revisions(checked: Mapping[str, Any]) -> None:
    """Every hub asset names its revision; checked before defaults are filled in."""
    for name, spec in (checked.get("assets") or {}).items():
        if isinstance(spec, dict) and "hub" in spec and not spec.get("revision"):
            raise ConfigError(
                f"config key 'assets.{name}.revision': the hub asset '{spec['hub']}' needs a "
                "revision: the commit to fetch (40 hex characters, from the repository's "
                "'Files and versions' page). A branch name such as 'main' is pinned by the "
                "lock file at the first fetch"
            )


def _check_schema(checked: dict[str, Any]) -> None:
    """Validate against the schema, filling in its defaults; the config's modules are
    loaded first, so that their policies are names 'policies.names' may use."""
    registry.load_modules(config_modules(checked), checked)
    errors = sorted(_Validator(load_schema()).iter_errors(checked), key=lambda e: e.path)
    if errors:
        best = jsonschema.exceptions.best_match(errors)
        raise ConfigError(_describe(best))


def _check_asset_files(assets: Mapping[str, Any]) -> None:
    """'files' selects files of a hub model snapshot and nothing else."""
    for name, spec in assets.items():
        if "files" in spec and (
            "hub" not in spec or spec.get("filename") or spec["repo_type"] == "dataset"
        ):
            raise ConfigError(
                f"config key 'assets.{name}.files' selects files of a hub model snapshot; "
                "it does not combine with 'filename', a dataset or a non-hub source: remove it"
            )


def _need_asset(
    assets: Mapping[str, Any], key: str, name: str | None, what_to_do: str = ""
) -> None:
    """The asset that config key ``key`` names (None: none) is declared under 'assets';
    ``what_to_do`` ends the error where the key's asset needs more than a name."""
    if name is not None and name not in assets:
        raise ConfigError(
            f"config key '{key}' names asset '{name}', which is not under 'assets' "
            f"(known: {', '.join(sorted(assets))}){what_to_do}"
        )


def _check_module_backend(model: str, spec: Mapping[str, Any]) -> None:
    """A model of a module's backend names a registered backend and no endpoint."""
    if spec["backend"] not in backend_names():
        declared = ", ".join(backend_names()) or "none"
        raise ConfigError(
            f"config key 'models.{model}.backend': no module declares a model backend named "
            f"'{spec['backend']}' (declared: {declared}); list the module that declares it "
            "under 'modules'"
        )
    if "endpoint" in spec:
        raise ConfigError(
            f"models.{model}: give backend (a module's backend) or endpoint (a served "
            "model), not both"
        )


def _check_models_and_retrieval(checked: Mapping[str, Any]) -> None:
    """The models', datasets' and encoder's assets exist; the hybrid weights sum to 1."""
    assets = checked["assets"]
    for model, spec in checked["models"].items():
        if "backend" in spec:
            _check_module_backend(model, spec)
        elif "options" in spec:
            raise ConfigError(
                f"config key 'models.{model}.options' holds a module backend's settings, "
                "but the model names no backend: remove it or give backend"
            )
        elif ("asset" in spec) == ("endpoint" in spec):
            raise ConfigError(
                f"models.{model}: give either asset (a GGUF run in the job) or endpoint (a "
                f"served model), {'not both' if 'asset' in spec else 'one of them'}"
            )
        if "asset" in spec:
            _need_asset(assets, f"models.{model}.asset", spec["asset"])
        temperature = checked["generation"]["temperature"]
        if spec.get("batch", 1) > 1 and temperature != 0:
            raise ConfigError(
                f"config key 'models.{model}.batch' is {spec['batch']}, but "
                f"'generation.temperature' is {temperature:g}: batched decoding is greedy; "
                "set the model's batch to 1 to sample, or the temperature to 0"
            )
    for dataset, spec in checked["datasets"].items():
        _need_asset(assets, f"datasets.{dataset}.asset", spec["asset"])
    _need_asset(assets, "retrieval.encoder", checked["retrieval"]["encoder"])
    weights = checked["retrieval"]["bm25_weight"], checked["retrieval"]["dense_weight"]
    if abs(sum(weights) - 1.0) > 1e-9:
        raise ConfigError(
            f"config keys 'retrieval.bm25_weight' ({weights[0]:g}) and "
            f"'retrieval.dense_weight' ({weights[1]:g}) sum to {sum(weights):g}; they must sum "
            "to 1: the hybrid score is alpha x BM25 + (1 - alpha) x dense, both min-max "
            "normalised (the paper: alpha = 0.5)"
        )


def _check_ner_and_nli(checked: Mapping[str, Any]) -> None:
    """The context tokenizer's, the recogniser's and the verifier's assets exist and suit
    their backends."""
    assets = checked["assets"]
    _need_asset(assets, "contexts.tokenizer", checked["contexts"]["tokenizer"])
    _need_asset(assets, "ner.asset", checked["ner"]["asset"])
    _need_asset(assets, "ner.tokenizer", checked["ner"].get("tokenizer"))
    if checked["ner"].get("tokenizer") and checked["ner"]["backend"] != "gliner":
        raise ConfigError(
            "config key 'ner.tokenizer' applies to the gliner backend only "
            f"(ner.backend is {checked['ner']['backend']}); remove it"
        )
    _need_asset(assets, "nli.asset", checked["nli"]["asset"])
    if checked["nli"]["backend"] == "transformers" and checked["nli"]["asset"] is None:
        raise ConfigError(
            "config key 'nli.asset': the transformers NLI backend needs a model asset"
        )


def _check_dataset_references(checked: Mapping[str, Any]) -> None:
    """The datasets the methods and the QC audit name exist; a filled audit needs QC."""
    for section in ("evidential", "cdd"):
        for name in checked[section]["datasets"] or []:
            if name not in checked["datasets"]:
                raise ConfigError(
                    f"config key '{section}.datasets' names dataset '{name}', which is not "
                    f"under 'datasets' (known: {', '.join(sorted(checked['datasets']))})"
                )
    for name in checked["qc"]["audit_filled"]:
        if name not in checked["datasets"]:
            raise ConfigError(
                f"config key 'qc.audit_filled' names dataset '{name}', which is not under "
                f"'datasets' (known: {', '.join(sorted(checked['datasets']))})"
            )
    if checked["qc"]["audit_filled"] and "QC" not in checked["generation"]["conditions"]:
        raise ConfigError(
            "config key 'qc.audit_filled' is set but 'generation.conditions' has no QC: "
            "Table 6 recomputes HwSA@QC, so add QC or empty qc.audit_filled"
        )
    for name, path in checked["qc"]["audit_filled"].items():
        if not Path(path).is_file():
            raise ConfigError(
                f"config key 'qc.audit_filled.{name}': no file at {path} (a relative path is "
                "read from the directory snakemake runs in); fill in the quality column of "
                f"results/qc/{name}/audit_sample.csv, save it, and name that file here"
            )


def _check_seed_sensitivity(checked: Mapping[str, Any]) -> None:
    """A seed-sensitivity run names a configured model and dataset and another seed."""
    sensitivity = checked.get("seed_sensitivity")
    if sensitivity:
        for key, known in (("model", checked["models"]), ("dataset", checked["datasets"])):
            if sensitivity[key] not in known:
                raise ConfigError(
                    f"config key 'seed_sensitivity.{key}' names {key} '{sensitivity[key]}', "
                    f"which is not under '{key}s' (known: {', '.join(sorted(known))})"
                )
        if sensitivity["seed"] == checked["seed"]:
            raise ConfigError(
                f"config key 'seed_sensitivity.seed' is {sensitivity['seed']}, the same as "
                "'seed': a seed-sensitivity run needs a different seed (the paper uses 43)"
            )


def _typed(text: str, types: list[str]) -> Any:
    """A command-line string as the first of the schema's ``types`` it reads as, else
    itself: Snakemake types a ``--config`` value's top level but leaves every item of a
    list or mapping a string ('models={m: {batch: 2}}' gives batch '2')."""
    word = text.strip()
    for kind in types:
        if kind == "integer" and re.fullmatch(r"[-+]?\d+", word):
            return int(word)
        if kind == "number" and re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", word):
            return int(word) if re.fullmatch(r"[-+]?\d+", word) else float(word)
        if kind == "boolean" and word.lower() in ("true", "false"):
            return word.lower() == "true"
        if kind == "null" and word.lower() in ("null", "none", "~"):
            return None
    return text


def _type_command_line_strings(checked: dict[str, Any]) -> None:
    """Each string the schema wants as a number, boolean or null, and that reads as one,
    becomes one (the nested values of ``--config``); anything else is left for the schema
    to name."""
    validator = _Validator(load_schema())
    while True:  # each pass types at least one value, or stops
        typed = False
        for error in validator.iter_errors(copy.deepcopy(checked)):
            if error.validator != "type" or not isinstance(error.instance, str):
                continue
            kinds = error.validator_value
            value = _typed(error.instance, [kinds] if isinstance(kinds, str) else list(kinds))
            if value is error.instance or not error.absolute_path:
                continue
            *parents, last = error.absolute_path
            target: Any = checked
            for part in parents:
                target = target[part]
            target[last] = value
            typed = True
        if not typed:
            return


def _check_seeds(checked: dict[str, Any]) -> None:
    """``seeds``: distinct non-negative seeds, 'seed' among them (null: 'seed' alone)."""
    seeds = checked["seeds"]
    base = checked["seed"]
    if seeds is None:
        checked["seeds"] = [base]
        return
    if not seeds:
        raise ConfigError(
            "config key 'seeds' is an empty list: name the construction seeds to run "
            f"(e.g. [{base}, 123, 999]), or drop the key to run 'seed' ({base}) alone"
        )
    for seed in seeds:
        if seed < 0:
            raise ConfigError(
                f"config key 'seeds' has {seed}: a construction seed is a non-negative "
                "integer (question i is shuffled with Random(seed + i))"
            )
        if seeds.count(seed) > 1:
            raise ConfigError(
                f"config key 'seeds' lists {seed} {seeds.count(seed)} times: each seed is a "
                "rebuild of every dataset, so list it once"
            )
    if base not in seeds:
        raise ConfigError(
            f"config key 'seeds' ({', '.join(map(str, seeds))}) does not list 'seed' ({base}): "
            "the outputs of 'seed' keep the paths of a single-seed run; add it to 'seeds', "
            "or set 'seed' to one of them"
        )


def _check_built_names(checked: Mapping[str, Any]) -> None:
    """No configured dataset is named as a seed replicate or Table 13's variant of another
    one is: the two would write the same results folders."""
    base = checked["seed"]
    derived = {
        replicate_name(dataset, seed, base): f"seed {seed}'s replicate of '{dataset}'"
        for dataset in checked["datasets"]
        for seed in checked["seeds"]
        if seed != base
    }
    sensitivity = checked.get("seed_sensitivity")
    if sensitivity:
        derived[sensitivity_variant_name(sensitivity)] = (
            f"Table 13's seed-{sensitivity['seed']} variant of '{sensitivity['dataset']}'"
        )
    for name in checked["datasets"]:
        if name in derived:
            raise ConfigError(
                f"config key 'datasets.{name}': {derived[name]} is built under the same "
                f"name, and both would write results/*/{name}; rename the dataset"
            )


def _expand_truthfulqa_probe(checked: dict[str, Any]) -> None:
    """``truthfulqa_probe: N`` is short for N questions from the schema's default asset, so
    that one ``--config truthfulqa_probe=N`` turns the probe on (a ``--config`` value that
    is a mapping arrives with every number as text)."""
    value = checked.get("truthfulqa_probe")
    if isinstance(value, int) and not isinstance(value, bool):
        checked["truthfulqa_probe"] = {"n_questions": value}


def _check_truthfulqa_probe(checked: Mapping[str, Any]) -> None:
    """The probe's asset exists, and its dataset's name is free."""
    probe = checked.get("truthfulqa_probe")
    if not probe:
        return
    _need_asset(
        checked["assets"],
        "truthfulqa_probe.asset",
        probe["asset"],
        ": declare the questions there: the hub's truthfulqa/truthful_qa generation split "
        "(format hub_generation, as config/extended.yaml does), or BIG-bench's "
        "truthful_qa/questions.json, whose container, the bigbench 1.0.0 sdist, is no "
        "longer on PyPI: give a copy you have with 'path' and 'sha256' (docs/cdd.md)",
    )
    if TRUTHFULQA in checked["datasets"]:
        raise ConfigError(
            f"config key 'datasets' has a dataset named '{TRUTHFULQA}', the name of the "
            "TruthfulQA probe's own dataset (truthfulqa_probe): rename that dataset"
        )
    if probe["scorer"] == "nli" and checked["nli"]["backend"] != "transformers":
        raise ConfigError(
            "config key 'truthfulqa_probe.scorer' is nli, which needs an entailment model "
            f"(nli.backend: transformers with its nli.asset), but nli.backend is "
            f"{checked['nli']['backend']!r}: declare one, or set the scorer to token_f1 "
            "(or auto)"
        )


def _check_evidential(checked: Mapping[str, Any]) -> None:
    """EvidentialRAG's evaluator is a configured model and its thresholds are ordered."""
    evidential = checked["evidential"]
    if evidential["evaluator"] is not None and evidential["evaluator"] not in checked["models"]:
        raise ConfigError(
            f"config key 'evidential.evaluator' names model '{evidential['evaluator']}', which "
            f"is not under 'models' (known: {', '.join(sorted(checked['models']))}); use null "
            "for each generator model itself"
        )
    if not evidential["tau1"] < evidential["tau2"]:
        raise ConfigError(
            "config key 'evidential.tau1' must be below 'evidential.tau2' "
            f"({evidential['tau1']} >= {evidential['tau2']})"
        )
    for tau1, tau2 in evidential["tau_grid"]:
        if not tau1 < tau2:
            raise ConfigError(
                f"config key 'evidential.tau_grid' has the pair [{tau1}, {tau2}]: tau1 must be "
                "below tau2"
            )


def _check_contexts(checked: Mapping[str, Any]) -> None:
    """QX has room for its two passages; Q50's gold passages fit in the context."""
    contexts = checked["contexts"]
    if "QX" in checked["generation"]["conditions"] and contexts["n_passages"] < 2:
        raise ConfigError(
            "config key 'generation.conditions' lists QX, which needs 'contexts.n_passages' "
            f">= 2 (the gold passage and its swapped twin), got {contexts['n_passages']}"
        )
    if contexts["n_gold_q50"] > contexts["n_passages"]:
        raise ConfigError(
            "config key 'contexts.n_gold_q50' must not exceed 'contexts.n_passages' "
            f"({contexts['n_gold_q50']} > {contexts['n_passages']})"
        )


def validate_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Return a validated copy of ``config`` with defaults filled in.

    Raises ConfigError naming the offending key; cross-references (an asset named by a
    model, dataset or encoder) are checked too. The checks run in a fixed order, so a
    config with several faults names the same one each time.
    """
    checked = copy.deepcopy(dict(config))
    _check_hub_revisions(checked)
    _expand_truthfulqa_probe(checked)
    _type_command_line_strings(checked)
    _check_schema(checked)
    _check_asset_files(checked["assets"])
    _check_models_and_retrieval(checked)
    _check_ner_and_nli(checked)
    _check_dataset_references(checked)
    _check_seed_sensitivity(checked)
    _check_seeds(checked)
    _check_built_names(checked)
    _check_truthfulqa_probe(checked)
    _check_evidential(checked)
    _check_contexts(checked)
    return checked


def merge_config(base: dict[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """``overlay`` merged into ``base`` as Snakemake merges config files: a mapping key by
    key at every depth, any other value (a list included) replacing the earlier one."""
    for key, value in overlay.items():
        if isinstance(value, Mapping):
            earlier = base.get(key)
            base[key] = merge_config(earlier if isinstance(earlier, dict) else {}, value)
        else:
            base[key] = value
    return base


def read_config_files(paths: Sequence[str | Path]) -> dict[str, Any]:
    """The config that ``snakemake --configfile A B ...`` makes of these files, in order.

    A file that is missing, is not YAML (JSON is YAML here), or does not hold keys at the
    top level is a ConfigError naming the file, and for a YAML error its line and column.
    """
    merged: dict[str, Any] = {}
    for path in map(Path, paths):
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise ConfigError(f"config file {path}: cannot be read ({error.strerror})") from None
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(error, "problem", None) or str(error)
            context = getattr(error, "context", None)
            detail = f"{problem} ({context})" if context else problem
            raise ConfigError(
                f"config file {path}{where}: not valid YAML: {detail}; fix the file there "
                "(indent with spaces, not tabs; close every bracket and quote)"
            ) from None
        if loaded is None:
            continue
        if not isinstance(loaded, Mapping):
            raise ConfigError(
                f"config file {path}: holds a {type(loaded).__name__}, not keys at the top "
                "level (write it as `key: value` lines)"
            )
        merge_config(merged, loaded)
    return merged


def main(argv: Sequence[str] | None = None) -> int:
    """Check the config that ``snakemake --configfile FILE ...`` would run: each file's
    YAML, then the merged config's keys and references. Prints one line; 0 if it is valid."""
    paths = list(sys.argv[1:] if argv is None else argv)
    if not paths or paths[0] in ("-h", "--help"):
        print("usage: python -m grabrag.pipeline.config CONFIG_FILE [CONFIG_FILE ...]")
        return 0 if paths else 2
    try:
        checked = validate_config(read_config_files(paths))
    except ConfigError as error:
        print(f"Invalid config: {error}", file=sys.stderr)
        return 1
    print(
        f"valid: {', '.join(paths)}: {len(checked['models'])} model(s), "
        f"{len(checked['datasets'])} dataset(s), policies {', '.join(checked['policies']['names'])}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
