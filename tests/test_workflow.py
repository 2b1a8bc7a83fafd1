"""Integration tests: the real workflow, real encoder and data, tiny config."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from grabrag.contexts import CONDITIONS
from grabrag.io import read_jsonl

from .conftest import REPO, TINY, snakemake

pytestmark = pytest.mark.integration
DATASETS = ("squad", "nq_bigbench")


def _outputs(root: Path) -> dict[str, bytes]:
    results = root / "results"
    return {
        str(p.relative_to(results)): p.read_bytes()
        for p in sorted(results.rglob("*"))
        if p.is_file() and "logs" not in p.parts
    }


def planned_jobs(dry_run_output: str) -> dict[str, int]:
    """The 'Job stats' table of a dry run, as {rule: count}."""
    table = dry_run_output.split("Job stats:", 1)[1].split("Reasons:", 1)[0]
    jobs = {}
    for line in table.splitlines():
        match = re.fullmatch(r"(\w+)\s+(\d+)", line.strip())
        if match and match.group(1) != "total":
            jobs[match.group(1)] = int(match.group(2))
    return jobs


def test_run_builds_every_condition(tiny_run: Path) -> None:
    for dataset in DATASETS:
        questions = read_jsonl(tiny_run / f"results/data/{dataset}/questions.jsonl")
        assert len(questions) == 4
        by_condition = {
            c: read_jsonl(tiny_run / f"results/contexts/{dataset}/{c}.jsonl") for c in CONDITIONS
        }
        for condition, rows in by_condition.items():
            assert [r["qid"] for r in rows] == [q["qid"] for q in questions], condition
        for row in by_condition["Q100"]:
            assert len(row["passages"]) == 5
            assert {p["role"] for p in row["passages"]} == {"gold"}
        for row in by_condition["Q50"]:
            roles = sorted(p["role"] for p in row["passages"])
            assert roles == ["gold"] * 3 + ["hard_negative"] * 2
        for row in by_condition["Q0"]:
            assert {p["role"] for p in row["passages"]} == {"hard_negative"}
            assert not row["answer_in_context"]
            assert row["context_tokens"] <= 1500
        assert all(r["passages"] == [] and r["context"] == "" for r in by_condition["Qclosed"])
        report = json.loads((tiny_run / f"results/contexts/{dataset}/report.json").read_text())
        assert report["kept"] == 4
        assert "of asset all-minilm-l6-v2" in report["tokenizer"]


def test_two_runs_give_identical_files(tiny_run: Path, tmp_path: Path) -> None:
    snakemake(tmp_path)
    first, second = _outputs(tiny_run), _outputs(tmp_path)
    assert first.keys() == second.keys()
    different = [name for name in first if first[name] != second[name]]
    assert different == []


def test_one_output_as_target_runs_only_its_inputs(tmp_path: Path) -> None:
    target = "results/data/squad/questions.jsonl"
    snakemake(tmp_path, target)
    assert (tmp_path / target).exists()
    assert not (tmp_path / "results/data/nq_bigbench").exists()
    assert not (tmp_path / "results/retrieval").exists()


def test_editing_one_stage_param_reruns_only_that_stage(tiny_run: Path, tmp_path: Path) -> None:
    shutil.copytree(tiny_run / "results", tmp_path / "results")
    shutil.copytree(
        tiny_run / ".snakemake",
        tmp_path / ".snakemake",
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns("locks", "incomplete"),
    )
    config = yaml.safe_load(TINY.read_text())
    config["contexts"]["max_context_tokens"] = 400
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(config))
    plan = snakemake(tmp_path, "-n", configfile=edited).stdout
    assert planned_jobs(plan) == {"build_contexts": 2, "all": 1}, plan


def test_paper_config_plans_offline(tmp_path: Path) -> None:
    proc = snakemake(tmp_path, "-n", configfile=REPO / "config/paper.yaml")
    for dataset in ("nq", "hotpotqa"):
        assert f"results/contexts/{dataset}/Q0.jsonl" in proc.stdout
    assert "squad" not in proc.stdout  # --configfile replaces the embedded default


def test_unknown_config_key_is_an_error_naming_it(tmp_path: Path) -> None:
    config = yaml.safe_load(TINY.read_text())
    config["retrieval"]["bm25_wieght"] = 0.5
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(config))
    proc = snakemake(tmp_path, "-n", configfile=bad, check=False)
    assert proc.returncode != 0
    output = proc.stdout + proc.stderr
    assert "Invalid config: config key 'retrieval'" in output and "bm25_wieght" in output


def test_lint_is_clean() -> None:
    proc = snakemake(REPO, "--lint", check=False, configfile=REPO / "config.yaml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Lints for" not in proc.stdout + proc.stderr


def test_corrupt_intermediate_file_is_named_and_other_work_survives(
    tiny_run: Path, tmp_path: Path
) -> None:
    shutil.copytree(tiny_run / "results", tmp_path / "results")
    shutil.copytree(
        tiny_run / ".snakemake",
        tmp_path / ".snakemake",
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns("locks", "incomplete"),
    )
    corpus = tmp_path / "results/data/squad/corpus.jsonl"
    lines = corpus.read_text().splitlines()
    lines[2] = lines[2][:40]  # a truncated line, as a disk-full write would leave
    corpus.write_text("\n".join(lines) + "\n")
    kept = (tmp_path / "results/contexts/nq_bigbench/Q0.jsonl").read_bytes()
    proc = snakemake(tmp_path, "--keep-going", check=False)
    assert proc.returncode != 0
    assert "corpus.jsonl, line 3: not valid JSON" in proc.stdout + proc.stderr
    assert (tmp_path / "results/contexts/nq_bigbench/Q0.jsonl").read_bytes() == kept
