"""The policy registry: a module outside the library adds a policy that the config check,
the rules, the metrics, the policy tables and the figures then know, with no other edit."""

from __future__ import annotations

import csv
import json
import re
import shutil
import zlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from grabrag.core import outputs, plugins, registry
from grabrag.core.errors import ConfigError
from grabrag.core.registry import decide
from grabrag.pipeline.config import validate_config
from grabrag.pipeline.scope import policy_input_file

from .conftest import MODEL_RULES, TINY, copy_run, planned_jobs, snakemake

TERSE_MODULE = Path(__file__).parent / "policy_modules" / "terse.py"
BUILTIN = ["P0", "P1", "P2", "P3", "P4", "EVID", "EVID_CB"]
BUILTIN += ["CDD", "CDD_ALPHA", "CAI", "SHAM", "REFLECT", "FILTER"]


@pytest.fixture
def clean_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Policies a test loads are forgotten after it (the registry is process state)."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry.policies()))
    monkeypatch.setattr(plugins, "_LOADED", set(plugins._LOADED))


def _tiny() -> dict[str, Any]:
    return yaml.safe_load(TINY.read_text())


def _generation_row(qid: str, decision: str | None, answer: str | None) -> dict[str, Any]:
    return {
        "qid": qid,
        "index": 0,
        "condition": "Q0",
        "prompt": "P1",
        "decision": decision,
        "answer": answer,
        "confidence": None if decision is None else 80,
        "parse_status": "failed" if decision is None else "ok",
    }


def test_builtin_policies_in_table_order(clean_registry: None) -> None:
    assert registry.names() == BUILTIN
    assert registry.policy("P4").inputs == {
        "P1": registry.GENERATION,
        "CB": registry.CLOSED_BOOK_PASS,
        "NLI": registry.NLI,
    }
    assert registry.policy("EVID_CB").printed == "EVID+CB"
    with pytest.raises(ValueError, match="unknown policy 'TERSE'"):
        registry.policy("TERSE")


def test_module_registers_its_policy_once(clean_registry: None) -> None:
    registry.load_modules([str(TERSE_MODULE)])
    registry.load_modules([str(TERSE_MODULE)])
    assert registry.names() == [*BUILTIN, "TERSE"]
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registry.Policy("P1", lambda inputs, settings: [], {}))
    with pytest.raises(ValueError, match="unknown input source"):
        registry.Policy("X", lambda inputs, settings: [], {"P1": "generations"})


def test_a_policy_reads_an_output_kind_a_module_declares(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(outputs, "_BY_NAME", dict(outputs.outputs()))
    with pytest.raises(ValueError, match="or an output kind declared before the policy"):
        registry.Policy("X", lambda inputs, settings: [], {"checks": "own_checks"})
    outputs.declare(
        outputs.Output(
            "own_checks",
            "results/own/{model}/{dataset}/{condition}.jsonl",
            ("model", "dataset", "condition"),
            outputs.rows_by_cell,
            "a method's own rows",
        )
    )
    policy = registry.Policy(
        "X", lambda inputs, settings: [], {"P1": registry.GENERATION, "checks": "own_checks"}
    )
    # its own pass: not on Table 13's sensitivity variant
    assert policy.own_pass and not registry.policy("P1").own_pass
    cell = {"model": "m", "dataset": "d", "condition": "QC", "policy": "X"}
    assert policy_input_file("own_checks", "checks", cell, "cb") == "results/own/m/d/QC.jsonl"
    assert policy_input_file(registry.GENERATION, "P1", cell, "cb") == (
        "results/generation/m/d/QC/P1.jsonl"
    )
    assert policy_input_file(registry.CLOSED_BOOK_PASS, "CB", cell, "cb") == "cb"


def test_config_accepts_a_module_policy_only_with_its_module(clean_registry: None) -> None:
    config = _tiny()
    config["policies"] = {"names": ["P1", "TERSE"]}
    with pytest.raises(ConfigError, match="policies.names"):
        validate_config(config)
    config["policies"]["modules"] = [str(TERSE_MODULE)]
    config["policies"]["options"] = {"TERSE": {"max_words": 2}}
    checked = validate_config(config)
    assert checked["policies"]["names"] == ["P1", "TERSE"]
    assert registry.policy("TERSE").config_settings(checked) == {"max_words": 2}
    # A built-in policy's settings come from its own config keys.
    assert registry.policy("P3").config_settings(checked) == {"cutoff": 50, "threshold": 0.8}
    config["policies"]["modules"] = [str(TERSE_MODULE.with_name("absent.py"))]
    with pytest.raises(ConfigError, match="config key 'policies.modules': no module at"):
        validate_config(config)
    # under the top-level key, the error names that key
    del config["policies"]["modules"]
    config["modules"] = ["absent_module.py"]
    with pytest.raises(ConfigError, match="config key 'modules': no module at absent_module.py"):
        validate_config(config)


def test_decide_dispatches_to_a_module_policy(clean_registry: None) -> None:
    registry.load_modules([str(TERSE_MODULE)])
    p1 = [
        _generation_row("a", "answer", "Paris"),
        _generation_row("b", "answer", "the city of Paris"),
        _generation_row("c", "abstain", ""),
        _generation_row("d", None, None),
    ]
    rows = decide("TERSE", {"P1": p1}, {"max_words": 2})
    assert [(r["policy"], r["decision"], r["answer"], r["rule"]) for r in rows] == [
        ("TERSE", "answer", "Paris", "generated"),
        ("TERSE", "abstain", "", "too_long"),
        ("TERSE", "abstain", "", "generated"),
        ("TERSE", None, None, "parse_failed"),
    ]


# --- the module's policy through the real workflow ----------------------------------------

MAX_WORDS = 1
LABEL = "TERSE (short answers)"  # as tests/policy_modules/terse.py registers it
# The tables that compare every policy (the registry's in_policy_tables).
POLICY_TABLES = (
    "table1_hwsa",
    "table2_policies",
    "table7_hwsa_ci",
    "table8_fac_ci",
    "table10_aurc",
    "table11_ece",
    "normalised_hwsa",
    "selection_bias",
    "hwsa_conditions",
)
# The figures that draw every policy (the registry's in_figures).
POLICY_FIGURES = (
    "abstention_by_condition",
    "abstention_by_dataset",
    "risk_coverage",
    "reliability",
    "qc_breakdown",
)


def _pdf_text(path: Path) -> list[str]:
    """The text objects of a matplotlib PDF (each a kerned TJ array in a Flate stream)."""
    texts = []
    for stream in re.findall(rb"stream\n(.*?)\nendstream", path.read_bytes(), re.S):
        try:
            content = zlib.decompress(stream)
        except zlib.error:
            continue
        for array in re.findall(rb"\[(.*?)\]\s*TJ", content, re.S):
            pieces = re.findall(rb"\(((?:\\.|[^\\)])*)\)", array)
            texts.append(re.sub(rb"\\(.)", rb"\1", b"".join(pieces)).decode("latin-1"))
    return texts


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.integration
def test_module_policy_reaches_decisions_metrics_tables_and_figures(
    tiny_run: Path, tmp_path: Path, clean_registry: None
) -> None:
    config = _tiny()
    # One dataset, the paper's policies and the module's; no EvidentialRAG, CDD, seed
    # variant or TruthfulQA probe: only what the policy needs.
    config["datasets"] = {"nq_bigbench": config["datasets"]["nq_bigbench"]}
    config["seed_sensitivity"] = None
    config["truthfulqa_probe"] = None
    for method in ("evidential", "cdd"):
        config[method]["datasets"] = None
    # A copy of the module, so that the test can edit it once the run is done.
    module = tmp_path / "terse.py"
    module.write_text(TERSE_MODULE.read_text())
    config["policies"] = {
        "modules": [str(module)],
        "names": ["P0", "P1", "P2", "P3", "P4", "TERSE"],
        "options": {"TERSE": {"max_words": MAX_WORDS}},
    }
    configfile = tmp_path / "terse.yaml"
    configfile.write_text(yaml.safe_dump(config))
    # From a copy of the finished tiny run: the cut-down config changes no model job's
    # settings, so only the policy side runs (and no model is called again).
    workdir = tmp_path / "run"
    copy_run(tiny_run, workdir)
    # the tables and figures this config makes, and only those (the tiny run made more)
    for made in ("tables", "figures"):
        shutil.rmtree(workdir / "results" / made)
    proc = snakemake(workdir, configfile=configfile)
    jobs = planned_jobs(proc.stdout + proc.stderr)
    assert jobs["policy"] > 0 and not MODEL_RULES & set(jobs), jobs
    results = workdir / "results"

    # Decisions: P1's row, or an abstention where P1's answer is too long.
    rules = []
    for condition in validate_config(config)["generation"]["conditions"]:
        cell = results / "policies/micro/nq_bigbench" / condition
        p1 = {r["qid"]: r for r in _read_jsonl(cell / "P1.jsonl")}
        terse = _read_jsonl(cell / "TERSE.jsonl")
        assert [r["qid"] for r in terse] == list(p1)
        for row in terse:
            before = p1[row["qid"]]
            too_long = before["decision"] == "answer" and len(before["answer"].split()) > MAX_WORDS
            expected = (
                {**before, "decision": "abstain", "answer": "", "confidence": 0, "rule": "too_long"}
                if too_long
                else before
            )
            assert row == {**expected, "policy": "TERSE"}
            rules.append(row["rule"])
    assert "too_long" in rules and "generated" in rules, rules

    # Metrics: every metric the paper's policies get (P2's: P0 and P1 also get
    # EvidentialRAG's Eq. 26-27 ECE, as its naive RAG and the row beside it).
    with (results / "metrics/nq_bigbench.csv").open(newline="") as handle:
        metrics = list(csv.DictReader(handle))
    by_policy: dict[str, set[tuple[str, str]]] = {}
    for row in metrics:
        by_policy.setdefault(row["policy"], set()).add((row["condition"], row["metric"]))
    assert by_policy["TERSE"] == by_policy["P2"]
    assert {metric for _, metric in by_policy["P0"] - by_policy["P2"]} == {"ece_answer_15"}
    q100 = _read_jsonl(results / "policies/micro/nq_bigbench/Q100/TERSE.jsonl")
    answer_rate = next(
        float(r["value"])
        for r in metrics
        if (r["policy"], r["condition"], r["metric"]) == ("TERSE", "Q100", "answer_rate")
    )
    assert answer_rate == pytest.approx(sum(r["decision"] == "answer" for r in q100) / len(q100))

    # The policy tables list it (a row, or Table 10's column; Table 2 by its label); no
    # EVID or CDD table is made.
    for name in POLICY_TABLES:
        with (results / f"tables/{name}.csv").open(newline="") as handle:
            table = list(csv.reader(handle))
        cells = {cell for row in table for cell in row}
        printed = LABEL if name == "table2_policies" else "TERSE"
        assert printed in cells, (name, table[:3])
    assert not list((results / "tables").glob("evid_*")) + list((results / "tables").glob("cdd_*"))

    # The figures that draw every policy name it in their legend or panel titles.
    for name in POLICY_FIGURES:
        texts = _pdf_text(results / f"figures/{name}.pdf")
        assert LABEL in texts, (name, texts)

    # The module is code the TERSE jobs run: a finished run plans nothing, and a code
    # edit of the module reruns TERSE's policy jobs (and what reads them), no other policy.
    assert "Nothing to be done" in snakemake(workdir, "-n", configfile=configfile).stdout
    module.write_text(module.read_text() + "\nEDITED = True\n")
    plan = snakemake(workdir, "-n", configfile=configfile).stdout
    jobs = planned_jobs(plan)
    conditions = validate_config(config)["generation"]["conditions"]
    assert jobs["policy"] == len(conditions), plan
    assert "generate_context_prompts" not in jobs and "nli" not in jobs, plan
    planned = set(re.findall(r"output: results/policies/micro/nq_bigbench/\w+/(\w+)\.jsonl", plan))
    assert planned == {"TERSE"}, plan
