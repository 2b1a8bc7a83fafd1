"""docs/extending.md, followed to the letter: its code blocks (a policy that reads two
upstream cells, a figure that reads an output kind of its own, their config) written as
files and run through the real workflow on the tiny config; both reach the decisions,
the tables, the figures and the report.

The page's run starts from a copy of the session's finished tiny run, as a user adds a
policy to a run they have: only the jobs the new modules add or change run (the new
policy's cells, the metrics, tables and figures that list it), which is also the proof
that adding a module policy reruns no generation."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest

from grabrag.core.io import read_jsonl

from .conftest import CORES, MODEL_RULES, REPO, RESOURCES, TINY, copy_run, planned_jobs

pytestmark = pytest.mark.integration

PAGE = REPO / "docs" / "extending.md"
_BLOCK = re.compile(r"```\w+ title=(\S+)\n(.*?)```", re.S)
MODEL, DATASET, VARIANT = "micro", "nq_bigbench", "nq_bigbench_seed43"


def page_files() -> dict[str, str]:
    """The page's code blocks that name a file, by file name."""
    return {name: text for name, text in _BLOCK.findall(PAGE.read_text(encoding="utf-8"))}


def run(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The workflow with the tiny config and the page's config file after it, as the page
    says to combine them."""
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(TINY),
        "extending.yaml",
        "--config",
        f"resources_dir={RESOURCES}",
        "--cores",
        str(CORES),
        *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=workdir, timeout=1800)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


def test_the_page_names_its_files() -> None:
    assert set(page_files()) == {"either.py", "gold_rank.py", "gold_rank.rst", "extending.yaml"}


@pytest.fixture(scope="module")
def extending_run(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    workdir = tmp_path_factory.mktemp("extending")
    copy_run(tiny_run, workdir)
    for name, text in page_files().items():
        (workdir / name).write_text(text)
    proc = run(workdir)
    jobs = planned_jobs(proc.stdout + proc.stderr)
    # the page's modules add policy and figure jobs; no model is called again
    assert jobs["policy"] > 0 and jobs["figure"] > 0 and not MODEL_RULES & set(jobs), jobs
    run(workdir, "--report", "results/report.html")
    return workdir


def test_the_policy_reads_p0_and_p1_in_every_cell_the_seed_variant_included(
    extending_run: Path,
) -> None:
    rules = set()
    for dataset, conditions in ((DATASET, ("Q100", "Q0", "QC")), (VARIANT, ("Q0", "QC"))):
        for condition in conditions:
            cell = extending_run / "results/policies" / MODEL / dataset / condition
            p0 = {r["qid"]: r for r in read_jsonl(cell / "P0.jsonl")}
            p1 = read_jsonl(cell / "P1.jsonl")
            either = read_jsonl(cell / "EITHER.jsonl")
            assert [r["qid"] for r in either] == [r["qid"] for r in p1]
            for before, row in zip(p1, either, strict=True):
                confidence = p0[row["qid"]]["confidence"]
                unsure = confidence is None or confidence < 60
                if before["decision"] == "answer" and unsure:
                    assert (row["decision"], row["rule"]) == ("abstain", "p0_unsure")
                else:
                    assert {**row, "policy": "P1"} == before
                rules.add(row["rule"])
    assert "p0_unsure" in rules, rules


def test_the_policy_reaches_the_tables_and_the_figure_reaches_the_report(
    extending_run: Path,
) -> None:
    results = extending_run / "results"
    with (results / "tables/table1_hwsa.csv").open(newline="") as handle:
        assert "EITHER" in {cell for row in csv.reader(handle) for cell in row}
    assert (results / "figures/gold_rank.pdf").stat().st_size > 0
    assert (results / "figures/gold_rank.png").stat().st_size > 0
    report = (results / "report.html").read_text(encoding="utf-8")
    assert "gold_rank" in report
    # the module's caption, its Jinja expression rendered with the config
    assert "construction seed 42" in report


def test_editing_the_figure_module_reruns_that_figure_only(extending_run: Path) -> None:
    assert planned_jobs(run(extending_run, "-n").stdout) == {}
    module = extending_run / "gold_rank.py"
    text = module.read_text()
    try:
        module.write_text(text.replace("alpha=0.6", "alpha=0.5"))
        assert planned_jobs(run(extending_run, "-n").stdout) == {"figure": 1, "all": 1}
    finally:
        module.write_text(text)
