"""Configs with features switched off still plan: a matrix of variants of the tiny config,
each dry-run through the real workflow (as the snakemake-workflows' `.test` configs)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import TINY, snakemake
from .test_workflow import planned_jobs

pytestmark = pytest.mark.integration

PAPER_POLICIES = ["P0", "P1", "P2", "P3", "P4"]
EVID_RULES = {"evidential_evaluate", "evidential_generate", "evidential_sweep"}
CDD_RULES = {"cdd_generate", "baselines_generate", "cdd_diagnostics"}


def _no_qc(config: dict[str, Any], _: Path) -> None:
    config["generation"] = {**config.get("generation", {}), "conditions": ["Q100", "Q50", "Q0"]}


def _one_dataset(config: dict[str, Any], _: Path) -> None:
    config["datasets"] = {"squad": config["datasets"]["squad"]}
    config["seed_sensitivity"] = None
    for method in ("evidential", "cdd"):
        config[method]["datasets"] = None


def _paper_policies(config: dict[str, Any], _: Path) -> None:
    config.setdefault("policies", {})["names"] = PAPER_POLICIES


def _no_evidential(config: dict[str, Any], _: Path) -> None:
    names = ["P0", "P1", "P2", "P3", "P4", "CDD", "CDD_ALPHA", "CAI", "SHAM", "REFLECT", "FILTER"]
    config.setdefault("policies", {})["names"] = names


def _no_cdd(config: dict[str, Any], _: Path) -> None:
    config.setdefault("policies", {})["names"] = [*PAPER_POLICIES, "EVID", "EVID_CB"]


def _no_seed_sensitivity(config: dict[str, Any], _: Path) -> None:
    config["seed_sensitivity"] = None


def _no_truthfulqa_probe(config: dict[str, Any], _: Path) -> None:
    config["truthfulqa_probe"] = None


def _audit_filled(config: dict[str, Any], directory: Path) -> None:
    audit = directory / "audit_nq_filled.csv"
    audit.write_text("qid,quality\n")
    config["qc"]["audit_filled"] = {"nq_bigbench": str(audit)}


VARIANTS: dict[str, tuple[Callable[[dict[str, Any], Path], None], set[str], set[str]]] = {
    # name: (edit, rules that must be planned, rules that must not)
    "no_qc": (_no_qc, {"generate_context_prompts"}, set()),
    "one_dataset": (_one_dataset, {"evidential_evaluate", "cdd_generate"}, set()),
    "paper_policies": (_paper_policies, {"nli", "policy"}, EVID_RULES | CDD_RULES),
    "no_evidential": (_no_evidential, CDD_RULES, EVID_RULES),
    "no_cdd": (_no_cdd, EVID_RULES, CDD_RULES),
    "no_seed_sensitivity": (_no_seed_sensitivity, {"table"}, set()),
    "audit_filled": (_audit_filled, {"audit_hwsa", "table"}, set()),
    "no_truthfulqa_probe": (
        _no_truthfulqa_probe,
        {"policy"},
        {"truthfulqa_questions", "truthfulqa_contexts"},
    ),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variant_plans_cleanly(variant: str, tmp_path: Path) -> None:
    edit, wanted, unwanted = VARIANTS[variant]
    config = yaml.safe_load(TINY.read_text())
    edit(config, tmp_path)
    configfile = tmp_path / f"{variant}.yaml"
    configfile.write_text(yaml.safe_dump(config))
    proc = snakemake(tmp_path, "-n", configfile=configfile)
    jobs = planned_jobs(proc.stdout)
    assert jobs.get("all") == 1, proc.stdout[-3000:]
    assert wanted <= set(jobs), (variant, jobs)
    assert not unwanted & set(jobs), (variant, jobs)
    assert "Traceback" not in proc.stdout + proc.stderr
    if variant == "no_qc":  # no QC or QX cell is generated or decided
        assert "/QC/" not in proc.stdout and "/QX/" not in proc.stdout
    if variant == "no_truthfulqa_probe":
        assert "truthfulqa/TQ" not in proc.stdout and "tables/truthfulqa_probe" not in proc.stdout
