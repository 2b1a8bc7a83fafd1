"""Several construction seeds: pooling their questions for the metrics, and a table's
numbers across the seeds (mean +/- sd beside the pooled estimate)."""

from __future__ import annotations

import json
import math
import re
import statistics
import subprocess
import zipfile
from pathlib import Path

import polars as pl
import pytest
import yaml

from grabrag.core.errors import DataError
from grabrag.core.io import read_jsonl
from grabrag.core.outputs import read_metrics
from grabrag.evaluation.evaluate import evaluate
from grabrag.evaluation.seeds import pool_seeds
from grabrag.report.across_seeds import MEAN_SD, POOLED, SEEDS, across_seeds, mean_sd
from grabrag.report.tabular import TIDY_SCHEMA, tidy_frame

from .conftest import (
    AUDIT_MODEL_RULES,
    MODEL_RULES,
    REPO,
    TINY,
    copy_run,
    planned_jobs,
    snakemake_command,
)


def _contexts(qids: list[str]) -> list[dict]:
    return [{"qid": q, "index": i, "answers": ["x"]} for i, q in enumerate(qids)]


def _decisions(qids: list[str], answered: set[str]) -> list[dict]:
    return [
        {"qid": q, "decision": "answer" if q in answered else "abstain", "answer": "x"}
        for q in qids
    ]


def test_pooled_questions_are_every_seeds_questions_named_by_their_seed() -> None:
    # question "b" is drawn by both seeds: two draws, two pooled questions
    first, second = ["a", "b"], ["b", "c", "d"]
    key = ("m", "ds", "Q0", "P1")
    decisions, contexts = pool_seeds(
        {42: {key: _decisions(first, {"a"})}, 7: {key: _decisions(second, {"b", "c"})}},
        {42: {("ds", "Q0"): _contexts(first)}, 7: {("ds", "Q0"): _contexts(second)}},
    )
    assert [r["qid"] for r in contexts[("ds", "Q0")]] == [
        "a@seed42",
        "b@seed42",
        "b@seed7",
        "c@seed7",
        "d@seed7",
    ]
    assert [r["qid"] for r in decisions[key]] == [r["qid"] for r in contexts[("ds", "Q0")]]
    rows = evaluate(decisions, contexts, n_resamples=50, seed=1)
    # the answer rate over the pooled questions is 3 of 5, not the mean of 1/2 and 2/3
    rates = [r for r in rows if r["metric"] == "answer_rate" and r["condition"] == "Q0"]
    assert len(rates) == 1
    assert rates[0]["value"] == pytest.approx(3 / 5)
    assert rates[0]["n"] == 5


def test_pooled_questions_keep_a_methods_first_questions_per_seed() -> None:
    """A policy run on each dataset's first question only has that question of every
    seed's build in the pooled cell: the limit counts within each seed."""
    first, second = ["a", "b"], ["c", "d"]
    key = ("m", "ds", "Q0", "CAI")
    decisions, contexts = pool_seeds(
        {42: {key: _decisions(first[:1], {"a"})}, 7: {key: _decisions(second[:1], set())}},
        {42: {("ds", "Q0"): _contexts(first)}, 7: {("ds", "Q0"): _contexts(second)}},
    )
    rows = evaluate(decisions, contexts, n_resamples=20, question_limits={"CAI": 1})
    (rate,) = [r for r in rows if r["metric"] == "answer_rate"]
    assert rate["n"] == 2 and rate["value"] == pytest.approx(1 / 2)


def test_pooling_refuses_seeds_with_other_cells() -> None:
    key, other = ("m", "ds", "Q0", "P1"), ("m", "ds", "Q0", "P2")
    with pytest.raises(DataError, match="seed 7 has other cell keys than seed 42"):
        pool_seeds(
            {42: {key: _decisions(["a"], set())}, 7: {other: _decisions(["b"], set())}},
            {42: {("ds", "Q0"): _contexts(["a"])}, 7: {("ds", "Q0"): _contexts(["b"])}},
        )


def _tidy(rows: list[tuple[str, str, float | None, float | None, float | None]]) -> pl.DataFrame:
    records = [
        {
            "table": "t",
            "model": "m",
            "dataset": "ds",
            "policy": policy,
            "condition": None,
            "row": None,
            "quantity": quantity,
            "estimate": estimate,
            "ci_low": low,
            "ci_high": high,
            "n": 3,
        }
        for policy, quantity, estimate, low, high in rows
    ]
    return pl.DataFrame(records, schema=TIDY_SCHEMA)


def test_across_seeds_is_mean_and_sample_sd_beside_the_pooled_estimate() -> None:
    seed42 = _tidy([("P1", "HwSA", 0.5, None, None), ("P2", "HwSA", None, None, None)])
    seed7 = _tidy([("P1", "HwSA", 0.25, None, None), ("P2", "HwSA", 1.0, None, None)])
    seed9 = _tidy([("P1", "HwSA", 1.0, None, None)])
    pooled = _tidy([("P1", "HwSA", 0.6, 0.2, 0.9), ("P2", "HwSA", 1.0, None, None)])
    table = across_seeds([(42, seed42), (7, seed7), (9, seed9)], pooled)
    p1, p2 = table.rows
    assert p1["policy"] == "P1" and p1["quantity"] == "HwSA"
    assert p1[MEAN_SD].estimate == pytest.approx(statistics.fmean([0.5, 0.25, 1.0]))
    assert p1[MEAN_SD] == f"0.583 +/- {statistics.stdev([0.5, 0.25, 1.0]):.3f}"
    assert p1[SEEDS] == 3
    assert p1[POOLED] == "0.600 [0.200, 0.900]"
    assert (p1[POOLED].ci_low, p1[POOLED].ci_high) == (0.2, 0.9)
    # a number only one seed has: its value, no sd; the pooled one without a CI
    assert p2[SEEDS] == 1 and p2[MEAN_SD] == "1.000" and p2[POOLED] == "1.000"
    # label columns no number uses are left out
    assert "condition" not in table.columns and "row" not in table.columns
    assert "Seeds: 42, 7, 9." in table.note
    tidy = tidy_frame(table, "t_across")
    assert tidy.filter(pl.col("quantity") == MEAN_SD)["estimate"].to_list()[0] == pytest.approx(
        0.5833333
    )


def test_mean_sd_of_one_value_has_no_sd() -> None:
    mean, sd = mean_sd([0.4])
    assert mean == 0.4 and math.isnan(sd)


# --- the workflow with two construction seeds, from a copy of the finished tiny run ------

EXTRA = 7
DATASETS = ("squad", "nq_bigbench")
# Rules whose jobs are not about one built dataset: the tables the new seed adds, and the
# figures that show the spread over the seeds.
SEED_REPORT_RULES = {"seed_table", "across_seeds_table", "table_pages", "figure", "all"}
SPREAD_FIGURES = {"abstention_by_dataset", "qc_breakdown"}


def run_seeds(workdir: Path, seeds: list[int], *args: str) -> str:
    """The workflow on the tiny config with `seeds` after it (a config file of its own,
    as a user would combine them)."""
    overlay = workdir / "seeds.yaml"
    overlay.write_text(f"seeds: [{', '.join(map(str, seeds))}]\n")
    cmd = [*snakemake_command(workdir, *args), "--configfile", str(TINY), str(overlay)]
    # snakemake_command passes --configfile TINY; the later option lists both files
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=1800)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc.stdout + proc.stderr


def planned_wildcard(dry_run: str, name: str) -> dict[str, set[str]]:
    """The value of wildcard `name` in every planned job, by rule ("" for a job without
    it)."""
    found: dict[str, set[str]] = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", dry_run):
        rule = re.match(r"(?:local)?rule (\w+):", block.strip())
        if not rule:
            continue
        value = re.search(rf"wildcards:.*?\b{name}=([\w.]+)", block)
        found.setdefault(rule.group(1), set()).add(value.group(1) if value else "")
    return found


@pytest.fixture(scope="module")
def two_seeds(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    workdir = tmp_path_factory.mktemp("two_seeds")
    copy_run(tiny_run, workdir)
    dry_run = run_seeds(workdir, [42, EXTRA], "-n")
    planned = planned_wildcard(dry_run, "dataset")
    assert planned_wildcard(dry_run, "figure")["figure"] == SPREAD_FIGURES
    replicates = {f"{d}_seed{EXTRA}" for d in DATASETS}
    for rule, datasets in planned.items():
        if rule == "pooled_metrics":  # one per configured dataset, over both seeds
            assert datasets == set(DATASETS), datasets
        elif rule in SEED_REPORT_RULES:
            assert datasets == {""}, (rule, datasets)
        else:  # adding a seed runs only that seed's jobs: nothing of seed 42 reruns
            assert datasets <= replicates, (rule, datasets)
    # the new seed calls the model itself
    assert MODEL_RULES - AUDIT_MODEL_RULES <= set(planned), planned
    run_seeds(workdir, [42, EXTRA])
    return workdir


def _metric(path: Path, dataset: str, policy: str, condition: str, metric: str) -> float:
    frame = pl.read_csv(path, infer_schema_length=None)
    value = frame.filter(
        (pl.col("model") == "micro")
        & (pl.col("dataset") == dataset)
        & (pl.col("policy") == policy)
        & (pl.col("condition") == condition)
        & (pl.col("metric") == metric)
    )["value"]
    assert len(value) == 1, (path, policy, condition, metric)
    return float(value[0])


def test_each_seed_draws_its_own_questions(two_seeds: Path) -> None:
    for dataset in DATASETS:
        base = read_jsonl(two_seeds / f"results/data/{dataset}/questions.jsonl")
        other = read_jsonl(two_seeds / f"results/data/{dataset}_seed{EXTRA}/questions.jsonl")
        assert len(base) == len(other)
        report = json.loads(
            (two_seeds / f"results/data/{dataset}_seed{EXTRA}/report.json").read_text()
        )
        assert report["seed"] == EXTRA
    # nq_bigbench has thousands of eligible questions: two draws of two differ
    drawn = [
        {r["qid"] for r in read_jsonl(two_seeds / f"results/data/{name}/questions.jsonl")}
        for name in ("nq_bigbench", f"nq_bigbench_seed{EXTRA}")
    ]
    assert drawn[0] != drawn[1]


def test_across_seed_table_recomputed_from_the_seeds_metric_files(two_seeds: Path) -> None:
    """EvidentialRAG's results table, its answer rates: each seed's table reads its own
    seed's metric file; across the seeds, their mean and sd beside the rate over both
    seeds' questions pooled (from the pooled metric file, its n the sum of theirs)."""
    tables = two_seeds / "results/tables"
    name, quantity = "evid_results", "Ans [95% CI]"
    per_seed = {
        42: pl.read_csv(tables / f"{name}.tidy.csv", schema=TIDY_SCHEMA),
        EXTRA: pl.read_csv(tables / f"seed{EXTRA}/{name}.tidy.csv", schema=TIDY_SCHEMA),
    }
    across = pl.read_csv(tables / f"across_seeds/{name}.tidy.csv", schema=TIDY_SCHEMA)
    checked = 0
    for record in per_seed[42].filter(pl.col("quantity") == quantity).iter_rows(named=True):
        dataset, policy, condition = record["dataset"], record["policy"], record["condition"]
        values = []
        for seed, frame in per_seed.items():
            metrics = two_seeds / "results/metrics" / f"{replicate(dataset, seed)}.csv"
            value = _metric(metrics, dataset, policy, condition, "answer_rate")
            printed = frame.filter(
                (pl.col("dataset") == dataset)
                & (pl.col("policy") == policy)
                & (pl.col("condition") == condition)
                & (pl.col("quantity") == quantity)
            )["estimate"]
            assert printed.to_list() == [pytest.approx(value)], (seed, dataset, policy, condition)
            values.append(value)
        numbers = across.filter(
            (pl.col("dataset") == dataset)
            & (pl.col("policy") == policy)
            & (pl.col("condition") == condition)
            & (pl.col("row") == f"quantity={quantity}")
        )
        by_column = {r["quantity"]: r for r in numbers.iter_rows(named=True)}
        assert by_column[MEAN_SD]["estimate"] == pytest.approx(statistics.fmean(values))
        assert by_column[SEEDS]["estimate"] == 2
        pooled = two_seeds / f"results/metrics/across_seeds/{dataset}.csv"
        assert by_column[POOLED]["estimate"] == pytest.approx(
            _metric(pooled, dataset, policy, condition, "answer_rate")
        )
        n = [
            _n(
                two_seeds / f"results/metrics/{replicate(dataset, s)}.csv",
                dataset,
                policy,
                condition,
            )
            for s in per_seed
        ]
        assert by_column[POOLED]["n"] == sum(n)
        checked += 1
    assert checked >= 10
    printed = (tables / f"across_seeds/{name}.md").read_text()
    assert f"Across construction seeds 42, {EXTRA}" in printed and "+/-" in printed


def replicate(dataset: str, seed: int) -> str:
    return dataset if seed == 42 else f"{dataset}_seed{seed}"


def _n(path: Path, dataset: str, policy: str, condition: str) -> int:
    frame = pl.read_csv(path, infer_schema_length=None)
    return int(
        frame.filter(
            (pl.col("dataset") == dataset)
            & (pl.col("policy") == policy)
            & (pl.col("condition") == condition)
            & (pl.col("metric") == "answer_rate")
        )["n"][0]
    )


def test_sweeps_and_diagnostics_have_companions_across_the_seeds(two_seeds: Path) -> None:
    """EvidentialRAG's lambda sweep and ablation and CDD's diagnostics tables, computed on
    every seed's build, get a copy per seed and a companion across the seeds: each number's
    mean over the seeds' own copies, and no pooled column (their inputs are per seed)."""
    tables = two_seeds / "results/tables"
    checked = 0
    for name in ("evid_lambda_sweep", "evid_ablation", "cdd_sensitivity", "cdd_ablation"):
        per_seed = [
            pl.read_csv(tables / f"{name}.tidy.csv", schema=TIDY_SCHEMA),
            pl.read_csv(tables / f"seed{EXTRA}/{name}.tidy.csv", schema=TIDY_SCHEMA),
        ]
        across = pl.read_csv(tables / f"across_seeds/{name}.tidy.csv", schema=TIDY_SCHEMA)
        assert POOLED not in set(across["quantity"]), name
        assert MEAN_SD in set(across["quantity"]), name
        keys = ("model", "dataset", "policy", "condition", "row", "quantity")
        for record in per_seed[0].iter_rows(named=True):
            values = [
                frame.filter(*(pl.col(k).eq_missing(record[k]) for k in keys))["estimate"]
                for frame in per_seed
            ]
            values = [v[0] for v in values if len(v) and v[0] is not None and math.isfinite(v[0])]
            if len(values) < 2:
                continue
            labels = {k: record[k] for k in keys if k not in ("row", "quantity")}
            own = f"quantity={record['quantity']}"
            row = f"row={record['row']}; {own}" if record["row"] else own
            found = across.filter(
                *(pl.col(k).eq_missing(v) for k, v in labels.items()),
                pl.col("row") == row,
                pl.col("quantity") == MEAN_SD,
            )["estimate"]
            assert found.to_list() == [pytest.approx(statistics.fmean(values))], (name, row)
            checked += 1
        caption = (tables / f"across_seeds/{name}.md").read_text()
        assert "with no pooled estimate (the table's inputs exist per seed only)" in caption
    assert checked > 0  # numbers both seeds have (the micro model's CDD cells may have none)


def test_seeds_on_fixed_questions_redraw_only_the_construction(
    tiny_run: Path, tmp_path: Path
) -> None:
    """seeds_redraw: construction (EvidentialRAG's fixed instances): a further seed's build
    has the base seed's questions and corpus, and its own passage shuffles; its across-seed
    tables plan no pooled metrics."""
    copy_run(tiny_run, tmp_path)
    config = yaml.safe_load(TINY.read_text())
    fixed = tmp_path / "fixed.yaml"
    fixed.write_text(
        yaml.safe_dump({**config, "seeds": [42, EXTRA], "seeds_redraw": "construction"})
    )
    results = tmp_path / "results"
    targets = [
        f"results/contexts/{d}_seed{EXTRA}/{c}.jsonl" for d in DATASETS for c in ("Q100", "Q50")
    ]
    proc = subprocess.run(
        snakemake_command(tmp_path, *targets, configfile=fixed),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    orders = 0
    for dataset in DATASETS:
        base = read_jsonl(results / f"data/{dataset}/questions.jsonl")
        again = read_jsonl(results / f"data/{dataset}_seed{EXTRA}/questions.jsonl")
        assert [q["qid"] for q in again] == [q["qid"] for q in base], dataset
        corpus = (results / f"data/{dataset}/corpus.jsonl").read_text()
        assert (results / f"data/{dataset}_seed{EXTRA}/corpus.jsonl").read_text() == corpus
        for condition in ("Q100", "Q50"):
            mine = read_jsonl(results / f"contexts/{dataset}/{condition}.jsonl")
            theirs = read_jsonl(results / f"contexts/{dataset}_seed{EXTRA}/{condition}.jsonl")
            assert [r["qid"] for r in theirs] == [r["qid"] for r in mine]
            pids = lambda rows: [[p["pid"] for p in r["passages"]] for r in rows]  # noqa: E731
            orders += pids(theirs) != pids(mine)
    assert orders > 0  # the construction is the seed's own
    plan = subprocess.run(
        snakemake_command(tmp_path, "-n", configfile=fixed),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    jobs = planned_jobs(plan.stdout + plan.stderr)
    assert jobs.get("across_seeds_table") and "pooled_metrics" not in jobs, jobs


def test_the_loading_recipe_keeps_the_seeds_apart(two_seeds: Path) -> None:
    """docs/results.md's recipe: every build's metric files in one frame, each row with
    its build's construction seed; a further seed's rows carry the configured dataset's
    name, so the frame holds each cell twice until one seed is kept, and then equals the
    base seed's own files."""
    metrics = read_metrics(sorted((two_seeds / "results/metrics").glob("*.csv")))
    named = metrics.filter(pl.col("dataset").is_in(DATASETS))
    assert set(named["seed"]) == {42, EXTRA}
    base = named.filter(pl.col("seed") == 42)
    further = named.filter(pl.col("seed") == EXTRA)
    # the trap the seed column avoids: the further seed's rows under the same names
    assert len(further) > 0 and len(named) == len(base) + len(further)
    own = read_metrics([two_seeds / f"results/metrics/{d}.csv" for d in DATASETS])
    columns = [c for c in own.columns if c != "reason"]
    assert base.select(own.columns).sort(columns).equals(own.sort(columns))
    pooled = read_metrics(sorted((two_seeds / "results/metrics/across_seeds").glob("*.csv")))
    assert pooled["seed"].null_count() == len(pooled) > 0


def test_removing_the_seed_reruns_only_the_figures_that_showed_its_spread(
    two_seeds: Path,
) -> None:
    dry_run = run_seeds(two_seeds, [42], "-n")
    assert planned_jobs(dry_run) == {"figure": 2, "all": 1}
    assert planned_wildcard(dry_run, "figure")["figure"] == SPREAD_FIGURES


def test_the_report_shows_the_across_seed_tables(two_seeds: Path) -> None:
    run_seeds(two_seeds, [42, EXTRA], "--report", "results/report.zip")
    archive = zipfile.ZipFile(two_seeds / "results/report.zip")
    names = archive.namelist()
    # the report keeps a file's name: evid_results.html, once per seed 42 and across seeds
    assert len([n for n in names if n.endswith("/evid_results.html")]) == 2, names
    (page,) = [n for n in names if n.endswith("report.html")]
    html = archive.read(page).decode()
    assert '"Tables across seeds"' in html
    # the across-seeds page of Table 1 opens under its own caption
    table1 = [archive.read(n).decode() for n in names if n.endswith("/table1_hwsa.html")]
    caption = f"Across construction seeds 42, {EXTRA}: each number of table1_hwsa"
    assert sum(caption in page for page in table1) == 1, table1
