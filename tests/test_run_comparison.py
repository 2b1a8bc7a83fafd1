"""Comparing two runs cell by cell, paired by question: McNemar's exact test, Holm's
correction, the flipped questions, and the command on a copy of the tiny run with planted
flips."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from grabrag.evaluation.run_comparison import (
    DIFFERS,
    WITHIN_NOISE,
    compare_sides,
    holm,
    mcnemar_exact,
)

from .conftest import REPO


def test_mcnemar_is_the_exact_binomial_of_the_discordant_pairs() -> None:
    same = np.array([1, 0, 1, 0])
    assert mcnemar_exact(same, same) == 1.0
    # six discordant pairs, all one way: 2 * (1/2)**6
    a, b = np.ones(10), np.array([0] * 6 + [1] * 4)
    assert mcnemar_exact(a, b) == pytest.approx(2 / 64)
    # 1 up, 5 down: 2 * (C(6,0) + C(6,1)) / 64
    a = np.array([1, 1, 1, 1, 1, 0])
    b = np.array([0, 0, 0, 0, 0, 1])
    assert mcnemar_exact(a, b) == pytest.approx(2 * 7 / 64)


def test_holm_steps_down_and_stays_monotone() -> None:
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.001]) == pytest.approx([0.5, 0.002])


def rows(decisions: str) -> list[dict]:
    """One row per character: a = answered "x", b = abstained."""
    return [
        {"qid": f"q{i}", "decision": "answer" if d == "a" else "abstain", "answer": "x"}
        for i, d in enumerate(decisions)
    ]


def test_a_large_shift_differs_and_a_single_flip_is_within_noise() -> None:
    key, small = ("m", "d", "Q0", "P1"), ("m", "d", "QC", "P1")
    a = {key: rows("a" * 40), small: rows("a" * 40)}
    b = {key: rows("b" * 20 + "a" * 20), small: rows("b" + "a" * 39)}
    found = {(c.key, c.metric): c for c in compare_sides(a, b, {}, n_resamples=500)}
    shifted, flipped = found[(key, "answer_rate")], found[(small, "answer_rate")]
    assert shifted.verdict == DIFFERS and shifted.diff == pytest.approx(-0.5)
    assert shifted.ci_high < 0 and shifted.p_adjusted == pytest.approx(2 * 2 * 0.5**20)
    assert flipped.verdict == WITHIN_NOISE and flipped.flips == ["q0"]
    assert len(shifted.flips) == 20
    # Q0 and QC have no EM comparison (the context does not hold the answer)
    assert {metric for _, metric in found} == {"answer_rate"}


def compare(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "grabrag.pipeline.compare", *args],
        capture_output=True,
        text=True,
        cwd=REPO / "workflow",
        timeout=600,
    )


def test_the_command_reports_exactly_the_planted_flips(tiny_run: Path, tmp_path: Path) -> None:
    """A copy of the tiny run with P1's decisions at NQ's Q100 and Q50 planted to flip:
    the comparison names those questions in those cells and no flip anywhere else."""
    other = tmp_path / "other"
    shutil.copytree(tiny_run / "results" / "policies", other / "policies")
    shutil.copytree(tiny_run / "results" / "contexts", other / "contexts")
    planted = {}
    for condition in ("Q100", "Q50"):
        path = other / "policies/micro/nq_bigbench" / condition / "P1.jsonl"
        cell = [json.loads(line) for line in path.read_text().splitlines()]
        first = cell[0]
        first["decision"] = "abstain" if first["decision"] == "answer" else "answer"
        first["answer"] = first["answer"] or "planted"
        path.write_text("".join(json.dumps(row) + "\n" for row in cell))
        planted[condition] = first["qid"]
    out = tmp_path / "compare"
    proc = compare(str(tiny_run / "results"), str(other), "--out", str(out), "--n-resamples", "200")
    assert proc.returncode == 0, proc.stderr
    assert "2 decision flips" in proc.stdout, proc.stdout
    lines = list(csv.DictReader((out / "comparison.csv").open()))
    flipped = {
        (line["condition"], line["policy"]): line["flipped questions"]
        for line in lines
        if int(line["decision flips"])
    }
    assert flipped == {("Q100", "P1"): planted["Q100"], ("Q50", "P1"): planted["Q50"]}
    assert {line["verdict"] for line in lines} == {WITHIN_NOISE}  # two questions: noise
    for suffix in ("md", "tex", "tidy.csv", "html", "pdf", "png"):
        assert (out / f"comparison.{suffix}").stat().st_size > 0
    # two models of one run: the micro model against itself flips nothing
    proc = compare(str(tiny_run / "results"), "--models", "micro", "micro", "--out", str(out))
    assert proc.returncode == 0 and "0 decision flips" in proc.stdout, proc.stdout + proc.stderr
    # a folder that is not a run is named
    proc = compare(str(tmp_path), str(other), "--out", str(out))
    assert proc.returncode == 1 and f"{tmp_path} holds no policies/ folder" in proc.stderr
