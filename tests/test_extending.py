"""docs/extending.md, followed to the letter: its code blocks written as files and run
through the real workflow on the tiny config. A policy that reads two upstream cells and
a figure that reads an output kind of its own (with their config) reach the decisions,
the tables, the figures and the report; a dataset adapter of a module (with its config)
builds a dataset of SQuAD questions in its own format, which every stage then runs on.

The page's run starts from a copy of the session's finished tiny run, as a user adds a
policy to a run they have: only the jobs the new modules add or change run (the new
policy's cells, the metrics, tables and figures that list it), which is also the proof
that adding a module policy reruns no generation."""

from __future__ import annotations

import csv
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grabrag.core.io import read_json, read_jsonl
from grabrag.data.assets import manifest_path, resolve
from grabrag.generation import backends
from grabrag.generation.generator import GenerationSettings
from grabrag.policies.nli import LABELS, build_verifier

from .conftest import (
    CORES,
    MICRO_ASSET,
    MODEL_RULES,
    REPO,
    RESOURCES,
    TINY,
    copy_run,
    copy_workflow,
    planned_jobs,
)

pytestmark = pytest.mark.integration

PAGE = REPO / "docs" / "extending.md"
_BLOCK = re.compile(r"```\w+ title=(\S+)\n(.*?)```", re.S)
MODEL, DATASET, VARIANT = "micro", "nq_bigbench", "nq_bigbench_sensitivity43"


def page_files() -> dict[str, str]:
    """The page's code blocks that name a file, by file name."""
    return {name: text for name, text in _BLOCK.findall(PAGE.read_text(encoding="utf-8"))}


def run(
    workdir: Path,
    *args: str,
    extension: str = "extending.yaml",
    config: tuple[str, ...] = (),
    snakefile: Path = REPO / "Snakefile",
) -> subprocess.CompletedProcess[str]:
    """The workflow with the tiny config and one of the page's config files after it, as
    the page says to combine them; ``config``: more ``--config`` entries; ``snakefile``:
    that of a copy of the workflow with the page's rule in it."""
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(snakefile),
        "--directory",
        str(workdir),
        "--configfile",
        str(TINY),
        extension,
        "--config",
        f"resources_dir={RESOURCES}",
        *config,
        "--cores",
        str(CORES),
        *args,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=workdir, timeout=1800)
    assert proc.returncode == 0, f"{' '.join(cmd)}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


def test_the_page_names_its_files() -> None:
    assert set(page_files()) == {
        "either.py",
        "gold_rank.py",
        "gold_rank.rst",
        "extending.yaml",
        "qa_tsv.py",
        "my_dataset.yaml",
        "plain_llama.py",
        "my_backend.yaml",
        "workflow/grabrag/sufficiency.py",
        "workflow/scripts/sufficiency.py",
        "rules/sufficiency.smk",
        "sufficiency.yaml",
    }


def page_workdir(
    tiny_run: Path, tmp_path_factory: pytest.TempPathFactory, config: str, *modules: str
) -> Path:
    """A copy of the finished tiny run with one walkthrough's files in it: its config file
    (``<config>.yaml``) and its modules, as the page gives them."""
    workdir = tmp_path_factory.mktemp(config)
    copy_run(tiny_run, workdir)
    files = page_files()
    for name in (*modules, f"{config}.yaml"):
        (workdir / name).write_text(files[name])
    return workdir


@pytest.fixture(scope="module")
def extending_run(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    workdir = page_workdir(
        tiny_run, tmp_path_factory, "extending", "either.py", "gold_rank.py", "gold_rank.rst"
    )
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


# --- a dataset adapter ---------------------------------------------------------------------

ADAPTED = "mine"
TSV_COLUMNS = ("id", "question", "answers", "title", "passage")


def write_squad_as_tsv(path: Path, n_paragraphs: int = 10) -> list[dict[str, str]]:
    """The page's tab-separated format, from the real SQuAD dev file the tiny config reads:
    the first question of each of the first article's first paragraphs, so that every
    line's passage is another one (the corpus needs more passages than a context holds)."""
    squad = read_json(resolve(manifest_path(str(RESOURCES), "squad-v1.1-dev")))
    article = squad["data"][0]
    rows = []
    for paragraph in article["paragraphs"][:n_paragraphs]:
        qa = paragraph["qas"][0]
        rows.append(
            {
                "id": qa["id"],
                "question": qa["question"],
                "answers": "|".join(dict.fromkeys(a["text"] for a in qa["answers"])),
                "title": article["title"].replace("_", " "),
                "passage": paragraph["context"],
            }
        )
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, TSV_COLUMNS, delimiter="\t")
        writer.writeheader()
        writer.writerows(rows)
    return rows


def planned_values(dry_run_output: str, wildcard: str) -> set[str]:
    """The values of one wildcard in a run's or a dry run's jobs."""
    return set(re.findall(rf"wildcards:.*?\b{wildcard}=([^,\s]+)", dry_run_output))


@pytest.fixture(scope="module")
def adapter_run(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    workdir = page_workdir(tiny_run, tmp_path_factory, "my_dataset", "qa_tsv.py")
    write_squad_as_tsv(workdir / "my_questions.tsv")
    # The tests share one resources_dir, where a path asset's manifest records the file it
    # found: an earlier session's points into that session's (gone) folder.
    shutil.rmtree(RESOURCES / "my-questions", ignore_errors=True)
    proc = run(workdir, extension="my_dataset.yaml")
    jobs = planned_jobs(proc.stdout + proc.stderr)
    # the new dataset is built once and generated on; the configured ones are not rebuilt
    assert jobs["prepare_data"] == 1 and jobs["generate_context_prompts"] > 0, jobs
    assert planned_values(proc.stdout + proc.stderr, "dataset") == {ADAPTED}
    return workdir


def test_the_adapter_builds_the_dataset_from_its_format(adapter_run: Path) -> None:
    lines = {
        row["id"]: row
        for row in csv.DictReader(
            (adapter_run / "my_questions.tsv").open(newline="", encoding="utf-8"), delimiter="\t"
        )
    }
    data = adapter_run / "results/data" / ADAPTED
    questions = read_jsonl(data / "questions.jsonl")
    assert len(questions) == 2
    for question in questions:
        line = lines[question["qid"]]
        assert question["question"] == line["question"]
        assert question["all_answers"] == line["answers"].split("|")
        assert [p["text"] for p in question["gold_passages"]] == [line["passage"]]
    corpus = read_jsonl(data / "corpus.jsonl")
    assert {p["text"] for p in corpus} == {line["passage"] for line in lines.values()}
    report = json.loads((data / "report.json").read_text())
    assert (report["adapter"], report["source_questions"]) == ("qa_tsv", len(lines))


def test_every_stage_runs_on_the_adapted_dataset(adapter_run: Path) -> None:
    for condition in ("Q100", "Q0", "QC"):
        cell = adapter_run / "results/policies" / MODEL / ADAPTED / condition
        assert len(read_jsonl(cell / "P4.jsonl")) == 2, condition
    with (adapter_run / "results/tables/table1_hwsa.csv").open(newline="") as handle:
        assert ADAPTED in {cell for row in csv.reader(handle) for cell in row}


def test_editing_the_adapter_rebuilds_its_dataset_only(adapter_run: Path) -> None:
    assert planned_jobs(run(adapter_run, "-n", extension="my_dataset.yaml").stdout) == {}
    module = adapter_run / "qa_tsv.py"
    text = module.read_text()
    try:
        module.write_text(text.replace('split("|")', 'split("|", 5)'))
        proc = run(adapter_run, "-n", extension="my_dataset.yaml")
        assert planned_jobs(proc.stdout)["prepare_data"] == 1
        assert planned_values(proc.stdout, "dataset") == {ADAPTED}
    finally:
        module.write_text(text)


# --- a model backend ---------------------------------------------------------------------

PLAIN = "smollm2-plain"
# The page's model runs the real 135M GGUF; here the tiny config's micro model, so that
# every stage runs in seconds (the page's files unchanged, the asset given on top).
ON_MICRO = (f"models={{{PLAIN}: {{asset: {MICRO_ASSET}}}}}",)


# The new model on one dataset, through every model stage to that dataset's metrics: the
# page runs `all`, whose other files (the second dataset, the probe, the tables) are the
# same stages again and cost the suite minutes on its longest worker.
BACKEND_TARGETS = (
    f"results/metrics/{DATASET}.csv",
    *(f"results/policies/{PLAIN}/{DATASET}/Q100/{p}.jsonl" for p in ("P4", "EVID", "CDD")),
)


def backend(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run(workdir, *BACKEND_TARGETS, *args, extension="my_backend.yaml", config=ON_MICRO)


@pytest.fixture(scope="module")
def backend_run(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    workdir = page_workdir(tiny_run, tmp_path_factory, "my_backend", "plain_llama.py")
    proc = backend(workdir)
    jobs = planned_jobs(proc.stdout + proc.stderr)
    # every model stage runs for the new model, and only for it
    assert {"generate_context_prompts", "nli", "evidential_evaluate", "cdd_generate"} <= set(
        jobs
    ), jobs
    assert planned_values(proc.stdout + proc.stderr, "model") == {PLAIN}
    return workdir


def test_the_backend_generates_every_cell_from_plain_text(backend_run: Path) -> None:
    results = backend_run / "results"
    for condition in ("Q100", "Q0", "QC"):
        cell = f"{DATASET}/{condition}/P0.jsonl"
        plain = read_jsonl(results / "generation" / PLAIN / cell)
        chat = {r["qid"]: r for r in read_jsonl(results / "generation" / MODEL / cell)}
        assert [r["qid"] for r in plain] == list(chat)
        for row in plain:
            # the same messages without the chat template's markers: fewer prompt tokens
            assert 0 < row["prompt_tokens"] < chat[row["qid"]]["prompt_tokens"], row
            assert row["raw"].startswith("{"), row  # under the paper's answer grammar


def test_every_stage_of_the_backend_model_reaches_the_metrics(backend_run: Path) -> None:
    results = backend_run / "results"
    contexts = read_jsonl(results / "contexts" / DATASET / "Q100.jsonl")
    # P4's verifier ran for the model's cells (a row per question: its labels, or why
    # the micro model's closed-book answer left none to check)
    nli = read_jsonl(results / "nli" / PLAIN / DATASET / "Q100.jsonl")
    assert [r["qid"] for r in nli] == [r["qid"] for r in contexts]
    for policy in ("P4", "EVID", "CDD"):
        assert read_jsonl(results / "policies" / PLAIN / DATASET / "Q100" / f"{policy}.jsonl")
    # the metrics the tables read: the model's rows for every method and condition
    with (results / "metrics" / f"{DATASET}.csv").open(newline="") as handle:
        rows = [row for row in csv.DictReader(handle) if row["model"] == PLAIN]
    assert {"P4", "EVID", "CDD"} <= {row["policy"] for row in rows}
    assert {"Q100", "Q0", "QC"} <= {row["condition"] for row in rows}


def test_the_verifier_labels_through_the_backend(
    backend_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The llm verifier without weights of its own, on the page's backend and the real
    micro GGUF, as the nli job opens it (whether that job has pairs to label depends on
    the micro model's closed-book answers, so the labelling is checked here directly)."""
    monkeypatch.setattr(backends, "_BACKENDS", {})  # the module registers into a copy
    spec = importlib.util.spec_from_file_location("plain_llama", backend_run / "plain_llama.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = {"backend": "plain_llama", "asset": MICRO_ASSET, "options": {"separator": "\n\n"}}
    nli = {"backend": "llm", "asset": None}
    assert backends.verifier_backend(nli, model) is backends._BACKENDS["plain_llama"]
    manifest = manifest_path(str(RESOURCES), MICRO_ASSET)
    verifier = build_verifier(
        "llm",
        None,
        name=MICRO_ASSET,
        opener=lambda: backends.open_generator(
            PLAIN, model, manifest, GenerationSettings(seed=42), 1
        ),
    )
    assert isinstance(verifier.generator, module.PlainLlama)
    pairs = [("Paris is the capital of France.", "The capital of France is Paris.")] * 2
    assert set(verifier.classify(pairs)) <= set(LABELS)


def test_editing_the_backend_reruns_its_model_only(backend_run: Path) -> None:
    assert planned_jobs(backend(backend_run, "-n").stdout) == {}
    module = backend_run / "plain_llama.py"
    text = module.read_text()
    try:
        module.write_text(text.replace("started, 3)", "started, 4)"))
        proc = backend(backend_run, "-n")
        assert planned_jobs(proc.stdout)["generate_context_prompts"] > 0
        assert planned_values(proc.stdout, "model") == {PLAIN}
    finally:
        module.write_text(text)


# --- a method with its own model pass ------------------------------------------------------

METHOD_FILES = (
    "workflow/grabrag/sufficiency.py",
    "workflow/scripts/sufficiency.py",
    "rules/sufficiency.smk",
)
INCLUDE = 'include: "rules/sufficiency.smk"'


@pytest.fixture(scope="module")
def method_run(tiny_run: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the run, the copy of the workflow with the page's method in it)."""
    base = tmp_path_factory.mktemp("method")
    source = copy_workflow(base / "workflow")
    files = page_files()
    for name in METHOD_FILES:
        (source / name).write_text(files[name])
    assert f"`{INCLUDE}`" in PAGE.read_text(encoding="utf-8")
    snakefile = source / "Snakefile"
    last = 'include: "rules/report.smk"\n'
    snakefile.write_text(snakefile.read_text().replace(last, f"{last}{INCLUDE}\n"))
    workdir = base / "run"
    copy_run(tiny_run, workdir)
    (workdir / "sufficiency.yaml").write_text(files["sufficiency.yaml"])
    proc = method(workdir, snakefile)
    jobs = planned_jobs(proc.stdout + proc.stderr)
    # the method's pass and its policy run; no other model job (the copy's code is the same)
    assert jobs["sufficiency"] > 0 and jobs["policy"] > 0 and not MODEL_RULES & set(jobs), jobs
    return workdir, snakefile


def method(workdir: Path, snakefile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run(workdir, *args, extension="sufficiency.yaml", snakefile=snakefile)


def test_the_method_runs_its_pass_and_its_policy_in_every_cell(
    method_run: tuple[Path, Path],
) -> None:
    results = method_run[0] / "results"
    rules = set()
    for condition in ("Q100", "Q0", "QC"):
        contexts = read_jsonl(results / "contexts" / DATASET / f"{condition}.jsonl")
        checks = read_jsonl(results / "sufficiency" / MODEL / DATASET / f"{condition}.jsonl")
        assert [r["qid"] for r in checks] == [r["qid"] for r in contexts]
        assert {r["raw"].strip() for r in checks} <= {"yes", "no"}, checks
        sufficient = {r["qid"]: r["sufficient"] for r in checks}
        cell = results / "policies" / MODEL / DATASET / condition
        for before, row in zip(
            read_jsonl(cell / "P1.jsonl"), read_jsonl(cell / "SUFF.jsonl"), strict=True
        ):
            if before["decision"] == "answer" and not sufficient[row["qid"]]:
                assert (row["decision"], row["rule"]) == ("abstain", "insufficient")
            else:
                assert {**row, "policy": "P1"} == before
            rules.add(row["rule"])
    # a method with a pass of its own does not run on Table 13's sensitivity variant
    assert not (results / "sufficiency" / MODEL / VARIANT).exists()
    with (results / "tables/table1_hwsa.csv").open(newline="") as handle:
        assert "SUFF" in {cell for row in csv.reader(handle) for cell in row}


def test_editing_the_method_reruns_its_pass_and_what_reads_it(
    method_run: tuple[Path, Path],
) -> None:
    workdir, snakefile = method_run
    assert planned_jobs(method(workdir, snakefile, "-n").stdout) == {}
    module = snakefile.parent / "workflow/grabrag/sufficiency.py"
    text = module.read_text()
    try:
        module.write_text(text.replace("Answer only yes or no.", "Say yes or no."))
        jobs = planned_jobs(method(workdir, snakefile, "-n").stdout)
        assert jobs["sufficiency"] > 0 and jobs["policy"] > 0, jobs
        assert not MODEL_RULES & set(jobs), jobs
    finally:
        module.write_text(text)
