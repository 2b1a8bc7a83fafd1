"""Config validation: defaults, unknown keys, wrong types, cross-references."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from grabrag.core.errors import ConfigError
from grabrag.pipeline.config import main as check_config_main
from grabrag.pipeline.config import read_config_files, validate_config

from .conftest import REPO


@pytest.fixture()
def embedded() -> dict:
    return yaml.safe_load((REPO / "config.yaml").read_text())


def _load(path: Path) -> dict:
    """A config file as the workflow gets it: Snakemake's YAML, then the schema check."""
    return validate_config(yaml.safe_load(path.read_text()))


def test_both_shipped_configs_validate() -> None:
    for name in (
        "config.yaml",
        "config/paper.yaml",
        "config/extended.yaml",
        "tests/config/tiny.yaml",
    ):
        config = _load(REPO / name)
        if name.startswith("config/"):
            assert config["contexts"]["max_context_tokens"] == 1500
        if name == "config/extended.yaml":
            # CDD as in its paper: in-context step 2, the model's contradiction gate
            assert (config["cdd"]["parametric"], config["cdd"]["gate"]) == ("in_context", "model")
        assert config["retrieval"]["bm25_weight"] == config["retrieval"]["dense_weight"] == 0.5


def test_defaults_are_filled(embedded: dict) -> None:
    del embedded["contexts"]
    del embedded["seed"]
    del embedded["seed_sensitivity"]["seed"]
    del embedded["evidential"]
    del embedded["cdd"]
    config = validate_config(embedded)
    assert config["seed"] == 42
    assert config["contexts"] == {
        "n_passages": 5,
        "n_gold_q50": 3,
        "max_context_tokens": 1500,
        "tokenizer": None,
    }
    assert config["datasets"]["squad"]["max_answer_tokens"] == 5
    assert config["models"]["smollm2-135m"]["n_gpu_layers"] == 0
    assert config["seed_sensitivity"]["seed"] == 43
    del embedded["seed_sensitivity"]
    assert validate_config(embedded)["seed_sensitivity"] is None
    assert config["generation"]["conditions"] == ["Q100", "Q50", "Q0", "QC", "QX"]
    assert config["policies"]["names"] == [
        *("P0", "P1", "P2", "P3", "P4", "EVID", "EVID_CB"),
        *("CDD", "CDD_ALPHA", "CAI", "SHAM", "REFLECT", "FILTER"),
    ]
    assert config["cdd"] == {
        "parametric": "closed_book",
        "step_max_tokens": 128,
        "gate": "lexical",
        "gate_threshold": 0.5,
        "diagnostics": True,
        "datasets": None,
        "n_questions": None,
    }
    assert config["evidential"] == {
        "evaluator": None,
        "lam": 0.6,
        "tau1": 0.35,
        "tau2": 0.65,
        "merge_f1": 0.8,
        "evaluator_max_tokens": 160,
        "datasets": None,
        "n_questions": None,
        "lambda_grid": ["dempster", 0.0, 0.3, 0.6, 1.0],
        "tau_grid": [[0.2, 0.5], [0.35, 0.65], [0.5, 0.8]],
    }


def test_tau_grid_pairs_must_be_ordered(embedded: dict) -> None:
    embedded["evidential"] = {"tau_grid": [[0.5, 0.5]]}
    with pytest.raises(ConfigError, match="tau_grid"):
        validate_config(embedded)


def test_evidential_evaluator_may_name_a_configured_model(embedded: dict) -> None:
    embedded["evidential"] = {"evaluator": "smollm2-135m"}
    assert validate_config(embedded)["evidential"]["evaluator"] == "smollm2-135m"


def test_validation_does_not_modify_its_input(embedded: dict) -> None:
    before = copy.deepcopy(embedded)
    validate_config(embedded)
    assert embedded == before


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda c: c["retrieval"].update(bm25_wieght=0.5), "retrieval"),
        (lambda c: c.update(sed=1), "sed"),
        (lambda c: c["datasets"]["squad"].update(n_questions="ten"), "datasets.squad.n_questions"),
        (lambda c: c["datasets"]["squad"].update(adapter="csv"), "datasets.squad.adapter"),
        (lambda c: c["contexts"].update(max_context_tokens=0), "contexts.max_context_tokens"),
        (lambda c: c["datasets"]["squad"].pop("asset"), "datasets.squad"),
        (lambda c: c["assets"]["squad-v1.1-dev"].pop("container_sha256"), "assets.squad-v1.1-dev"),
        (lambda c: c["assets"]["squad-v1.1-dev"].update(sha256="abc"), "sha256"),
        (lambda c: c["datasets"]["squad"].update(asset="nope"), "datasets.squad.asset"),
        (lambda c: c["retrieval"].update(encoder="nope"), "retrieval.encoder"),
        (lambda c: c["contexts"].update(n_gold_q50=6), "contexts.n_gold_q50"),
        (lambda c: c["seed_sensitivity"].update(model="nope"), "seed_sensitivity.model"),
        (lambda c: c["seed_sensitivity"].update(dataset="nope"), "seed_sensitivity.dataset"),
        (lambda c: c["seed_sensitivity"].update(seed=c["seed"]), "seed_sensitivity.seed"),
        (lambda c: c["seed_sensitivity"].update(sead=43), "seed_sensitivity"),
        (lambda c: c.update(seeds=[]), "config key 'seeds' is an empty list"),
        (lambda c: c.update(seeds=[42, 123, 42]), "config key 'seeds' lists 42 2 times"),
        (lambda c: c.update(seeds=[42, -1]), "config key 'seeds' has -1"),
        (lambda c: c.update(seeds=[123, 999]), "does not list 'seed' (2)"),
        (lambda c: c.update(seeds=[42, "x"]), "config key 'seeds.1'"),
        (
            lambda c: (
                c.update(seeds=[2, 7]),
                c["datasets"].update(squad_seed7=c["datasets"]["squad"]),
            ),
            "config key 'datasets.squad_seed7': seed 7's replicate of 'squad' is built under",
        ),
        (
            lambda c: c["datasets"].update(squad_sensitivity3=c["datasets"]["squad"]),
            "config key 'datasets.squad_sensitivity3': Table 13's seed-3 variant of 'squad'",
        ),
        (
            lambda c: (
                c["models"]["smollm2-135m"].update(batch=4),
                c.update(generation={"temperature": 0.7}),
            ),
            "config key 'models.smollm2-135m.batch' is 4, but 'generation.temperature' is 0.7",
        ),
        (lambda c: c["models"]["smollm2-135m"].update(batch="two"), "models.smollm2-135m.batch"),
        (lambda c: c.update(evidential={"evaluator": "nope"}), "evidential.evaluator"),
        (lambda c: c.update(evidential={"tau1": 0.7, "tau2": 0.5}), "evidential.tau1"),
        (lambda c: c.update(evidential={"lam": 1.5}), "evidential.lam"),
        (lambda c: c.update(evidential={"evaluator_max_tokens": 0}), "evidential"),
        (lambda c: c.update(policies={"names": ["P1", "EVID+CB"]}), "policies.names"),
        (lambda c: c.update(policies={"names": ["P1", "P1"]}), "policies.names"),
        (lambda c: c.update(cdd={"parametric": "prompted"}), "cdd.parametric"),
        (lambda c: c.update(cdd={"gate_threshold": 1.5}), "cdd.gate_threshold"),
        (lambda c: c.update(cdd={"step_max_tokens": 4}), "cdd.step_max_tokens"),
        (lambda c: c.update(cdd={"diagnostic": True}), "cdd"),
        (lambda c: c.update(policies={"names": ["P1", "CDD-alpha"]}), "policies.names"),
        (
            lambda c: c.update(contexts={"n_passages": 1, "n_gold_q50": 1}),
            "generation.conditions",
        ),
        (lambda c: c["qc"].update(audit_filled={"nope": "a.csv"}), "qc.audit_filled"),
        (
            lambda c: c["qc"].update(audit_filled={"squad": "/no/such/audit.csv"}),
            "config key 'qc.audit_filled.squad': no file at /no/such/audit.csv",
        ),
        (lambda c: c["models"]["smollm2-135m"].pop("asset"), "models.smollm2-135m: give either"),
        (
            lambda c: c["models"]["smollm2-135m"].update(backend="vllm_offline"),
            "config key 'models.smollm2-135m.backend': no module declares a model backend "
            "named 'vllm_offline' (declared: none); list the module that declares it under "
            "'modules'",
        ),
        (
            lambda c: c["models"]["smollm2-135m"].update(options={"separator": " "}),
            "config key 'models.smollm2-135m.options' holds a module backend's settings",
        ),
        (
            lambda c: c["models"]["smollm2-135m"].update(
                endpoint={"base_url": "http://h:8000/v1", "model": "m"}
            ),
            "models.smollm2-135m: give either asset",
        ),
        (
            lambda c: c["models"].update(served={"endpoint": {"base_url": "h:8000", "model": "m"}}),
            "models.served.endpoint.base_url",
        ),
        (
            lambda c: c["models"].update(served={"endpoint": {"base_url": "http://h/v1"}}),
            "models.served.endpoint",
        ),
        (
            lambda c: c["models"].update(
                served={"endpoint": {"base_url": "http://h/v1", "model": "m", "api_key": "sk-1"}}
            ),
            "api_key",
        ),
        (
            lambda c: c["models"].update(
                served={"endpoint": {"base_url": "http://h/v1", "model": "m", "constraint": "json"}}
            ),
            "models.served.endpoint.constraint",
        ),
        (
            lambda c: c["models"].update(
                served={"endpoint": {"base_url": "http://h/v1", "model": "m", "concurrency": 0}}
            ),
            "models.served.endpoint.concurrency",
        ),
        (
            lambda c: (
                c["qc"].update(audit_filled={"squad": "a.csv"}),
                c.update(generation={"conditions": ["Q100", "Q0"]}),
            ),
            "qc.audit_filled",
        ),
    ],
)
def test_bad_config_names_the_key(embedded: dict, edit, expected: str) -> None:
    edit(embedded)
    with pytest.raises(ConfigError) as error:
        validate_config(embedded)
    assert expected in str(error.value)


def test_unknown_key_message_names_the_key(embedded: dict) -> None:
    embedded["retrieval"]["bm25_wieght"] = 0.5
    with pytest.raises(ConfigError, match="bm25_wieght"):
        validate_config(embedded)


@pytest.mark.parametrize(
    ("bm25", "dense", "expected"),
    [
        (1.5, 0.5, "retrieval.bm25_weight"),  # outside [0, 1]
        (0.5, 1.2, "retrieval.dense_weight"),
        (0.7, 0.5, "sum to 1.2; they must sum to 1"),  # each in range, not alpha / 1 - alpha
    ],
)
def test_retrieval_weights_are_alpha_and_one_minus_alpha(
    embedded: dict, bm25: float, dense: float, expected: str
) -> None:
    embedded["retrieval"].update(bm25_weight=bm25, dense_weight=dense)
    with pytest.raises(ConfigError, match=re.escape(expected)):
        validate_config(embedded)
    embedded["retrieval"].update(bm25_weight=0.3, dense_weight=0.7)
    assert validate_config(embedded)["retrieval"]["dense_weight"] == 0.7


def test_asset_with_two_sources_is_rejected(embedded: dict) -> None:
    embedded["assets"]["squad-v1.1-dev"]["path"] = "/tmp/x.json"
    with pytest.raises(ConfigError, match="exactly one source"):
        validate_config(embedded)


def test_embedded_config_is_used_from_another_working_directory(tmp_path) -> None:
    """`snakemake --directory elsewhere` plans the embedded config.yaml, not the schema's
    defaults (a relative configfile would be looked up in the working directory)."""
    import subprocess
    import sys

    embedded = yaml.safe_load((REPO / "config.yaml").read_text())
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--directory", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr
    assert "not present or accessible" not in out
    # one generate_closed_book job per embedded model x dataset
    n_cells = len(embedded["models"]) * len(embedded["datasets"])
    assert re.search(rf"generate_closed_book\s+{n_cells}\b", out), out[-3000:]


def test_paper_config_is_the_paper_and_extended_adds_every_extension() -> None:
    paper = _load(REPO / "config/paper.yaml")
    extended = _load(REPO / "config/extended.yaml")
    assert paper["policies"]["names"] == ["P0", "P1", "P2", "P3", "P4"]
    assert paper["generation"]["conditions"] == ["Q100", "Q50", "Q0", "QC"]
    assert sorted(paper["models"]) == ["llama-3.1-8b", "phi-4-mini", "qwen2.5-7b"]
    assert sorted(paper["datasets"]) == ["hotpotqa", "nq"]
    assert {d["n_questions"] for d in paper["datasets"].values()} == {500}
    assert paper["qc"]["pool"] == "dataset_gold"  # all gold passages of the dataset
    assert paper["assets"]["nq-open-gold"]["split"] == "test"  # NQ's official dev questions
    assert extended["generation"]["conditions"] == [*paper["generation"]["conditions"], "QX"]
    assert extended["policies"]["names"] == [
        *paper["policies"]["names"],
        *("EVID", "EVID_CB", "CDD", "CDD_ALPHA", "CAI", "SHAM", "REFLECT", "FILTER"),
    ]
    assert extended["evidential"]["datasets"] is None and extended["cdd"]["datasets"] is None
    # and CDD's TruthfulQA probe on all its questions, from its own asset
    assert paper["truthfulqa_probe"] is None
    assert extended["truthfulqa_probe"] == {
        "asset": "truthfulqa-generation",
        "format": "hub_generation",
        "n_questions": None,
        "scorer": "nli",  # by entailment with P4's DeBERTa
    }
    assert "truthfulqa-generation" not in paper["assets"]
    assert extended["assets"].pop("truthfulqa-generation")["hub"] == "truthfulqa/truthful_qa"
    # the paper decodes one call at a time, as the paper did; the extended config batches
    assert {m.pop("batch") for m in paper["models"].values()} == {1}
    assert {m.pop("batch") for m in extended["models"].values()} == {8}
    # and EvidentialRAG's three construction seeds
    assert (paper["seeds"], extended["seeds"]) == ([42], [42, 123, 999])
    assert extended["seeds_redraw"] == "construction"  # EvidentialRAG's fixed instances
    # everything else is the paper's setting (the cdd section only matters where CDD runs)
    for key in ("generation", "policies", "cdd", "truthfulqa_probe", "seeds", "seeds_redraw"):
        for config in (paper, extended):
            config.pop(key)
    assert extended == paper


def test_a_served_model_validates_with_defaults(embedded: dict) -> None:
    embedded["models"]["served"] = {
        "endpoint": {"base_url": "http://gpu-node:8000/v1", "model": "llama-3.1-8b"}
    }
    checked = validate_config(embedded)
    assert checked["models"]["served"]["endpoint"] == {
        "base_url": "http://gpu-node:8000/v1",
        "model": "llama-3.1-8b",
        "api_key_env": None,
        "constraint": "gbnf",
        "concurrency": 8,
        "timeout_s": 600,
        "max_retries": 5,
        "backoff_s": 1.0,
    }


def test_seeds_default_to_the_seed_alone_and_take_command_line_strings(embedded: dict) -> None:
    assert validate_config(embedded)["seeds"] == [2]
    embedded["seed"] = 7
    assert validate_config(embedded)["seeds"] == [7]
    # --config 'seeds=[7,123]' reaches the config as strings
    embedded["seeds"] = ["7", "123"]
    assert validate_config(embedded)["seeds"] == [7, 123]


def test_nested_command_line_values_are_typed_as_the_schema_wants(embedded: dict) -> None:
    """Snakemake leaves every nested value of --config a string:
    --config 'models={smollm2-135m: {batch: 2, allow_cpu: true}}' gives '2' and 'true'."""
    embedded["models"]["smollm2-135m"].update(batch="2", allow_cpu="true")
    embedded["generation"] = {"max_tokens": "64", "temperature": "0.0"}
    checked = validate_config(embedded)
    assert checked["models"]["smollm2-135m"]["batch"] == 2
    assert checked["models"]["smollm2-135m"]["allow_cpu"] is True
    assert checked["generation"]["max_tokens"] == 64
    assert checked["generation"]["temperature"] == 0.0


# --- checking config files before a run: python -m grabrag.pipeline.config ------------


def test_config_files_merge_as_snakemake_merges_them(tmp_path: Path) -> None:
    from snakemake.utils import update_config

    overlay = tmp_path / "mine.yaml"
    overlay.write_text(
        "retrieval: {bm25_weight: 0.3}\nmodels: {qwen2.5-7b: {batch: 2}}\nseeds: [42, 7]\n"
    )
    files = [REPO / "config" / "paper.yaml", overlay]
    expected: dict = {}
    for path in files:
        update_config(expected, yaml.safe_load(path.read_text()))
    merged = read_config_files(files)
    assert merged == expected
    # a mapping merges at every depth, a list replaces the earlier one whole
    assert merged["retrieval"]["bm25_weight"] == 0.3 and "encoder" in merged["retrieval"]
    assert merged["seeds"] == [42, 7]
    assert (
        merged["models"]["qwen2.5-7b"]["batch"] == 2 and "asset" in merged["models"]["qwen2.5-7b"]
    )


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("models:\n  m: {batch: 2\nseed: 1\n", "line 3, column 5"),
        ("seed: 1\nmodels:\n\tm: 1\n", "line 3, column 1"),
        ("names: [P0, P1\n", "line 2, column 1"),
    ],
)
def test_a_yaml_error_in_a_config_file_names_the_file_line_and_column(
    tmp_path: Path, text: str, where: str
) -> None:
    overlay = tmp_path / "mine.yaml"
    overlay.write_text(text)
    with pytest.raises(ConfigError, match="not valid YAML") as info:
        read_config_files([REPO / "config" / "paper.yaml", overlay])
    assert f"config file {overlay}, {where}: " in str(info.value)


def test_a_config_file_without_top_level_keys_or_missing_is_named(tmp_path: Path) -> None:
    listed = tmp_path / "list.yaml"
    listed.write_text("- seed\n- 7\n")
    with pytest.raises(ConfigError, match=f"config file {listed}: holds a list, not keys"):
        read_config_files([listed])
    with pytest.raises(ConfigError, match=f"config file {tmp_path / 'none.yaml'}: cannot be read"):
        read_config_files([tmp_path / "none.yaml"])


def test_the_check_command_prints_one_line_and_its_verdict(tmp_path: Path, capsys) -> None:
    assert check_config_main([str(REPO / "config" / "paper.yaml")]) == 0
    assert capsys.readouterr().out.startswith("valid: ")
    overlay = tmp_path / "mine.yaml"
    overlay.write_text("seeds: [42, 42]\n")
    assert check_config_main([str(REPO / "config" / "paper.yaml"), str(overlay)]) == 1
    assert "Invalid config: config key 'seeds' lists 42 2 times" in capsys.readouterr().err
    overlay.write_text("seeds: [42,\n")
    assert check_config_main([str(overlay)]) == 1
    assert f"config file {overlay}, line 2, column 1: not valid YAML" in capsys.readouterr().err
