"""Integration tests of CDD, CDD-alpha, the prompt-only baselines and the CDD diagnostics:
the real workflow on the tiny config."""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from grabrag.cdd.decisions import FAMILY
from grabrag.cdd.diagnostics import DIAGNOSTIC_COLUMNS, PERTURBATION_TYPES
from grabrag.cdd.runs import STEP_STATUSES
from grabrag.cdd.schema import DIVERGENCE, STEPS
from grabrag.core.io import read_jsonl
from grabrag.generation.generator import parse_output

from .conftest import REPO, snakemake, snakemake_command

pytestmark = pytest.mark.integration
MODEL = "micro"
# tests/config/tiny.yaml runs CDD and the baselines on nq_bigbench only (CI time).
DATASETS = ("nq_bigbench",)
CONDITIONS = ("Q100", "Q50", "Q0", "QC", "QX")
BASELINES = ("CAI", "SHAM", "REFLECT", "FILTER")
TIMING = {"seconds", "question_seconds"}


def _untimed(value: Any) -> Any:
    """A row with its wall-clock fields removed, at any depth."""
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k not in TIMING}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def _contexts(root: Path, dataset: str, condition: str) -> list[dict[str, Any]]:
    return read_jsonl(root / f"results/contexts/{dataset}/{condition}.jsonl")


def _cells():
    return [(d, c) for d in DATASETS for c in CONDITIONS]


def test_traces_for_every_condition(tiny_run: Path) -> None:
    assert not (tiny_run / f"results/cdd/{MODEL}/squad").exists()  # out of cdd.datasets
    rows_seen = 0
    for dataset, condition in _cells():
        contexts = _contexts(tiny_run, dataset, condition)
        traces = read_jsonl(tiny_run / f"results/cdd/{MODEL}/{dataset}/{condition}/traces.jsonl")
        assert [r["qid"] for r in traces] == [r["qid"] for r in contexts], (dataset, condition)
        for context, row in zip(contexts, traces, strict=True):
            rows_seen += 1
            assert (row["condition"], row["variant"], row["parametric"]) == (
                condition,
                "full",
                "closed_book",
            )
            runs = [row, *row["ablations"].values()]
            for run in runs:
                assert list(run["trace"]) == list(STEPS)
                for entry in run["trace"].values():
                    assert entry["status"] in STEP_STATUSES, entry
            assert row["trace"]["parametric"]["origin"] == "closed_book"
            for outcome in row["perturbations"].values():
                assert outcome["resolution"]["status"] in STEP_STATUSES
                assert outcome["decision"] in ("answer", "abstain", None)
            # identical calls are reused: 9 calls with a divergence, 7 without
            diverge = row["trace"][DIVERGENCE]["fields"]["diverge"]
            assert (row["llm_calls"], row["reused_calls"]) == ((9, 3) if diverge else (7, 4))
            mistake = row["perturbations"]["mistake"]
            if context.get("replacement"):
                assert mistake["wrong_answer_source"] == "replacement"
                assert mistake["wrong_answer"] == context["replacement"]
            assert mistake["wrong_answer_source"] in ("replacement", "parametric_answer", "fixed")
    assert rows_seen > 0
    # the seed-43 variant (Table 13) gets no CDD job
    assert not (tiny_run / f"results/cdd/{MODEL}/nq_bigbench_sensitivity43").exists()


def test_decision_files_for_every_cdd_policy_and_condition(tiny_run: Path) -> None:
    for dataset, condition in _cells():
        contexts = _contexts(tiny_run, dataset, condition)
        base = tiny_run / f"results/policies/{MODEL}/{dataset}/{condition}"
        traces = {
            r["qid"]: r
            for r in read_jsonl(
                tiny_run / f"results/cdd/{MODEL}/{dataset}/{condition}/traces.jsonl"
            )
        }
        for policy in FAMILY:
            rows = read_jsonl(base / f"{policy}.jsonl")
            assert [r["qid"] for r in rows] == [r["qid"] for r in contexts], (policy, dataset)
            for row in rows:
                assert row["policy"] == policy and row["condition"] == condition
                assert row["decision"] in ("answer", "abstain", None)
                if row["decision"] is None:
                    assert row["rule"] == "parse_failed" and row["confidence"] is None
                else:
                    assert isinstance(row["confidence"], int)
        for row in read_jsonl(base / "CDD.jsonl"):
            trace = traces[row["qid"]]
            fields = trace["trace"]["resolution"]["fields"]
            if row["rule"] == "cdd_resolved":
                assert (row["decision"], row["answer"], row["confidence"]) == (
                    fields["decision"],
                    fields["answer"],
                    fields["confidence"],
                )
            else:
                assert trace["trace"]["resolution"]["status"] == "failed"


def test_cdd_alpha_equals_p1_on_gated_off_questions(tiny_run: Path) -> None:
    counts = {True: 0, False: 0}
    for dataset, condition in _cells():
        base = tiny_run / f"results/policies/{MODEL}/{dataset}/{condition}"
        p1 = {r["qid"]: r for r in read_jsonl(base / "P1.jsonl")}
        cdd = {r["qid"]: r for r in read_jsonl(base / "CDD.jsonl")}
        for row in read_jsonl(base / "CDD_ALPHA.jsonl"):
            counts[row["gated"]] += 1
            source = cdd[row["qid"]] if row["gated"] else p1[row["qid"]]
            keys = ("decision", "answer", "confidence")
            assert {k: row[k] for k in keys} == {k: source[k] for k in keys}, row
            # the embedded config's gate is the lexical one (no judgement call)
            assert (row["gate"], row["gate_basis"]) == ("lexical", "lexical")
            if row["gated"]:
                assert row["rule"] == source["rule"]
            else:
                assert row["rule"] in ("gate_bypass", "parse_failed")
                assert row["gate_score"] < 0.5
    assert counts[False] > 0, counts


def test_baseline_cells_are_generation_rows(tiny_run: Path) -> None:
    reference = read_jsonl(tiny_run / f"results/generation/{MODEL}/nq_bigbench/Q100/P1.jsonl")
    for dataset, condition in _cells():
        contexts = _contexts(tiny_run, dataset, condition)
        for name in BASELINES:
            rows = read_jsonl(tiny_run / f"results/cdd/{MODEL}/{dataset}/{condition}/{name}.jsonl")
            assert [r["qid"] for r in rows] == [r["qid"] for r in contexts]
            for row in rows:
                assert list(row) == list(reference[0]) and row["prompt"] == name
                parsed = parse_output(row["raw"], row["finish_reason"])
                assert (parsed.decision, parsed.answer, parsed.status) == (
                    row["decision"],
                    row["answer"],
                    row["parse_status"],
                )


def _diagnostics(root: Path, dataset: str) -> list[dict[str, str]]:
    with (root / f"results/cdd/{MODEL}/{dataset}/diagnostics.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_diagnostics_have_the_documented_rows(tiny_run: Path) -> None:
    for dataset in DATASETS:
        rows = _diagnostics(tiny_run, dataset)
        assert rows and list(rows[0]) == list(DIAGNOSTIC_COLUMNS)
        keys = {
            (r["section"], r["policy"], r["variant"], r["condition"], r["perturbation_type"]): r
            for r in rows
        }
        metrics = {}
        for r in rows:
            key = (r["section"], r["policy"], r["variant"], r["condition"], r["perturbation_type"])
            metrics.setdefault(key, set()).add(r["metric"])
        assert keys
        for condition in (*CONDITIONS, "all"):
            for variant in ("truncated", "mistake"):
                assert metrics[("sensitivity", "CDD", variant, condition, "")] == {
                    "acc_clean",
                    "acc_corrupted",
                    "sensitivity",
                    "changed",
                }
            for variant in ("full", "no_premise", "no_divergence"):
                assert metrics[("ablation", "CDD", variant, condition, "")] == {
                    "accuracy",
                    "behaviour",
                    "answer_rate",
                }
            assert metrics[("source_control", "CDD", "full", condition, "")] == {
                "context",
                "parametric",
                "both",
                "neither",
            }
        for policy in ("P1", *FAMILY):
            for kind in (*PERTURBATION_TYPES, "macro_adversarial"):
                assert metrics[("perturbation_type", policy, "", "", kind)] == {
                    "accuracy",
                    "behaviour",
                }
        for r in rows:
            value = float(r["value"]) if r["value"] != "" else math.nan  # NaN is written empty
            if r["section"] == "sensitivity" and r["metric"] == "sensitivity":
                assert r["reason"] or value == value  # NaN only with a reason
            elif r["section"] in ("ablation", "perturbation_type") and int(r["n"]):
                assert 0 <= value <= 1
        # source-control counts add up to the answered rows
        for condition in (*CONDITIONS, "all"):
            answered = {
                int(r["n"])
                for r in rows
                if r["section"] == "source_control" and r["condition"] == condition
            }
            total = sum(
                float(r["value"])
                for r in rows
                if r["section"] == "source_control" and r["condition"] == condition
            )
            assert answered == {int(total)}


def test_cdd_tables_and_metrics(tiny_run: Path) -> None:
    for name in ("cdd_results", "cdd_sensitivity", "cdd_ablation", "cdd_source_control"):
        for suffix in ("csv", "md", "tex"):
            assert (tiny_run / f"results/tables/{name}.{suffix}").stat().st_size > 0
    with (tiny_run / "results/tables/cdd_results.csv").open(newline="") as handle:
        results = list(csv.DictReader(handle))
    shown = ["P1", "CDD", "CDD-alpha", "CAI", "SHAM", "REFLECT", "FILTER"]
    assert [r["policy"] for r in results] == shown * len(DATASETS)
    assert "HwSA@QX [95% CI]" in results[0] and "Acc adversarial macro [95% CI]" in results[0]
    with (tiny_run / "results/tables/cdd_sensitivity.csv").open(newline="") as handle:
        sensitivity = list(csv.DictReader(handle))
    assert {r["perturbation"] for r in sensitivity} == {"truncation", "mistake injection"}
    # the metrics rule evaluates the new policies at every condition, in the policy order
    with (tiny_run / "results/metrics/nq_bigbench.csv").open(newline="") as handle:
        metrics = list(csv.DictReader(handle))
    policies = list(dict.fromkeys(r["policy"] for r in metrics if r["policy"] != "mean"))
    assert policies[-6:] == list(FAMILY)
    for policy in FAMILY:
        conditions = {
            r["condition"]
            for r in metrics
            if r["policy"] == policy and r["metric"] == "answer_rate"
        }
        assert conditions == set(CONDITIONS)


def test_logs_report_progress_calls_and_time(tiny_run: Path) -> None:
    logs = tiny_run / "results/logs"
    cdd_log = (logs / f"cdd_generate/{MODEL}/nq_bigbench/Q100.log").read_text()
    assert "[1/2]" in cdd_log and "LLM calls" in cdd_log and "ETA" in cdd_log
    assert "rule cdd_generate done in" in cdd_log
    baseline_log = (logs / f"baselines_generate/{MODEL}/nq_bigbench/Q100.log").read_text()
    assert "[8/8]" in baseline_log and "rule baselines_generate done in" in baseline_log


def test_killed_cdd_job_resumes_and_matches_an_uninterrupted_run(
    tiny_run: Path, tmp_path: Path
) -> None:
    shutil.copytree(tiny_run / "results", tmp_path / "results")
    shutil.copytree(
        tiny_run / ".snakemake",
        tmp_path / ".snakemake",
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns("locks", "incomplete"),
    )
    cell = tmp_path / f"results/cdd/{MODEL}/nq_bigbench/Q100"
    traces = cell / "traces.jsonl"
    traces.unlink()
    checkpoint = cell / ".traces_checkpoint.jsonl"
    # relative to the working directory: Snakemake matches an absolute target against the
    # rules' relative outputs only when it is spelled the same way
    target = str(traces.relative_to(tmp_path))
    job = subprocess.Popen(
        snakemake_command(tmp_path, target),
        cwd=REPO,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # The tiny model decodes batch: 2, so the two questions run as one group whose rows
    # reach the checkpoint together: kill the job once its steps are under way, before
    # the group is done; the resumed job redoes the group whole.
    log_path = tmp_path / f"results/logs/cdd_generate/{MODEL}/nq_bigbench/Q100.log"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and job.poll() is None:
        if log_path.exists() and "questions, parametric=" in log_path.read_text():
            break
        time.sleep(0.02)
    assert job.poll() is None, "the job finished before it could be killed"
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    assert not traces.exists()
    # nothing finished: at most the line that records the settings
    assert not checkpoint.exists() or len(checkpoint.read_text().splitlines()) <= 1
    snakemake(tmp_path, "--unlock", target)
    snakemake(tmp_path, target)
    log = log_path.read_text()
    assert "(from checkpoint)" not in log  # the interrupted group ran again whole
    assert _untimed(read_jsonl(traces)) == _untimed(
        read_jsonl(tiny_run / f"results/cdd/{MODEL}/nq_bigbench/Q100/traces.jsonl")
    )
    assert not checkpoint.exists()


def test_cdd_outputs_are_json_without_nan(tiny_run: Path) -> None:
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in a CDD output")

    for path in (tiny_run / f"results/cdd/{MODEL}").rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            json.loads(line, parse_constant=refuse)


@pytest.fixture(scope="module")
def first_question_run(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tiny run with EvidentialRAG and the CDD family on each dataset's first
    question only (evidential.n_questions, cdd.n_questions: 1), as the embedded default
    runs them: only their jobs, their policies and what reads them run again."""
    from .conftest import TINY, copy_run, planned_jobs

    workdir = tmp_path_factory.mktemp("first_question")
    copy_run(tiny_run, workdir)
    config = yaml.safe_load(TINY.read_text())
    for section in ("evidential", "cdd"):
        config[section]["n_questions"] = 1
    configfile = workdir / "first_question.yaml"
    configfile.write_text(yaml.safe_dump(config))
    proc = snakemake(workdir, configfile=configfile)
    jobs = planned_jobs(proc.stdout + proc.stderr)
    assert jobs["method_contexts"] == len(CONDITIONS), jobs  # nq_bigbench's five
    assert {"cdd_generate", "baselines_generate", "evidential_evaluate"} <= set(jobs), jobs
    assert "generate_context_prompts" not in jobs and "nli" not in jobs, jobs
    return workdir


def test_the_methods_on_the_first_question_only(first_question_run: Path) -> None:
    root = first_question_run
    for condition in CONDITIONS:
        contexts = _contexts(root, "nq_bigbench", condition)
        first = [r["qid"] for r in contexts if r["index"] < 1]
        cell = root / f"results/policies/{MODEL}/nq_bigbench/{condition}"
        for policy in ("EVID", "EVID_CB", *FAMILY):
            assert [r["qid"] for r in read_jsonl(cell / f"{policy}.jsonl")] == first, policy
        assert len(read_jsonl(cell / "P1.jsonl")) == len(contexts)
    # the TruthfulQA probe keeps its own size
    traces = read_jsonl(root / f"results/cdd/{MODEL}/truthfulqa/TQB/traces.jsonl")
    assert len(traces) == 3
    with (root / "results/metrics/nq_bigbench.csv").open(newline="") as handle:
        sizes = {
            r["policy"]: int(r["n"])
            for r in csv.DictReader(handle)
            if r["condition"] == "Q100" and r["metric"] == "answer_rate"
        }
    assert sizes["CDD"] == sizes["EVID"] == 1 and sizes["P1"] == 2, sizes
    note = (root / "results/tables/cdd_results.md").read_text()
    assert "on each dataset's first 1 question only" in note
    with (root / "results/tables/reproduction_claims.csv").open(newline="") as handle:
        verdicts = {r["Claim"][:30]: r["Verdict"] for r in csv.DictReader(handle)}
    # EVID over its one question against P0 over both: not compared
    assert verdicts["EvidentialRAG's refusal F1 is "] == "not comparable"
    # CDD's accuracies come from its diagnostics, which score P1 on CDD's questions
    assert verdicts["CDD's adversarial macro accura"] != "not comparable"
    assert verdicts["CDD pays in clean accuracy: be"] != "not comparable"
