"""Integration tests: the real workflow, real encoder and data, tiny config."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from grabrag.contexts.paired import PAIRED_CONDITIONS
from grabrag.core.io import read_jsonl
from grabrag.core.outputs import (
    CDD_DIAGNOSTICS_TABLE,
    METRICS,
    METRICS_OVER_DATASETS,
    SEED_METRICS,
)
from grabrag.pipeline.config import validate_config
from grabrag.report.specs import table_spec, tables

from .bigbench_standins import TRUTHFUL_QA_EXAMPLES
from .conftest import (
    AUDIT_MODEL_RULES,
    GPU_RULE_BENCHMARKS,
    MODEL_RULE_BENCHMARKS,
    MODEL_RULES,
    REPO,
    SCORING_RULES,
    TINY,
    copy_run,
    copy_workflow,
    planned_jobs,
    snakemake,
    snakemake_command,
)

pytestmark = pytest.mark.integration
DATASETS = ("squad", "nq_bigbench")
# tests/config/tiny.yaml: the micro model, one SQuAD question and two NQ questions.
MODEL = "micro"
QUESTIONS = {"squad": 1, "nq_bigbench": 2}
# tests/config/tiny.yaml runs EvidentialRAG and CDD on nq_bigbench only (CI time).
METHOD_DATASETS = ("nq_bigbench",)
PAPER_POLICIES = ("P0", "P1", "P2", "P3", "P4")
GENERATION_CONDITIONS = ("Q100", "Q50", "Q0", "QC", "QX")
POLICIES = ("P0", "P1", "P2", "P3", "P4", "EVID", "EVID_CB")
# As printed in tables (EVID_CB is shown as EVID+CB).
PRINTED_POLICIES = ("P0", "P1", "P2", "P3", "P4", "EVID", "EVID+CB")


# Wall-clock and memory measurements of the EvidentialRAG and CDD jobs (and what is
# derived from them): they differ between two runs of the same work.
_MEASURED = {
    "seconds",
    "question_seconds",
    "evaluator_seconds",
    "generator_seconds",
    "cb_seconds",
    "job_seconds",
    "peak_memory_mb",
    "relative_cost",
}


def _drop_measured(value):
    if isinstance(value, dict):
        return {
            k: _drop_measured(v)
            for k, v in value.items()
            if k not in _MEASURED and not k.endswith("seconds_per_query")
        }
    if isinstance(value, list):
        return [_drop_measured(v) for v in value]
    return value


def _without_timing(path: Path) -> bytes:
    """File content with the timing columns (wall-clock seconds) removed."""
    if "evidential" in path.parts or "cdd" in path.parts:
        if path.suffix == ".jsonl":
            rows = [json.loads(line) for line in path.read_text().splitlines()]
            return json.dumps(_drop_measured(rows)).encode()
        if path.suffix == ".json":
            return json.dumps(_drop_measured(json.loads(path.read_text()))).encode()
        return path.read_bytes()
    if path.stem == "evid_efficiency":  # a table of timings: keep its counting columns
        if path.suffix != ".csv":
            return b"(timings)"
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
        keep = ("model", "dataset", "policy", "queries", "logical LLM decisions", "executed passes")
        return json.dumps([{k: r[k] for k in keep} for r in rows]).encode()
    if "generation" not in path.parts:
        return path.read_bytes()
    if path.suffix == ".jsonl":
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        return json.dumps([{k: v for k, v in r.items() if k != "seconds"} for r in rows]).encode()
    report = json.loads(path.read_text())
    for cell in report.get("cells", {}).values():
        cell.pop("seconds", None)
    return json.dumps(report).encode()


def _outputs(root: Path) -> dict[str, bytes]:
    results = root / "results"
    return {
        str(p.relative_to(results)): _without_timing(p)
        for p in sorted(results.rglob("*"))
        if p.is_file() and "logs" not in p.parts and "benchmarks" not in p.parts
    }


def test_run_builds_every_condition(tiny_run: Path) -> None:
    for dataset in DATASETS:
        questions = read_jsonl(tiny_run / f"results/data/{dataset}/questions.jsonl")
        assert len(questions) == QUESTIONS[dataset]
        by_condition = {
            c: read_jsonl(tiny_run / f"results/contexts/{dataset}/{c}.jsonl")
            for c in PAIRED_CONDITIONS
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
            assert row["context_tokens"] <= 400
        assert all(r["passages"] == [] and r["context"] == "" for r in by_condition["Qclosed"])
        report = json.loads((tiny_run / f"results/contexts/{dataset}/report.json").read_text())
        assert report["kept"] == QUESTIONS[dataset]
        assert "of asset all-minilm-l6-v2" in report["tokenizer"]


def test_one_output_as_target_runs_only_its_inputs(tmp_path: Path) -> None:
    target = "results/data/squad/questions.jsonl"
    snakemake(tmp_path, target)
    assert (tmp_path / target).exists()
    assert not (tmp_path / "results/data/nq_bigbench").exists()
    assert not (tmp_path / "results/retrieval").exists()


def _planned_conditions(plan: str, rule: str) -> set[tuple[str, str]]:
    """(dataset, condition) of each planned job of `rule` in a dry run's output."""
    found = set()
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", plan):
        if not re.match(rf"(?:local)?rule {rule}:", block.strip()):
            continue
        dataset = re.search(r"wildcards:.*?\bdataset=([\w.]+)", block)
        condition = re.search(r"wildcards:.*?\bcondition=(\w+)", block)
        found.add((dataset.group(1) if dataset else "", condition.group(1) if condition else ""))
    return found


BUILT = ("squad", "nq_bigbench")
SWAPPED = {(d, c) for d in BUILT for c in ("QC", "QX")} | {("nq_bigbench_sensitivity43", "QC")}
PASSAGE_CELLS = {(d, c) for d in BUILT for c in ("Q100", "Q50", "Q0")}
VARIANT_Q0 = {("nq_bigbench_sensitivity43", "Q0")}
# the probe's one context job writes its two conditions and its closed-book rows
PROBE = {("truthfulqa", "TQB"), ("truthfulqa", "TQM"), ("truthfulqa", "Qclosed")}


@pytest.mark.parametrize(
    ("key", "value", "contexts", "generated"),
    [
        # Q50's gold slots: Q50 alone, in each dataset
        ("n_gold_q50", 2, {(d, "Q50") for d in BUILT}, {(d, "Q50") for d in BUILT}),
        # the cap: every condition with passages and the probe's, not the closed-book one
        (
            "max_context_tokens",
            300,
            PASSAGE_CELLS | VARIANT_Q0,
            PASSAGE_CELLS | SWAPPED | VARIANT_Q0 | PROBE,
        ),
        # passages per context: every condition, the closed-book one's question set too
        (
            "n_passages",
            4,
            PASSAGE_CELLS | VARIANT_Q0 | {(d, "Qclosed") for d in BUILT},
            PASSAGE_CELLS | SWAPPED | VARIANT_Q0 | {(d, "Qclosed") for d in BUILT},
        ),
    ],
)
def test_a_context_setting_reruns_only_the_conditions_it_changes(
    tiny_run: Path, tmp_path: Path, key: str, value: int, contexts: set, generated: set
) -> None:
    """Each context setting is a param only of the conditions whose rows read it: editing
    it plans those conditions' context jobs and the model cells that read them (then the
    policies, metrics, tables and figures), and nothing upstream or of another condition."""
    copy_run(tiny_run, tmp_path)
    config = yaml.safe_load(TINY.read_text())
    config["contexts"][key] = value
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(config))
    plan = snakemake(tmp_path, "-n", configfile=edited).stdout
    jobs = planned_jobs(plan)
    assert _planned_conditions(plan, "build_contexts") == contexts, plan
    model_cells = set()
    for rule in ("generate_context_prompts", "generate_closed_book"):
        model_cells |= {(d, c or "Qclosed") for d, c in _planned_conditions(plan, rule)}
    assert model_cells == generated
    swapped = {(d, "QC") for d, _ in _planned_conditions(plan, "qc_contexts")}
    swapped |= {(d, "QX") for d, _ in _planned_conditions(plan, "qx_contexts")}
    assert swapped == generated & SWAPPED
    assert ("truthfulqa_contexts" in jobs) == bool(generated & PROBE)
    assert not {"fetch_asset", "prepare_data", "embed", "retrieve", "entity_pool", "swaps"} & set(
        jobs
    ), plan


EXTENSION_RULES = {
    "qx_contexts",
    "evidential_evaluate",
    "evidential_generate",
    "evidential_sweep",
    "evidential_efficiency",
    "cdd_generate",
    "baselines_generate",
    "cdd_diagnostics",
}
EXTENSION_TABLES = ("hwsa_conditions", "table11b_ece15", "evid_", "cdd_")


def test_paper_config_plans_the_paper_only(tmp_path: Path) -> None:
    """config/paper.yaml is the paper: Q100, Q50, Q0, QC (+ Qclosed) and P0-P4 on three
    models x NQ and HotpotQA, plus Table 13's seed-43 rebuild of Llama x NQ (Q0, QC)."""
    proc = snakemake(tmp_path, "-n", configfile=REPO / "config/paper.yaml")
    for dataset in ("nq", "hotpotqa"):
        assert f"results/contexts/{dataset}/Q0.jsonl" in proc.stdout
    assert "squad" not in proc.stdout  # --configfile replaces the embedded default
    jobs = planned_jobs(proc.stdout)
    assert not EXTENSION_RULES & set(jobs), jobs
    assert jobs["generate_closed_book"] == 3 * 2
    assert jobs["generate_context_prompts"] == 3 * 2 * 4 + 2
    assert jobs["policy"] == 5 * (3 * 2 * 4 + 2)
    for marker in ("QX", "/EVID", "/CDD", "/CAI", "/SHAM", "/REFLECT", "/FILTER"):
        assert marker not in proc.stdout, marker
    for table in EXTENSION_TABLES:
        assert f"tables/{table}" not in proc.stdout, table
    assert "results/tables/table1_hwsa.csv" in proc.stdout


def test_extended_config_plans_every_extension(tmp_path: Path) -> None:
    proc = snakemake(tmp_path, "-n", configfile=REPO / "config/extended.yaml")
    jobs = planned_jobs(proc.stdout)
    assert EXTENSION_RULES <= set(jobs), jobs
    # 3 models x 2 datasets x 5 conditions for each of EvidentialRAG's 3 construction
    # seeds, the sensitivity variant's Q0 + QC, and the TruthfulQA probe's two conditions per
    # model (one draw), on which every one of the 13 policies runs
    assert jobs["generate_context_prompts"] == 3 * 3 * 2 * 5 + 2 + 3 * 2
    assert jobs["policy"] == 13 * 3 * 3 * 2 * 5 + 5 * 2 + 13 * 3 * 2
    # the 14 tables of the metrics alone and 7 of EvidentialRAG's sweeps and CDD's
    # diagnostics (with the metrics or alone), per further seed and across the seeds
    assert jobs["across_seeds_table"] == 21 and jobs["seed_table"] == 2 * 21
    assert "pooled_metrics" not in jobs  # seeds_redraw: construction pools nothing
    assert "results/tables/across_seeds/evid_results.csv" in proc.stdout
    assert jobs["truthfulqa_questions"] == jobs["truthfulqa_contexts"] == 1
    assert "results/tables/truthfulqa_probe.csv" in proc.stdout
    for table in ("hwsa_conditions", "table11b_ece15", "evid_results", "cdd_results"):
        assert f"results/tables/{table}.csv" in proc.stdout, table


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


def test_killed_generation_job_resumes_and_matches_an_uninterrupted_run(
    tiny_run: Path, tmp_path: Path
) -> None:
    shutil.copytree(tiny_run / "results", tmp_path / "results")
    shutil.copytree(
        tiny_run / ".snakemake",
        tmp_path / ".snakemake",
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns("locks", "incomplete"),
    )
    cell_dir = tmp_path / f"results/generation/{MODEL}/nq_bigbench/Q100"
    shutil.rmtree(cell_dir)
    # relative to the working directory: Snakemake matches an absolute target against the
    # rules' relative outputs only when it is spelled the same way
    target = str((cell_dir / "P0.jsonl").relative_to(tmp_path))
    checkpoint = cell_dir / ".checkpoint.jsonl"
    cmd = snakemake_command(tmp_path, target)
    job = subprocess.Popen(
        cmd, cwd=REPO, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 600
    finished_calls = 0
    while time.monotonic() < deadline and job.poll() is None:
        if checkpoint.exists():
            # its first line records the settings the rows are made under
            finished_calls = len(checkpoint.read_text().splitlines()) - 1
            if finished_calls >= 3:  # question 0 done, question 1 in flight
                break
        time.sleep(0.02)
    assert job.poll() is None, "the job finished before it could be killed"
    os.killpg(job.pid, signal.SIGKILL)
    job.wait()
    # The tiny model decodes batch: 2, so each question's three calls are decoded as one
    # group (a question's prompts stay together), which reaches the checkpoint whole or is
    # redone whole.
    kept = [
        line for line in checkpoint.read_text().splitlines(keepends=True)[1:] if line.endswith("\n")
    ]
    assert 3 <= len(kept) < 6
    assert not (cell_dir / "P2.jsonl").exists()
    snakemake(tmp_path, "--unlock", target)
    snakemake(tmp_path, target)
    log = (tmp_path / f"results/logs/generate/{MODEL}/nq_bigbench/Q100.log").read_text()
    # question 0 (its 3 calls) was not generated again
    assert log.count("(from checkpoint)") == 1
    for prompt in ("P0", "P1", "P2"):
        relative = f"generation/{MODEL}/nq_bigbench/Q100/{prompt}.jsonl"
        assert _without_timing(tmp_path / "results" / relative) == _without_timing(
            tiny_run / "results" / relative
        )
    assert not checkpoint.exists()


def test_qc_condition_swaps_summary_and_audit(tiny_run: Path) -> None:
    total_rows = 0
    for dataset in DATASETS:
        summary = json.loads((tiny_run / f"results/qc/{dataset}/summary.json").read_text())
        assert summary["questions"] == QUESTIONS[dataset] and summary["leaks"] == 0
        swaps = read_jsonl(tiny_run / f"results/qc/{dataset}/swaps.jsonl")
        assert len(swaps) == QUESTIONS[dataset]
        assert all(s["status"] == "accepted" or s["skip_reason"] for s in swaps)
        rows = read_jsonl(tiny_run / f"results/contexts/{dataset}/QC.jsonl")
        assert len(rows) == summary["eligible"]
        total_rows += len(rows)
        for row in rows:
            roles = sorted(p["role"] for p in row["passages"])
            assert roles == ["hard_negative"] * 4 + ["swapped_gold"]
            assert not row["answer_in_context"] and row["replacement_in_context"]
            assert row["tier"] in {"1", "1b", "2", "3", "4"}
        cell = read_jsonl(tiny_run / f"results/generation/{MODEL}/{dataset}/QC/P1.jsonl")
        assert [r["qid"] for r in cell] == [r["qid"] for r in rows]
        with (tiny_run / f"results/qc/{dataset}/audit_sample.csv").open(newline="") as handle:
            audit = list(csv.DictReader(handle))
        # the audit frame is the QC rows (fewer than audit_size here: all of them)
        assert sorted(r["qid"] for r in audit) == sorted(r["qid"] for r in rows)
        assert all(r["quality"] == "" for r in audit)
        with (tiny_run / f"results/qc/{dataset}/swaps.csv").open(newline="") as handle:
            table = list(csv.DictReader(handle))
        assert [r["qid"] for r in table] == [s["qid"] for s in swaps]
        assert all(r["skip_reason"] or r["modified_passage"] for r in table)
    assert total_rows > 0, "no QC row at all: the tiny config must exercise the QC condition"
    bigbench = json.loads((tiny_run / "results/qc/nq_bigbench/summary.json").read_text())
    assert "both_swapped_share" in bigbench["reference_comparison"]


def test_filled_audit_recomputes_hwsa_on_the_clean_subset(tiny_run: Path, tmp_path: Path) -> None:
    shutil.copytree(tiny_run / "results", tmp_path / "results")
    shutil.copytree(
        tiny_run / ".snakemake",
        tmp_path / ".snakemake",
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns("locks", "incomplete"),
    )
    source = tmp_path / "results/qc/nq_bigbench/audit_sample.csv"
    with source.open(newline="") as handle:
        audit = list(csv.DictReader(handle))
    assert audit
    for k, row in enumerate(audit):
        row["quality"] = "broken" if k == 0 else "fluent"
    filled = tmp_path / "audit_filled.csv"
    with filled.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(audit[0]))
        writer.writeheader()
        writer.writerows(audit)
    config = yaml.safe_load(TINY.read_text())
    config["qc"]["audit_filled"] = {"nq_bigbench": str(filled)}
    configfile = tmp_path / "audited.yaml"
    configfile.write_text(yaml.safe_dump(config))
    proc = snakemake(
        tmp_path,
        "results/tables/table5_swap_examples.csv",
        "results/tables/table6_audit.csv",
        "results/tables/audit_quality.csv",
        configfile=configfile,
    )
    # Only the audit's own jobs run on a finished run (Table 5 groups its examples by the
    # ratings, Table 6 and the quality table read them): nothing upstream of the policies.
    ran = {m.group(1) for m in re.finditer(r"rule (\w+):", proc.stdout + proc.stderr)}
    assert ran == {"audit_hwsa", "table"}, ran
    with (tmp_path / "results/qc/nq_bigbench/audit_hwsa.csv").open(newline="") as handle:
        cells = list(csv.DictReader(handle))
    # Every policy that ran on the dataset, P0-P4 included (the paper's Table 6).
    assert [r["policy"] for r in cells][:5] == ["P0", "P1", "P2", "P3", "P4"]
    qc_rows = read_jsonl(tmp_path / "results/contexts/nq_bigbench/QC.jsonl")
    assert all(int(r["n_all"]) == len(qc_rows) for r in cells)
    assert all(int(r["n_clean"]) == len(audit) - 1 for r in cells)
    for cell in cells:
        decisions = read_jsonl(
            tmp_path / f"results/policies/{MODEL}/nq_bigbench/QC/{cell['policy']}.jsonl"
        )
        clean = [d for d in decisions if d["qid"] in {r["qid"] for r in audit[1:]}]
        expected = sum(d["decision"] == "answer" for d in clean) / len(clean)
        assert float(cell["hwsa_qc_clean"]) == pytest.approx(expected)
    table = (tmp_path / "results/tables/table6_audit.md").read_text()
    assert table.startswith("Table 6:") and "Macro avg (P0-P4)" in table
    # preserved signs over the P0-P4 cells (one model x dataset)
    assert re.search(r"(All 5|\d of 5) delta signs preserved\.", table), table
    assert (tmp_path / "results/tables/table6_audit.tex").exists()
    quality = (tmp_path / "results/tables/audit_quality.md").read_text()
    assert quality.startswith("QC quality audit") and "broken rate by type" in quality
    examples = (tmp_path / "results/tables/table5_swap_examples.csv").read_text()
    assert "broken" in examples and "fluent" in examples  # grouped by the audit's ratings


def test_policy_cells_and_their_rules(tiny_run: Path) -> None:
    for dataset in DATASETS:
        base = tiny_run / f"results/policies/{MODEL}/{dataset}"
        for condition in GENERATION_CONDITIONS:
            contexts = read_jsonl(tiny_run / f"results/contexts/{dataset}/{condition}.jsonl")
            p1 = {
                r["qid"]: r
                for r in read_jsonl(
                    tiny_run / f"results/generation/{MODEL}/{dataset}/{condition}/P1.jsonl"
                )
            }
            for policy in ("P0", "P1", "P2", "P3", "P4"):
                rows = read_jsonl(base / f"{condition}/{policy}.jsonl")
                assert [r["qid"] for r in rows] == [r["qid"] for r in contexts]
                for row in rows:
                    assert row["decision"] in ("answer", "abstain", None)
                    if policy in ("P3", "P4") and row["decision"] == "answer":
                        # P3/P4 only ever report P1's answer and confidence
                        assert row["answer"] == p1[row["qid"]]["answer"]
                        assert row["confidence"] == p1[row["qid"]]["confidence"]
                    if row["decision"] == "abstain" and row["rule"] in (
                        "p1_abstained",
                        "f1_conflict",
                        "nli_contradiction",
                    ):
                        assert row["confidence"] == 0


def test_p3_sweep_grid(tiny_run: Path) -> None:
    for dataset in DATASETS:
        path = tiny_run / f"results/policies/{MODEL}/{dataset}/P3_sweep.csv"
        with path.open(newline="") as handle:
            sweep = list(csv.DictReader(handle))
        assert len(sweep) == 8 * 6


def test_policy_jobs_make_no_llm_call(tiny_run: Path, tmp_path: Path) -> None:
    """Rerun one cell of every policy (each runs the same code in every cell) and a P3
    sweep with llama_cpp made unimportable: they must all succeed, and no generation or
    NLI job may be scheduled."""
    copy_run(tiny_run, tmp_path)
    poison = tmp_path / "poison" / "llama_cpp"
    poison.mkdir(parents=True)
    (poison / "__init__.py").write_text("raise ImportError('a policy job tried to load the LLM')\n")
    cell = tiny_run / f"results/policies/{MODEL}/nq_bigbench/QC"
    # P0-P4, EVID, EVID_CB, CDD, CDD_ALPHA and the four baselines
    policies = sorted(path.stem for path in cell.glob("*.jsonl"))
    assert len(policies) == 13, policies
    targets = [str((cell / f"{policy}.jsonl").relative_to(tiny_run)) for policy in policies]
    targets.append(f"results/policies/{MODEL}/nq_bigbench/P3_sweep.csv")
    proc = snakemake(
        tmp_path,
        *targets,
        "--forcerun",
        "policy",
        "p3_sweep",
        env={"PYTHONPATH": str(poison.parent)},
    )
    jobs = planned_jobs(proc.stdout + proc.stderr)
    # --forcerun reruns every policy job the targets need: the sweep also reads P1 at Q100
    assert jobs.get("policy") == len(policies) + 1 and jobs.get("p3_sweep") == 1, jobs
    assert not MODEL_RULES & set(jobs), jobs


TABLE_NAMES = (
    "table1_hwsa",
    "table2_policies",
    "table3_qc_sources",
    "table7_hwsa_ci",
    "table8_fac_ci",
    "table9_qc_sources",
    "table10_aurc",
    "table11_ece",
    "table11b_ece15",
    "table12_p3_sweep",
    "normalised_hwsa",
    "selection_bias",
    "parse_failures",
    "hwsa_conditions",
    "evid_results",
    "evid_efficiency",
    "evid_lambda_sweep",
    "evid_tau_sweep",
    "evid_ablation",
    "evid_evaluator",
    "table13_seed_sensitivity",
    "table4_ner_labels",
    "table5_swap_examples",
    "table12b_cutoff_sweep",
    "closed_book",
    "section6_aggregates",
    "knowledge_context",
)
FIGURE_NAMES = (
    "abstention_by_condition",
    "abstention_by_dataset",
    "p3_sweep",
    "risk_coverage",
    "reliability",
    "qc_breakdown",
    "lambda_sweep",
)


def test_results_load_with_one_call(tiny_run: Path) -> None:
    """The README's "Loading results": every decision row names its cell, and the tidy
    table files hold the numbers the printed tables show."""
    import polars as pl

    from grabrag.core.outputs import read_metrics
    from grabrag.report.tabular import TIDY_SCHEMA

    decisions = pl.scan_ndjson(tiny_run / "results/policies/*/*/*/*.jsonl").collect()
    files = sorted((tiny_run / "results/policies").glob("*/*/*/*.jsonl"))
    assert len(decisions) == sum(len(read_jsonl(path)) for path in files) > 0
    for path in files:
        model, dataset, condition = path.parts[-4:-1]
        for row in read_jsonl(path):
            assert (row["model"], row["dataset"], row["condition"], row["policy"]) == (
                model,
                dataset,
                condition,
                path.stem,
            )
    tables = pl.read_csv(tiny_run / "results/tables/*.tidy.csv", schema=TIDY_SCHEMA)
    # Tables 4 and 5 print only text (labels, excerpts): their tidy files have no rows.
    assert set(TABLE_NAMES) - {"table4_ner_labels", "table5_swap_examples"} <= set(tables["table"])
    metrics = read_metrics(sorted((tiny_run / "results/metrics").glob("*.csv")))
    hwsa = metrics.filter(pl.col("metric") == "hwsa", pl.col("condition") == "QC")
    shown = tables.filter(
        pl.col("table") == "table7_hwsa_ci", pl.col("quantity") == "HwSA(QC) [95% CI]"
    )
    # a policy that did not run on a dataset (EVID on squad here) has a blank cell, no n
    shown = shown.filter(pl.col("n").is_not_null())
    assert len(shown) > 0
    for tidy in shown.iter_rows(named=True):
        (row,) = hwsa.filter(
            pl.col("model") == tidy["model"],
            pl.col("dataset") == tidy["dataset"],
            pl.col("policy") == tidy["policy"],
        ).iter_rows(named=True)
        assert (tidy["estimate"], tidy["ci_low"], tidy["ci_high"], tidy["n"]) == (
            row["value"],
            row["ci_low"],
            row["ci_high"],
            row["n"],
        )


def test_tables_and_figures(tiny_run: Path) -> None:
    for name in TABLE_NAMES:
        for suffix in ("csv", "md", "tex", "tidy.csv"):
            path = tiny_run / f"results/tables/{name}.{suffix}"
            assert path.stat().st_size > 0, path
    with (tiny_run / "results/tables/table7_hwsa_ci.csv").open(newline="") as handle:
        table7 = list(csv.DictReader(handle))
    assert {r["policy"] for r in table7} == set(PRINTED_POLICIES)
    assert {r["dataset"] for r in table7} == set(DATASETS)
    with (tiny_run / "results/tables/table12_p3_sweep.csv").open(newline="") as handle:
        assert [float(r["F1"]) for r in csv.DictReader(handle)] == [
            0.0,
            0.2,
            0.4,
            0.6,
            0.7,
            0.8,
            0.9,
            1.0,
        ]
    for name in FIGURE_NAMES:
        assert (tiny_run / f"results/figures/{name}.pdf").read_bytes()[:4] == b"%PDF"
        assert (tiny_run / f"results/figures/{name}.png").read_bytes()[:4] == b"\x89PNG"


def test_seed_sensitivity_variant_and_table13(tiny_run: Path) -> None:
    variant = "nq_bigbench_sensitivity43"
    base_q0 = read_jsonl(tiny_run / "results/contexts/nq_bigbench/Q0.jsonl")
    variant_q0 = read_jsonl(tiny_run / f"results/contexts/{variant}/Q0.jsonl")
    # the same questions, shuffled and swapped with Random(43 + i)
    assert [r["qid"] for r in variant_q0] == [r["qid"] for r in base_q0]
    summary = json.loads((tiny_run / f"results/qc/{variant}/summary.json").read_text())
    assert (summary["questions"], summary["seed"]) == (2, 43)
    # only Q0 and QC are generated; the closed-book answers are the base dataset's
    generated = tiny_run / f"results/generation/{MODEL}/{variant}"
    assert sorted(p.name for p in generated.iterdir() if p.is_dir()) == ["Q0", "QC"]
    assert not (tiny_run / f"results/data/{variant}").exists()
    assert not (tiny_run / f"results/retrieval/{variant}").exists()
    with (tiny_run / "results/tables/table13_seed_sensitivity.csv").open(newline="") as handle:
        table13 = list(csv.DictReader(handle))
    assert [(r["policy"], r["condition"]) for r in table13] == [
        (p, c) for p in PAPER_POLICIES for c in ("Q0", "QC")
    ]
    for row in table13:
        delta = abs(float(row["seed 42"]) - float(row["seed 43"]))
        assert abs(float(row["|delta| (pp)"]) - delta) < 0.006, row
    # the paper's columns; the cell and the denominators (Q0: every question) in the note
    assert list(table13[0]) == ["policy", "condition", "seed 42", "seed 43", "|delta| (pp)"]
    printed = (tiny_run / "results/tables/table13_seed_sensitivity.md").read_text()
    assert f"{MODEL} on nq_bigbench; questions per cell, seed 42: Q0 2, QC " in printed


def test_report_stage_is_incremental(tiny_run: Path, tmp_path: Path) -> None:
    copy_run(tiny_run, tmp_path)
    # one figure named as a target: only that figure
    (tmp_path / "results/figures/p3_sweep.pdf").unlink()
    plan = snakemake(tmp_path, "-n", "results/figures/p3_sweep.pdf").stdout
    assert planned_jobs(plan) == {"figure": 1}, plan
    shutil.copy2(tiny_run / "results/figures/p3_sweep.pdf", tmp_path / "results/figures")
    # the bootstrap resample count: metrics, tables and figures, never a generation job
    config = yaml.safe_load(TINY.read_text())
    config["bootstrap"] = {"n_resamples": 2000}
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(config, sort_keys=False))  # the datasets' order kept
    plan = snakemake(tmp_path, "-n", configfile=edited).stdout
    # the tables and figures that read the metrics (or the CDD diagnostics) or resample
    # themselves (the TruthfulQA probe's) rerun, those that read the decisions, the sweeps
    # or nothing do not
    # the registered tables (the reproduction report reads three of them, below)
    produced = {p.stem: p for p in (tiny_run / "results/tables").glob("*.md") if p.stem in tables()}
    resampled = {METRICS, SEED_METRICS, METRICS_OVER_DATASETS, CDD_DIAGNOSTICS_TABLE}
    reading = [
        n
        for n in produced
        if set(table_spec(n).reads) & resampled or "bootstrap" in table_spec(n).settings
    ]
    assert "truthfulqa_probe" in reading
    assert 0 < len(reading) < len(produced)
    assert planned_jobs(plan) == {
        "metrics": 3,
        "abstention_over_datasets": 1,
        "cdd_diagnostics": 1,
        "table": len(reading),
        "table_pages": 1,  # the tables' pages in the report's folder
        "reproduction": 1,  # the papers' published numbers against the run's
        "figure": 3,  # Figure 2 (both forms) and the QC breakdown
        "all": 1,
    }, plan
    # the plotting code, edited in a copy of the workflow: figures only; touching it
    # without a change reruns nothing (comment-only edits: tests/test_code_reruns.py)
    source = copy_workflow(tmp_path / "workflow_copy")
    plotting = source / "workflow/grabrag/report/figures.py"
    plotting.touch()
    plan = snakemake(tmp_path, "-n", snakefile=source / "Snakefile").stdout
    assert planned_jobs(plan) == {}, plan
    plotting.write_text(plotting.read_text() + "\n_AN_EDIT_OF_THE_PLOTTING_CODE = True\n")
    plan = snakemake(tmp_path, "-n", snakefile=source / "Snakefile").stdout
    assert planned_jobs(plan) == {"figure": 7, "all": 1}, plan


def test_report_html(tiny_run: Path, tmp_path: Path) -> None:
    copy_run(tiny_run, tmp_path)
    snakemake(tmp_path, "--report", str(tmp_path / "report.zip"))
    import zipfile

    archive = zipfile.ZipFile(tmp_path / "report.zip")
    names = archive.namelist()
    for figure in FIGURE_NAMES:
        assert any(n.endswith(f"/{figure}.png") for n in names), figure
    for table in TABLE_NAMES:  # each table as its page (tests/test_report_pages.py opens them)
        assert any(n.endswith(f"/{table}.html") for n in names), table
    (page,) = [n for n in names if n.endswith("report.html")]
    html = archive.read(page).decode()
    pages = "".join(
        archive.read(n).decode()
        for n in names
        if n.endswith(".html") and not n.endswith("report.html")
    )
    # each table's page and each figure has its own caption, under Tables and Figures
    assert "Table 1: HwSA at Q0 vs QC on paired QC-eligible questions" in pages
    assert "Table 13: seed sensitivity of HwSA" in pages
    assert "Table 5: QC swap examples" in pages and "Section 6 aggregates" in pages
    assert "Figure 2: abstention rate by context condition, averaged over the datasets" in html
    assert '"Tables"' in html and '"Figures"' in html
    assert "mailto:HwSA" not in html + pages  # HwSA@QC stays text, not an e-mail link
    # captions that name a setting render it from the config
    assert "Table 12: P3 sensitivity to the F1 threshold, confidence cutoff 50 (%)" in pages
    assert "at the configured confidence cutoff (50)" in html


def test_qx_condition_pairs_the_gold_passage_with_its_swapped_twin(tiny_run: Path) -> None:
    total = 0
    for dataset in DATASETS:
        qc = read_jsonl(tiny_run / f"results/contexts/{dataset}/QC.jsonl")
        qx = read_jsonl(tiny_run / f"results/contexts/{dataset}/QX.jsonl")
        assert [r["qid"] for r in qx] == [r["qid"] for r in qc]
        total += len(qx)
        for row, twin in zip(qx, qc, strict=True):
            roles = sorted(p["role"] for p in row["passages"])
            assert roles == [
                "gold",
                "hard_negative",
                "hard_negative",
                "hard_negative",
                "swapped_gold",
            ]
            assert row["condition"] == "QX" and row["replacement"] == twin["replacement"]
            swapped = next(p for p in row["passages"] if p["role"] == "swapped_gold")
            assert swapped["pid"] in {p["pid"] for p in twin["passages"]}
            assert row["context_tokens"] <= 400
        report = json.loads((tiny_run / f"results/contexts/{dataset}/QX_report.json").read_text())
        assert report["qx_rows"] == len(qx)
        for policy in POLICIES if dataset in METHOD_DATASETS else PAPER_POLICIES:
            rows = read_jsonl(tiny_run / f"results/policies/{MODEL}/{dataset}/QX/{policy}.jsonl")
            assert [r["qid"] for r in rows] == [r["qid"] for r in qx]
    assert total > 0, "no QX row at all: the tiny config must exercise the QX condition"


def test_evidential_evaluations_decisions_and_accounting(tiny_run: Path) -> None:
    from grabrag.policies.rows import EVIDENTIAL_RULES

    routes = set()
    assert not (tiny_run / f"results/evidential/{MODEL}/squad").exists()
    for dataset in METHOD_DATASETS:
        base = tiny_run / f"results/evidential/{MODEL}/{dataset}"
        for condition in GENERATION_CONDITIONS:
            contexts = read_jsonl(tiny_run / f"results/contexts/{dataset}/{condition}.jsonl")
            evaluations = read_jsonl(base / f"{condition}/evaluations.jsonl")
            assert [r["qid"] for r in evaluations] == [r["qid"] for r in contexts]
            for row, ctx in zip(evaluations, contexts, strict=True):
                k = len(ctx["passages"])
                assert k == 5 and len(row["evaluations"]) == k == row["evaluator_passes"]
                # stored in fold order (independent of the context's shuffle)
                entries = row["evaluations"]
                assert [e["fold_rank"] for e in entries] == list(range(1, k + 1))
                assert sorted(e["position"] for e in entries) == list(range(1, k + 1))
                assert {e["status"] for e in row["evaluations"]} <= {"ok", "repaired", "failed"}
            for policy in ("EVID", "EVID_CB"):
                rows = read_jsonl(base / f"{condition}/{policy}.jsonl")
                decisions = read_jsonl(
                    tiny_run / f"results/policies/{MODEL}/{dataset}/{condition}/{policy}.jsonl"
                )
                assert [r["qid"] for r in rows] == [r["qid"] for r in decisions]
                for row, decision in zip(rows, decisions, strict=True):
                    routes.add(row["route"])
                    # EVID_CB counts its closed-book pass
                    passes = 5 + 1 + (policy == "EVID_CB")
                    assert row["logical_decisions"] == row["executed_passes"] == passes
                    assert abs(sum(row["fused_b"]) + row["u_global"] - 1) < 1e-9
                    assert decision["rule"] in EVIDENTIAL_RULES
                    assert decision["route"] == row["route"]
                    if decision["decision"] == "answer":
                        assert row["route"] == "direct"
                        assert decision["answer"] == row["generator_answer"]
                        assert abs(decision["confidence"] - 100 * max(row["fused_b"])) < 1e-9
                    elif decision["decision"] == "abstain":
                        assert decision["confidence"] == 0
                    # Eq. 27 on every route, for EvidentialRAG's ECE
                    assert (
                        abs(decision["fused_confidence"] - 100 * max(row["fused_b"], default=0))
                        < 1e-9
                    )
            assert not (base / condition / ".evaluate_checkpoint.jsonl").exists()
            assert not (base / condition / ".generate_checkpoint.jsonl").exists()
        report = json.loads((base / "QC/evaluate_report.json").read_text())
        assert report["peak_memory_mb"] > 0 and report["evaluator"] == MODEL
        efficiency = json.loads((base / "efficiency.json").read_text())
        # naive RAG (P0) is the base of the relative cost, P1 beside it
        assert set(efficiency["policies"]) == {"P0", "P1", "EVID", "EVID_CB"}
        assert efficiency["policies"]["P0"]["relative_cost"] == 1.0
        assert efficiency["policies"]["EVID"]["logical_decisions"] == 6
        assert efficiency["policies"]["EVID_CB"]["logical_decisions"] == 7
        p0, p1 = efficiency["policies"]["P0"], efficiency["policies"]["P1"]
        assert p1["relative_cost"] == pytest.approx(
            p1["seconds_per_query"] / p0["seconds_per_query"]
        )
    assert routes <= {"direct", "conflict_aware", "abstain"}


def test_evidential_sweep_grid(tiny_run: Path) -> None:
    for dataset in METHOD_DATASETS:
        path = tiny_run / f"results/evidential/{MODEL}/{dataset}/sweep.csv"
        with path.open(newline="") as handle:
            sweep = list(csv.DictReader(handle))
        settings = 5 * 3 + 3 + 1  # lambda x (tau1, tau2), no_fusion x taus, no_routing
        assert len(sweep) == 2 * settings * (len(GENERATION_CONDITIONS) + 1)
        grid = {
            (r["rule"], r["tau1"], r["tau2"])
            for r in sweep
            if r["variant"] == "evid" and r["policy"] == "EVID"
        }
        assert grid == {
            (rule, tau1, tau2)
            for rule in ("dempster", "0", "0.3", "0.6", "1")
            for tau1, tau2 in (("0.2", "0.5"), ("0.35", "0.65"), ("0.5", "0.8"))
        }
        pooled = [r for r in sweep if r["condition"] == "pooled"]
        assert len(pooled) == 2 * settings and all(r["refusal_f1"] != "" for r in pooled)


def test_model_calling_rules_write_benchmarks(tiny_run: Path) -> None:
    for rule, pattern in MODEL_RULE_BENCHMARKS.items():
        if rule in AUDIT_MODEL_RULES:
            continue  # off in the tiny run (tests/test_reask.py checks its benchmark)
        # the closed-book pattern names its condition and ignores this one
        table = tiny_run / pattern.format(model=MODEL, dataset="nq_bigbench", condition="Q100")
        header, values = table.read_text().splitlines()[:2]
        assert header.split("\t")[:3] == ["s", "h:m:s", "max_rss"], rule
        assert float(values.split("\t")[0]) > 0, rule
    # the probe's scoring, on the probe's own dataset
    for rule in SCORING_RULES:
        table = tiny_run / GPU_RULE_BENCHMARKS[rule].format(model=MODEL, dataset="truthfulqa")
        assert table.read_text().splitlines()[0].split("\t")[:3] == ["s", "h:m:s", "max_rss"]


def test_every_declared_output_kind_is_where_its_pattern_says(tiny_run: Path) -> None:
    """The output kinds the tables and figures read (grabrag.core.outputs) are the files
    the rules write: each pattern finds files in the finished run."""
    from grabrag.core.outputs import AUDITED_DATASETS, outputs

    for name, spec in outputs().items():
        if spec.pattern is None or spec.datasets == AUDITED_DATASETS:
            continue  # a file the config names; the tiny config audits no dataset
        found = list(tiny_run.glob(re.sub(r"{\w+}", "*", spec.pattern)))
        assert found, name


def test_truthfulqa_probe_runs_every_policy_clean_and_injected(tiny_run: Path) -> None:
    """The tiny config's probe on three questions: the stand-in of BIG-bench's file read
    whole (every row, none malformed), paired contexts, every configured policy's decisions
    at both conditions, and the table over them."""
    report = json.loads((tiny_run / "results/data/truthfulqa/report.json").read_text())
    rows_in_file = len(TRUTHFUL_QA_EXAMPLES)
    assert (report["rows"], report["malformed_skipped"], report["questions"]) == (
        rows_in_file,
        0,
        3,
    )
    questions = read_jsonl(tiny_run / "results/data/truthfulqa/questions.jsonl")
    qids = [q["qid"] for q in questions]
    for question in questions:
        assert question["false_answers"] and question["best_answer"] in question["true_answers"]
    for condition, role in (("TQM", "misconception"), ("TQB", "best_answer")):
        rows = read_jsonl(tiny_run / f"results/contexts/truthfulqa/{condition}.jsonl")
        assert [r["qid"] for r in rows] == qids
        for row, question in zip(rows, questions, strict=True):
            [passage] = row["passages"]
            shown = question["false_answers"][0] if condition == "TQM" else question["best_answer"]
            assert (passage["role"], passage["text"]) == (role, shown)
    configured = validate_config(yaml.safe_load(TINY.read_text()))["policies"]["names"]
    for condition in ("TQB", "TQM"):
        for policy in configured:
            cell = f"results/policies/{MODEL}/truthfulqa/{condition}/{policy}.jsonl"
            rows = read_jsonl(tiny_run / cell)
            assert [r["qid"] for r in rows] == qids, (condition, policy)
    with (tiny_run / "results/tables/truthfulqa_probe.tidy.csv").open(newline="") as handle:
        tidy = list(csv.DictReader(handle))
    assert {r["policy"] for r in tidy} == set(configured)
    categories = [r["row"] for r in tidy if r["policy"] == "P1" and r["quantity"] == "n"]
    assert categories[-1] == "category=all"
    assert (
        (tiny_run / "results/tables/truthfulqa_probe.md")
        .read_text()
        .startswith("CDD's TruthfulQA misconception-injection probe")
    )
