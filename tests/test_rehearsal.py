"""The shipped configs rehearsed end to end: config/paper.yaml and config/extended.yaml run
to the end on local stand-ins of their hub assets (tests/hub_standins.py).

The stand-ins are fetched through the real asset registry (pins, lock files, the dataset
export) from a local folder that replaces only the hub's transport, in every job process
(tests/hub_transport/sitecustomize.py), with the hub client offline: a download nobody
declared fails. Every backend, adapter and chat template of the paper's path runs inside
the workflow: GLiNER and its backbone tokenizer, the DeBERTa NLI verifier, the BGE
encoder, the NQ-open-gold and HotpotQA hub adapters, the dataset_gold swap pool, three
models with three chat templates in one DAG, the seed-43 rebuild and, in the extended
config, QX, EvidentialRAG, CDD with its in-context step 2 and model gate, and the
baselines.

Multiplicity is shrunk, never paths: a few questions per dataset, the paper config on its
three models and one dataset (NQ-open-gold), and the extended config on one model and the
other dataset (HotpotQA): every adapter runs once, and the other cells run the same code.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from .conftest import REPO, RESOURCES, ensure_micro_model, planned_jobs, snakemake
from .hub_standins import build_upstream, rehearsal_config
from .local_hub import HEAD, env_without_hub_settings

pytestmark = pytest.mark.integration

SHIPPED = {
    # HotpotQA's adapter runs in the extended rehearsal; NQ keeps the seed-43 rebuild and
    # the closed-book answers confident enough for the DeBERTa verifier to label pairs.
    "paper": (REPO / "config" / "paper.yaml", {"datasets": ["nq"]}),
    "extended": (
        REPO / "config" / "extended.yaml",
        {"models": ["qwen2.5-7b"], "datasets": ["hotpotqa"]},
    ),
}
# The paper's numbered tables the paper config builds (Table 6 needs the human audit's
# ratings, which a run cannot make) and its figures.
PAPER_TABLES = {
    "table1_hwsa",
    "table2_policies",
    "table3_qc_sources",
    "table4_ner_labels",
    "table5_swap_examples",
    "table7_hwsa_ci",
    "table8_fac_ci",
    "table9_qc_sources",
    "table10_aurc",
    "table11_ece",
    "table12_p3_sweep",
    "table13_seed_sensitivity",
}
JOB_HEADER = re.compile(r"^(?:local)?rule (\w+):$", re.MULTILINE)


@pytest.fixture(scope="session")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """The stand-ins of every hub asset of the shipped configs, built once."""
    ensure_micro_model()  # fetches the SmolLM2 GGUF whose tokenizer the stand-ins reuse
    specs: dict[str, dict] = {}
    for shipped, _ in SHIPPED.values():
        specs.update(yaml.safe_load(shipped.read_text())["assets"])
    root = tmp_path_factory.mktemp("hub")
    return SimpleNamespace(root=root, shas=build_upstream(root, RESOURCES, specs))


def rehearsal_env(hub_root: Path, home: Path) -> dict[str, str]:
    """Job processes see the local hub and an offline hub client with an empty cache."""
    env = env_without_hub_settings()
    env.update(
        GRABRAG_TEST_HUB=str(hub_root),
        PYTHONPATH=os.pathsep.join(
            p for p in (str(REPO / "tests" / "hub_transport"), env.get("PYTHONPATH")) if p
        ),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HOME=str(home),
    )
    return env


def _rehearse(name: str, upstream: SimpleNamespace, work: Path) -> SimpleNamespace:
    """One shipped config run to the end on the stand-ins: its plan, the jobs that ran."""
    shipped, shrink = SHIPPED[name]
    config = rehearsal_config(shipped, upstream.shas, **shrink)
    configfile = work / f"{name}.yaml"
    configfile.write_text(yaml.safe_dump(config))
    workdir = work / "run"
    workdir.mkdir()
    env = rehearsal_env(upstream.root, work / "hf-home")
    run = {"configfile": configfile, "resources": workdir / "resources", "env": env}
    planned = planned_jobs(snakemake(workdir, "-n", **run).stdout)
    proc = snakemake(workdir, timeout=2400, **run)
    return SimpleNamespace(
        name=name,
        config=config,
        workdir=workdir,
        run=run,
        planned=planned,
        ran=Counter(JOB_HEADER.findall(proc.stdout + proc.stderr)),
    )


# Session-scoped like the tiny run: a worker may run other modules' tests between two of
# a rehearsal's, which would tear a module-scoped run down and make it again.
@pytest.fixture(scope="session")
def paper_run(upstream: SimpleNamespace, tmp_path_factory) -> SimpleNamespace:
    return _rehearse("paper", upstream, tmp_path_factory.mktemp("rehearsal_paper"))


@pytest.fixture(scope="session")
def extended_run(upstream: SimpleNamespace, tmp_path_factory) -> SimpleNamespace:
    return _rehearse("extended", upstream, tmp_path_factory.mktemp("rehearsal_extended"))


@pytest.fixture(params=sorted(SHIPPED))
def rehearsal(request: pytest.FixtureRequest) -> SimpleNamespace:
    return request.getfixturevalue(f"{request.param}_run")


def test_every_job_the_config_plans_runs(rehearsal: SimpleNamespace) -> None:
    assert rehearsal.planned, "the plan is empty"
    assert dict(rehearsal.ran) == rehearsal.planned
    listed = subprocess.run(
        [sys.executable, "-m", "snakemake", "--list-rules", "--configfile"]
        + [str(rehearsal.run["configfile"])],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    ).stdout.split()
    assert set(rehearsal.planned) <= set(listed)
    again = snakemake(rehearsal.workdir, "-n", **rehearsal.run).stdout
    assert planned_jobs(again) == {}, again


def test_every_table_and_figure_of_the_config_is_built(rehearsal: SimpleNamespace) -> None:
    from grabrag.core import registry
    from grabrag.report.specs import figure_names, table_names

    results = rehearsal.workdir / "results"
    tables = {p.stem for p in (results / "tables").glob("*.md")}
    figures = {p.stem for p in (results / "figures").glob("*.png")}
    if rehearsal.name == "paper":
        assert PAPER_TABLES <= tables, sorted(PAPER_TABLES - tables)
        features = registry.Features(conditions=("Q100", "Q50", "Q0", "QC"), seed_sensitivity=True)
    else:
        assert {"evid_ablation", "evid_efficiency", "hwsa_conditions"} <= tables, tables
        assert any(t.startswith("cdd_") for t in tables), tables
        features = registry.Features(
            conditions=("Q100", "Q50", "Q0", "QC", "QX"),
            evidential=True,
            cdd_family=True,
            cdd_traces=True,
            cdd_diagnostics=True,
            seed_sensitivity=True,
            truthfulqa_probe=True,
        )
        # the probe ran every configured policy, clean and injected
        with (results / "tables" / "truthfulqa_probe.tidy.csv").open(newline="") as handle:
            probe = {row["policy"] for row in csv.DictReader(handle)}
        assert probe == set(rehearsal.config["policies"]["names"]), probe
        # scored by entailment with the config's NLI model (the stand-in DeBERTa)
        (scores,) = (results / "truthfulqa").glob("*/truthfulqa/scores.jsonl")
        scored = [json.loads(line) for line in scores.read_text().splitlines()]
        assert {r["scorer"] for r in scored} == {"nli:deberta-v3-large-nli"}
        judged = [r for r in scored if r["outcome"] in ("true", "false")]
        assert judged and all(0 <= r["true_support"] <= 1 for r in judged)
        assert (
            "Scored by nli:deberta-v3-large-nli."
            in (results / "tables/truthfulqa_probe.md").read_text()
        )
    # and ours outside the registry: the reproduction report and the cost ledger
    extra = {"reproduction", "reproduction_claims", "cost_ledger"}
    assert tables == set(table_names(features)) | extra
    assert figures == set(figure_names(features))
    for table in tables:
        text = (results / "tables" / f"{table}.md").read_text()
        assert text.strip() and "nan" not in text.split(), table


def _manifest(rehearsal: SimpleNamespace, asset: str) -> dict:
    return json.loads((rehearsal.run["resources"] / asset / "manifest.json").read_text())


def test_every_hub_asset_came_through_the_registry_and_is_locked(rehearsal) -> None:
    config = rehearsal.config
    used = {m["asset"] for m in config["models"].values()}
    used |= {d["asset"] for d in config["datasets"].values()}
    used |= {config["retrieval"]["encoder"], config["nli"]["asset"]}
    used |= {config["ner"]["asset"], config["ner"]["tokenizer"]}
    # the TruthfulQA probe's questions: the hub's generation set (its stand-in's rows)
    if config.get("truthfulqa_probe"):
        used.add(config["truthfulqa_probe"]["asset"])
    assert all("hub" in config["assets"][name] for name in used)
    fetched = {p.name for p in rehearsal.run["resources"].iterdir() if p.name != "logs"}
    assert fetched == used
    for asset in fetched:
        manifest = _manifest(rehearsal, asset)
        revision = config["assets"][asset]["revision"]
        # a pinned commit is fetched as given; a branch name resolves to the hub's head
        expected = revision if re.fullmatch(r"[0-9a-f]{40}", revision) else HEAD
        assert manifest["source"] == "hub" and manifest["commit"] == expected, manifest
        lock = json.loads((rehearsal.workdir / "asset-locks" / f"{asset}.json").read_text())
        assert lock["files"] == manifest["files"]


def test_each_model_runs_with_its_own_chat_template(paper_run: SimpleNamespace) -> None:
    """The same question, condition and prompt costs a different number of prompt tokens
    under Phi-4-mini's, Llama-3.1's and Qwen2.5's templates, one call at a time as the
    paper decoded (the paper config's batch: 1; the three templates on the batched path:
    tests/test_batching.py)."""
    tokens = {}
    for model in paper_run.config["models"]:
        path = paper_run.workdir / f"results/generation/{model}/nq/Q100/P1.jsonl"
        first = json.loads(path.read_text().splitlines()[0])
        tokens[model] = (first["qid"], first["prompt_tokens"])
        assert first["batch"] == paper_run.config["models"][model]["batch"] == 1
    assert len(tokens) == 3 and len({qid for qid, _ in tokens.values()}) == 1, tokens
    assert len({n for _, n in tokens.values()}) == 3, tokens


def test_the_reproduction_report_compares_every_number_with_a_counterpart(
    paper_run: SimpleNamespace,
) -> None:
    """The paper config's run (its three models by their names, NQ only): every Table 1
    and Table 7-10 number of an NQ cell, and every Table 13 number, has a counterpart and
    a verdict of its own; HotpotQA's are not run, and the macros over both datasets are
    not comparable."""
    import csv

    path = paper_run.workdir / "results/tables/reproduction.csv"
    rows = list(csv.DictReader(path.open(newline="")))
    table1 = [r for r in rows if r["Source"].startswith("GRAB-RAG Table 1,")]
    nq = [r for r in table1 if " / NQ / " in r["Source"]]
    assert len(nq) == 3 * 5 * 3  # three models, five policies, Q0 / QC / delta
    assert all(r["Verdict"] not in ("not run", "not comparable") and r["Ours"] for r in nq)
    assert {r["Verdict"] for r in table1 if " / HPQA / " in r["Source"]} == {"not run"}
    macros = [r for r in rows if r["Source"].startswith("GRAB-RAG Table 2,")]
    assert macros and {r["Verdict"] for r in macros} == {"not comparable"}
    # the appendix's per-cell tables: every NQ number has a counterpart too
    for table, per_cell in (("7", 3 * 5 * 3 + 3), ("8", 3 * 5 * 4), ("9", 3 * 5 * 4 + 3)):
        cells = [r for r in rows if r["Source"].startswith(f"GRAB-RAG Table {table},")]
        nq = [r for r in cells if " / NQ / " in r["Source"]]
        assert len(nq) == per_cell, table
        assert all(r["Verdict"] not in ("not run", "not comparable") and r["Ours"] for r in nq)
    aurc = [r for r in rows if r["Source"].startswith("GRAB-RAG Table 10, row")]
    assert sum(" / NQ," in r["Source"] and r["Ours"] != "" for r in aurc) == 3 * 5
    # Table 13 is the seed-sensitivity cell, Llama on NQ under seeds 42 and 43
    seeds = [r for r in rows if r["Source"].startswith("GRAB-RAG Table 13 ")]
    assert len(seeds) == 30 and all(r["Ours"] and r["Verdict"] != "not run" for r in seeds)
    # EvidentialRAG's and CDD's numbers are of their own models and benchmarks
    others = [r for r in rows if r["Paper"] in ("EvidentialRAG", "CDD")]
    assert others and {r["Verdict"] for r in others} <= {"not run", "not comparable"}


def test_the_extended_config_decodes_in_batches(extended_run: SimpleNamespace) -> None:
    """config/extended.yaml keeps batching as its speed setting: its rows say batch 8."""
    (model,) = extended_run.config["models"]
    path = extended_run.workdir / f"results/generation/{model}/hotpotqa/Q100/P1.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows and {r["batch"] for r in rows} == {8}


def test_the_paper_backends_did_the_work(rehearsal) -> None:
    results = rehearsal.workdir / "results"
    dataset = next(iter(rehearsal.config["datasets"]))
    nli = [
        json.loads(line)
        for path in (results / "nli").rglob("*.jsonl")
        for line in path.read_text().splitlines()
    ]
    assert nli and {r["verifier"] for r in nli} == {"transformers:deberta-v3-large-nli"}
    pool_log = (results / "logs" / "entity_pool" / f"{dataset}.log").read_text()
    assert "GLiNER type" in pool_log, pool_log
    embed_log = (results / "logs" / "embed" / f"{dataset}.log").read_text()
    assert "with bge-small-en-v1.5 (dim 384)" in embed_log, embed_log


def test_the_deberta_verifier_labels_pairs(paper_run: SimpleNamespace) -> None:
    """Where a closed-book answer is confident, the transformers verifier loads and labels
    every passage (the extended rehearsal's one model never is: its cells load no model)."""
    labelled = [
        json.loads(line)
        for path in (paper_run.workdir / "results" / "nli").rglob("*.jsonl")
        for line in path.read_text().splitlines()
    ]
    labelled = [r for r in labelled if r["skipped_reason"] is None]
    assert labelled, "no closed-book answer was confident in the whole paper rehearsal"
    assert all(len(r["labels"]) == len(r["pids"]) > 0 for r in labelled)
    assert {label for r in labelled for label in r["labels"]} <= {
        "entailment",
        "neutral",
        "contradiction",
    }
