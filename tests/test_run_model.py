"""The run model (grabrag.pipeline.run) and the model entries (grabrag.generation.backends):
what a config runs, the files each job reads and where each model runs, from the config
alone, with no Snakemake. The dry runs of tests/test_config_matrix.py check the same
variants through the real workflow."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from grabrag.core import registry
from grabrag.core.errors import ConfigError
from grabrag.generation import backends
from grabrag.generation.backends import (
    Backend,
    model_entry,
    open_generator,
    register_backend,
    verifier_backend,
    verifier_endpoint,
    verifier_entry,
)
from grabrag.pipeline.config import validate_config
from grabrag.pipeline.run import Run
from grabrag.pipeline.scope import method_context_files

from .conftest import TINY

PAPER = ["P0", "P1", "P2", "P3", "P4"]
CDD = ["CDD", "CDD_ALPHA", "CAI", "SHAM", "REFLECT", "FILTER"]


def tiny(**edits) -> dict:
    config = yaml.safe_load(TINY.read_text())
    for key, value in edits.items():
        section, _, name = key.partition("__")
        if name:
            config.setdefault(section, {})[name] = copy.deepcopy(value)
        else:
            config[section] = copy.deepcopy(value)
    return validate_config(config)


def test_the_tiny_config_runs_every_method_on_its_scoped_datasets() -> None:
    run = Run(tiny(), local_threads=2)
    assert run.datasets == ["nq_bigbench", "squad"]
    assert run.evid_policies == ["EVID", "EVID_CB"]
    assert run.evid_datasets == run.cdd_datasets == ["nq_bigbench"]
    assert run.dataset_policies("squad") == PAPER
    assert run.dataset_policies("nq_bigbench") == run.policies
    assert run.cdd_traces and run.runs_nli and run.cdd_baselines == CDD[2:]
    assert run.features.evidential and run.features.cdd_diagnostics
    assert run.truthfulqa_datasets == ["truthfulqa"]
    assert "truthfulqa_probe" in run.table_names


def test_no_qc_drops_its_conditions_and_the_cells_that_read_them() -> None:
    run = Run(tiny(generation__conditions=["Q100", "Q50", "Q0"]))
    assert run.conditions == ["Q100", "Q50", "Q0"]
    assert run.variant_conditions == ["Q0"]
    assert run.p3_sweep_qc_input({"model": "micro", "dataset": "squad"}) == {}
    # the QC contexts are still built (their swaps are a result of their own), never run
    assert not any("/QC/" in path for path in run.targets())
    assert "results/contexts/squad/QC.jsonl" in run.targets()


def test_paper_policies_turn_the_methods_off() -> None:
    run = Run(tiny(policies__names=PAPER))
    assert run.evid_policies == run.cdd_family == run.evid_datasets == run.cdd_datasets == []
    assert not run.features.evidential and not run.features.cdd_family
    assert run.runs_nli
    assert not any(t.startswith(("results/evidential", "results/cdd")) for t in run.targets())


def test_without_evidential_or_cdd_only_the_other_method_runs() -> None:
    no_evid = Run(tiny(policies__names=[*PAPER, *CDD]))
    assert no_evid.evid_datasets == [] and no_evid.cdd_datasets == ["nq_bigbench"]
    no_cdd = Run(tiny(policies__names=[*PAPER, "EVID", "EVID_CB"]))
    assert no_cdd.cdd_datasets == [] and not no_cdd.cdd_traces and no_cdd.cdd_baselines == []
    assert "results/evidential/micro/nq_bigbench/sweep.csv" in no_cdd.targets()


def test_one_dataset_runs_each_method_on_it() -> None:
    config = tiny(seed_sensitivity=None)
    config["datasets"] = {"squad": config["datasets"]["squad"]}
    config["evidential"]["datasets"] = config["cdd"]["datasets"] = None
    run = Run(config)
    assert run.evid_datasets == run.cdd_datasets == ["squad"]


def test_the_sensitivity_variant_and_the_seed_replicates_are_two_kinds() -> None:
    run = Run(tiny(seeds=[42, 7]))
    assert list(run.sensitivity_variants) == ["nq_bigbench_sensitivity43"]
    assert run.replicates == {
        "nq_bigbench_seed7": {"dataset": "nq_bigbench", "seed": 7},
        "squad_seed7": {"dataset": "squad", "seed": 7},
    }
    # the variant keeps the base questions and reuses their CB answers; a replicate draws anew
    variant, replicate = "nq_bigbench_sensitivity43", "nq_bigbench_seed7"
    assert run.base_dataset(variant) == "nq_bigbench" and run.base_dataset(replicate) == replicate
    assert (run.sample_seed(variant), run.construction_seed(variant)) == (42, 43)
    assert (run.sample_seed(replicate), run.construction_seed(replicate)) == (7, 7)
    cell = {"model": "micro", "dataset": variant}
    assert run.closed_book_file(cell) == "results/generation/micro/nq_bigbench/Qclosed/CB.jsonl"
    assert run.configured_dataset(replicate) == run.configured_dataset(variant) == "nq_bigbench"
    # Table 13's variant runs only the policies without a model pass of their own
    assert run.metric_policies(variant) == PAPER
    assert run.metric_cells(variant) == [("micro", "Q0"), ("micro", "QC")]
    # a replicate's rows are named by its configured dataset
    assert run.labelled([{"dataset": replicate}]) == [{"dataset": "nq_bigbench"}]
    assert "results/tables/seed7/table1_hwsa.csv" in run.targets()
    assert "results/qc/squad_seed7/summary.json" in run.targets()
    assert "results/qc/squad_seed7/audit_sample.csv" not in run.targets()
    assert Run(tiny(seed_sensitivity=None)).sensitivity_variants == {}


def test_the_sensitivity_seed_may_also_be_a_construction_seed() -> None:
    # their names differ, so a run may hold Table 13's variant and the replicate of seed 43
    run = Run(tiny(seeds=[42, 43]))
    assert list(run.sensitivity_variants) == ["nq_bigbench_sensitivity43"]
    assert "nq_bigbench_seed43" in run.replicates
    variant, replicate = "nq_bigbench_sensitivity43", "nq_bigbench_seed43"
    assert (run.sample_seed(variant), run.construction_seed(variant)) == (42, 43)
    assert (run.sample_seed(replicate), run.construction_seed(replicate)) == (43, 43)
    assert len(set(run.built_datasets)) == len(run.built_datasets)


def test_policy_inputs_are_the_files_the_registry_declares() -> None:
    run = Run(tiny())
    cell = {"model": "micro", "dataset": "nq_bigbench", "condition": "QC"}
    assert run.policy_inputs({**cell, "policy": "P4"}) == {
        "P1": "results/generation/micro/nq_bigbench/QC/P1.jsonl",
        "CB": "results/generation/micro/nq_bigbench/Qclosed/CB.jsonl",
        "NLI": "results/nli/micro/nq_bigbench/QC.jsonl",
    }
    assert run.policy_inputs({**cell, "policy": "CAI"}) == {
        "CAI": "results/cdd/micro/nq_bigbench/QC/CAI.jsonl"
    }
    assert run.policy_inputs({**cell, "policy": "EVID_CB"}) == {
        "EVID_CB": "results/evidential/micro/nq_bigbench/QC/EVID_CB.jsonl"
    }
    for name in run.policies:
        assert set(run.policy_inputs({**cell, "policy": name})) == set(registry.policy(name).inputs)


def test_report_inputs_follow_the_output_declarations_per_seed() -> None:
    run = Run(tiny(seeds=[42, 7]))
    assert run.report_inputs(["metrics"]) == {
        "metrics": ["results/metrics/nq_bigbench.csv", "results/metrics/squad.csv"]
    }
    assert run.report_inputs(["metrics"], seed=7) == {
        "metrics": ["results/metrics/nq_bigbench_seed7.csv", "results/metrics/squad_seed7.csv"]
    }
    per_seed = run.report_inputs(["metrics_per_seed"])["metrics_per_seed"]
    assert per_seed[-1] == "results/metrics/squad_seed7.csv" and len(per_seed) == 4
    assert run.table_page_files("tables_across_seeds")
    assert Run(tiny()).table_page_files("tables_across_seeds") == []


def test_an_audit_filled_in_turns_table6_on(tmp_path) -> None:
    audit = tmp_path / "audit.csv"
    audit.write_text("qid,quality\n")
    run = Run(tiny(qc__audit_filled={"nq_bigbench": str(audit)}))
    assert run.audited_datasets == ["nq_bigbench"] and run.features.audited
    assert run.report_inputs(["audit_ratings"]) == {"audit_ratings": [str(audit)]}


def test_without_the_probe_no_truthfulqa_dataset_or_condition() -> None:
    run = Run(tiny(truthfulqa_probe=None))
    assert run.truthfulqa_datasets == []
    assert "TQM" not in run.wildcard_values()["condition"]
    assert "truthfulqa_probe" not in run.table_names


ENDPOINT = {"base_url": "http://127.0.0.1:1/v1", "model": "m", "constraint": "gbnf"}


@pytest.mark.parametrize(
    ("model", "served", "asset", "threads", "gpus"),
    [
        ({"asset": "a", "n_gpu_layers": 0}, False, "a", 4, 0),  # a GGUF on the CPU: no slot
        ({"asset": "a", "n_gpu_layers": -1}, False, "a", 4, 1),
        ({"asset": "a", "n_gpu_layers": 99, "threads": 3}, False, "a", 3, 1),
        ({"endpoint": ENDPOINT, "n_gpu_layers": 99}, True, None, 1, 0),  # the server has the GPU
    ],
)
def test_a_model_entry_says_where_the_model_runs(model, served, asset, threads, gpus) -> None:
    entry = model_entry("m", model, local_threads=4)
    assert (entry.served, entry.asset, entry.threads, entry.gpus) == (
        served,
        asset,
        threads,
        gpus,
    )
    # what stands for the model among its jobs' inputs beside the asset: a served model's
    # canary file, which its jobs wait for
    assert entry.proof == ("results/endpoint/m/canary.json" if served else None)


def test_the_verifier_labels_through_a_served_generator_only_without_weights() -> None:
    served = model_entry("s", {"endpoint": ENDPOINT}, local_threads=4)
    local = model_entry("l", {"asset": "gguf", "n_gpu_layers": 0, "threads": 2}, 4)
    llm = {"backend": "llm", "asset": None}
    assert verifier_endpoint(llm, served.settings) == ENDPOINT
    assert verifier_entry(llm, served, 4) == verifier_entry(llm, served, 4)
    entry = verifier_entry(llm, served, 4)
    assert (entry.served, entry.asset, entry.threads, entry.gpus) == (True, None, 1, 0)
    entry = verifier_entry(llm, local, 4)
    assert (entry.served, entry.asset, entry.threads, entry.gpus) == (False, "gguf", 2, 0)
    deberta = {"backend": "transformers", "asset": "deberta"}
    assert verifier_endpoint(deberta, served.settings) is None
    entry = verifier_entry(deberta, served, 4)
    assert (entry.served, entry.asset, entry.threads, entry.gpus) == (False, "deberta", 4, 1)


class _Opened:
    """What the test backend's ``open`` was given."""

    batcher = None

    def __init__(self, *args) -> None:
        self.args = args


def _open_test_backend(name, model, weights, settings, n_threads):
    return _Opened(name, model, weights, settings, n_threads)


def test_a_module_backend_decides_its_models_slot_opening_and_verifier(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    monkeypatch.setattr(backends, "_BACKENDS", {})
    on_cpu = register_backend(Backend("on_cpu", _open_test_backend))
    register_backend(on_cpu)  # the same declaration again: a no-op
    with pytest.raises(ValueError, match="a model backend named on_cpu is already registered"):
        register_backend(Backend("on_cpu", _open_test_backend))
    register_backend(Backend("on_gpu", _open_test_backend, uses_gpu=True))
    assert on_cpu.code_file() == Path(__file__).resolve()
    # a local model: its threads, a GPU slot as its backend says, its asset if it has one
    entry = model_entry("m", {"backend": "on_cpu", "asset": "w", "n_gpu_layers": -1}, 4)
    assert (entry.served, entry.asset, entry.threads, entry.gpus, entry.proof) == (
        False,
        "w",
        4,
        0,
        None,
    )
    entry = model_entry("m", {"backend": "on_gpu", "threads": 2}, 4)
    assert (entry.asset, entry.threads, entry.gpus) == (None, 2, 1)
    with pytest.raises(ValueError, match="unknown model backend 'nope'"):
        model_entry("m", {"backend": "nope"}, 4)
    # the llm verifier without weights of its own labels through the generator's backend
    llm, deberta = {"backend": "llm", "asset": None}, {"backend": "transformers", "asset": "d"}
    assert verifier_backend(llm, entry.settings) is backends._BACKENDS["on_gpu"]
    assert verifier_backend(deberta, entry.settings) is None
    assert verifier_backend({"backend": "llm", "asset": "own"}, entry.settings) is None
    verifier = verifier_entry(llm, entry, 4)
    assert (verifier.served, verifier.asset, verifier.threads, verifier.gpus) == (
        False,
        None,
        2,
        1,
    )
    # open_generator hands the backend the model, its resolved weights and the settings
    opened = open_generator("m", {"backend": "on_cpu"}, None, "settings", 3)
    assert opened.args == ("m", {"backend": "on_cpu"}, None, "settings", 3)
    (tmp_path / "w.bin").write_bytes(b"w")
    manifest = tmp_path / "manifest.json"
    manifest.write_text('{"path": "w.bin"}')
    opened = open_generator("m", {"backend": "on_cpu"}, [str(manifest)], "s", 1)
    assert opened.args[2] == tmp_path / "w.bin"
    # the config check accepts a registered backend, with or without an asset
    config = yaml.safe_load(TINY.read_text())
    config["models"]["plain"] = {"backend": "on_cpu", "options": {"separator": " "}}
    assert Run(validate_config(copy.deepcopy(config))).model("plain").asset is None
    config["models"]["plain"]["endpoint"] = ENDPOINT
    with pytest.raises(ConfigError, match="give backend .* or endpoint .*, not both"):
        validate_config(config)


def test_a_method_on_the_first_questions_reads_their_context_rows() -> None:
    """evidential.n_questions / cdd.n_questions: the method's jobs read the rows of the
    first N questions (rule method_contexts), the metrics know the limit per policy, and
    the TruthfulQA probe keeps its own size."""
    config = tiny(evidential__n_questions=1, cdd__n_questions=2)
    run = Run(config)
    cell = {"model": "micro", "dataset": "nq_bigbench", "condition": "QC"}
    assert method_context_files(config, "evidential", cell, ["QC"]) == [
        "results/contexts/nq_bigbench/QC.first1.jsonl"
    ]
    assert method_context_files(config, "cdd", cell, run.conditions) == [
        f"results/contexts/nq_bigbench/{c}.first2.jsonl" for c in run.conditions
    ]
    probe = {**cell, "dataset": "truthfulqa"}
    assert method_context_files(config, "cdd", probe, ["TQB"]) == [
        "results/contexts/truthfulqa/TQB.jsonl"
    ]
    assert run.question_limits == {
        **{p: 1 for p in ("EVID", "EVID_CB")},
        **{p: 2 for p in CDD},
    }
    assert run.wildcard_values()["questions"] == ["1", "2"]
    plain = tiny()
    assert Run(plain).question_limits == {} and Run(plain).wildcard_values()["questions"] == []
    assert method_context_files(plain, "cdd", cell, ["QC"]) == [
        "results/contexts/nq_bigbench/QC.jsonl"
    ]
