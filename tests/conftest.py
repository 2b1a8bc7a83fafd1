"""Shared helpers: running the real workflow on the tiny config."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "config" / "tiny.yaml"
# Assets are shared with the main run so a test session never downloads twice.
RESOURCES = Path(os.environ.get("GRABRAG_RESOURCES", REPO / "resources")).resolve()
# The tiny config's model: tests/micro_model.py, built from the real SmolLM2 GGUF.
MICRO_ASSET = "micro-smollm2"
REAL_MODEL_ASSET = "smollm2-135m-instruct-q4_1"
_micro_ready = False
# pytest runs on pytest-xdist workers (`-n` in pyproject.toml's addopts); each workflow run
# gets its worker's share of the CPUs, at most the 2 the tiny config is sized for. Two
# llama.cpp jobs whose threads outnumber the cores stall each other at every barrier.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
CORES = max(1, min(2, (os.cpu_count() or 1) // WORKERS))

# Tests that read one finished workflow run (a session or module fixture) run on the same
# worker, so each run is made once: the group follows from the fixtures a test uses.
SHARED_RUN_GROUPS = {
    "tiny_run": "tiny_run",
    "slurm_cluster": "slurm",
    "paper_run": "rehearsal_paper",
    "extended_run": "rehearsal_extended",
    # one llama_cpp.server for the session, beside the tiny run its workflow test reads
    "server": "tiny_run",
}
# The order the workers take the groups in (`--no-loadscope-reorder` keeps it), longest
# first, so that no long run is left for the end: the cluster (mostly waiting) and the
# tiny run go to one worker each, then the two rehearsals, then the modules.
GROUP_ORDER = ("slurm", "tiny_run", "rehearsal_paper", "rehearsal_extended")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups off the markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        groups = {group for name, group in SHARED_RUN_GROUPS.items() if name in fixtures}
        # test_rehearsal's `rehearsal` fixture is parametrised over the shipped configs
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "rehearsal" in callspec.params:
            groups.add(f"rehearsal_{callspec.params['rehearsal']}")
        assert len(groups) <= 1, f"{item.nodeid} reads the runs of several groups: {groups}"
        # Any other test stays with its module, whose module-scoped fixtures (loaded models,
        # dry-run plans) a worker would otherwise make again after each switch of module.
        group = groups.pop() if groups else item.path.name
        item.add_marker(pytest.mark.xdist_group(group))
        item.stash[_GROUP] = group
    rank = {group: i for i, group in enumerate(GROUP_ORDER)}
    items.sort(key=lambda item: rank.get(item.stash[_GROUP], len(rank)))


_GROUP = pytest.StashKey[str]()


def unavailable(what: str, reason: str) -> NoReturn:
    """A component this machine lacks (a browser, a cluster): one line and a skip, but a
    failure under CI=true, where every component must be present."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true: {reason}", pytrace=False)
    pytest.skip(f"{what} not run: {reason}")


def install_missing_packages(
    script: Path, missing: Callable[[], list[str]], what: str, timeout: float
) -> list[str]:
    """Run a Debian install script (apt-get, as root) when `missing()` names anything;
    return what is still missing. A failed install that left something missing is
    `unavailable`, with the script's output."""
    if missing() and os.geteuid() == 0 and shutil.which("apt-get"):
        install = subprocess.run(
            ["bash", str(script)],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
        )
        if install.returncode != 0 and missing():
            unavailable(
                what,
                f"{script.name} failed ({install.returncode}):\n"
                f"{(install.stdout + install.stderr)[-2000:]}",
            )
    return missing()


def _rule_declarations() -> dict[str, str]:
    """Each rule of rules/*.smk, by name: the text from its `rule` line to the next one."""
    declarations = {}
    for path in sorted((REPO / "rules").glob("*.smk")):
        parts = re.split(r"^\s*rule (\w+):$", path.read_text(), flags=re.MULTILINE)
        declarations.update(zip(parts[1::2], parts[2::2], strict=True))
    return declarations


def _model_rule_benchmarks() -> dict[str, str]:
    """The GPU rules (`gpu=` under resources) and each one's benchmark file pattern."""
    benchmarks = {}
    for name, text in _rule_declarations().items():
        if re.search(r"^\s*gpu=", text, flags=re.MULTILINE):
            found = re.search(r'^\s*benchmark:\s*"([^"]+)"', text, flags=re.MULTILINE)
            assert found, f"the GPU rule {name} declares no benchmark file"
            benchmarks[name] = found.group(1)
    assert benchmarks, "no GPU rule found in rules/*.smk"
    return benchmarks


# The rules that load a language model are the GPU rules; read from the rule files, so a
# new one is covered by the tests that assert such jobs are (not) planned without being
# listed there too. Each writes a benchmark (check_rules in rules/common.smk insists).
GPU_RULE_BENCHMARKS = _model_rule_benchmarks()
GPU_RULES = frozenset(GPU_RULE_BENCHMARKS)
# The GPU rule that scores the policies' decisions (the TruthfulQA probe's, by entailment
# with the NLI model where one is declared): downstream of the policies and on the probe's
# dataset only, so it is no model rule of the stages that make the decisions.
SCORING_RULES = frozenset({"truthfulqa_scores"})
MODEL_RULE_BENCHMARKS = {r: p for r, p in GPU_RULE_BENCHMARKS.items() if r not in SCORING_RULES}
MODEL_RULES = frozenset(MODEL_RULE_BENCHMARKS)
# The model rule of the re-ask audit, which a config plans only with reask_audit.questions
# set; every other model rule runs in every run of the tiny config.
AUDIT_MODEL_RULES = frozenset({"reask"})
# Every rule of rules/*.smk, those a config switches off included.
RULE_NAMES = frozenset(_rule_declarations())


def ensure_micro_model() -> Path:
    """Build the tiny config's micro model where the config expects it, once, and its
    manifest in the shared resources; the model's bytes must match the sha256 pinned in
    the config (the builder is deterministic). Under a machine-wide lock: two workers'
    workflow runs would otherwise both fetch the manifest, each replacing the other's."""
    global _micro_ready
    if _micro_ready:
        return Path(yaml.safe_load(TINY.read_text())["assets"][MICRO_ASSET]["path"]).expanduser()
    with LOCK_FILE.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            target = _build_micro_model()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    _micro_ready = True
    return target


def ensure_test_assets() -> None:
    """Every locally built asset of the tiny config: the micro model and the stand-ins of
    the BIG-bench task files (tests/bigbench_standins.py), each with its manifest."""
    global _standins_ready
    ensure_micro_model()
    if _standins_ready:
        return
    with LOCK_FILE.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            _build_bigbench_standins()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    _standins_ready = True


LOCK_FILE = Path(tempfile.gettempdir()) / "grabrag-test-micro-model.lock"
_standins_ready = False
SQUAD_ASSET = "squad-v1.1-dev"
NER_ASSET = "en-core-web-sm"
KNOWLEDGE_CONFLICTS_STANDIN = "bigbench-knowledge-conflicts-standin"
TRUTHFUL_QA_STANDIN = "bigbench-truthful-qa-standin"


def _fetched(asset: str) -> Path:
    """The file of one of the tiny config's registry assets, fetched through the workflow
    into the shared resources when missing."""
    from grabrag.data.assets import resolve

    manifest = RESOURCES / asset / "manifest.json"
    if not manifest.exists():
        fetch = subprocess.run(
            _command(Path(tempfile.mkdtemp(prefix="grabrag-fetch-")), str(manifest)),
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        assert fetch.returncode == 0, fetch.stdout[-3000:] + fetch.stderr[-3000:]
    return resolve(manifest)


def _built_asset(name: str, build: Callable[[Path], None], what: str) -> Path:
    """A `path` asset of the tiny config made by ``build(target)`` unless its pinned bytes
    are there already, and its manifest in the shared resources."""
    from grabrag.data.asset_checks import sha256_file
    from grabrag.data.assets import manifest_path, materialise

    spec = yaml.safe_load(TINY.read_text())["assets"][name]
    target = Path(spec["path"]).expanduser()
    if not (target.is_file() and sha256_file(target) == spec["sha256"]):
        build(target)
        built = sha256_file(target)
        assert built == spec["sha256"], (
            f"{target} built by {what} has sha256 {built}, the tiny config pins "
            f"{spec['sha256']}: {what} changed; update the pin of '{name}' in {TINY}"
        )
    manifest = Path(manifest_path(str(RESOURCES), name))
    if not manifest.exists():
        materialise(name, spec, manifest)
    return target


def _build_micro_model() -> Path:
    from .micro_model import build_micro_gguf

    return _built_asset(
        MICRO_ASSET,
        lambda target: build_micro_gguf(_fetched(REAL_MODEL_ASSET), target),
        "tests/micro_model.py",
    )


def _build_bigbench_standins() -> None:
    from .bigbench_standins import knowledge_conflicts_task, truthful_qa_questions, write_task

    def conflicts(target: Path) -> None:
        import spacy

        squad = json.loads(_fetched(SQUAD_ASSET).read_text(encoding="utf-8"))
        nlp = spacy.load(_fetched(NER_ASSET))
        write_task(knowledge_conflicts_task(squad, nlp), target)

    what = "tests/bigbench_standins.py"
    _built_asset(KNOWLEDGE_CONFLICTS_STANDIN, conflicts, what)
    _built_asset(TRUTHFUL_QA_STANDIN, lambda t: write_task(truthful_qa_questions(), t), what)


def snakemake_command(
    workdir: Path,
    *args: str,
    configfile: Path = TINY,
    snakefile: Path = REPO / "Snakefile",
    resources: Path = RESOURCES,
) -> list[str]:
    """The real workflow in ``workdir`` with the tiny config and the shared resources."""
    if "-n" not in args and "--lint" not in args:
        ensure_test_assets()
    return _command(workdir, *args, configfile=configfile, snakefile=snakefile, resources=resources)


def _command(
    workdir: Path,
    *args: str,
    configfile: Path = TINY,
    snakefile: Path = REPO / "Snakefile",
    resources: Path = RESOURCES,
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(snakefile),
        "--directory",
        str(workdir),
        "--configfile",
        str(configfile),
        "--config",
        f"resources_dir={resources}",
        "--cores",
        str(CORES),
        *args,
    ]


def snakemake(
    workdir: Path,
    *args: str,
    configfile: Path = TINY,
    snakefile: Path = REPO / "Snakefile",
    check: bool = True,
    timeout: int = 1800,
    env: dict[str, str] | None = None,
    resources: Path = RESOURCES,
) -> subprocess.CompletedProcess[str]:
    cmd = snakemake_command(
        workdir, *args, configfile=configfile, snakefile=snakefile, resources=resources
    )
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, **env} if env else None,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"snakemake failed ({proc.returncode}): {' '.join(cmd)}\n"
            f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-6000:]}"
        )
    return proc


def planned_jobs(dry_run_output: str) -> dict[str, int]:
    """The 'Job stats' table of a dry run, as {rule: count} ({} when nothing is to be done)."""
    if "Job stats:" not in dry_run_output:
        assert "Nothing to be done" in dry_run_output, dry_run_output
        return {}
    table = dry_run_output.split("Job stats:", 1)[1].split("Reasons:", 1)[0]
    jobs = {}
    for line in table.splitlines():
        match = re.fullmatch(r"(\w+)\s+(\d+)", line.strip())
        if match and match.group(1) != "total":
            jobs[match.group(1)] = int(match.group(2))
    return jobs


def copy_run(tiny_run: Path, workdir: Path) -> None:
    """The finished run's results and Snakemake metadata, to plan or rerun against."""
    shutil.copytree(tiny_run / "results", workdir / "results", dirs_exist_ok=True)
    shutil.copytree(
        tiny_run / ".snakemake",
        workdir / ".snakemake",
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns("locks", "incomplete"),
    )


def copy_workflow(dest: Path) -> Path:
    """A copy of the workflow's source (Snakefile, rules, library, scripts, envs) to edit;
    the copy's own `grabrag` is the one its rules hash. Returns `dest`."""
    dest.mkdir(parents=True)
    for part in ("Snakefile", "config.yaml"):
        shutil.copy2(REPO / part, dest / part)
    for part in ("rules", "workflow", "envs", "profiles"):
        shutil.copytree(REPO / part, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real SmolLM2-135M GGUF (the embedded default's model), fetched if missing."""
    from grabrag.data.assets import resolve

    manifest = RESOURCES / REAL_MODEL_ASSET / "manifest.json"
    if not manifest.exists():
        snakemake(tmp_path_factory.mktemp("fetch"), str(manifest))
    return resolve(manifest)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One complete run of the tiny config; tests read its outputs and must not modify them."""
    workdir = tmp_path_factory.mktemp("tiny_run")
    snakemake(workdir)
    return workdir


@pytest.fixture(scope="session")
def encoder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real all-MiniLM-L6-v2 folder, materialised through the workflow if missing."""
    from grabrag.data.assets import resolve

    manifest = RESOURCES / "all-minilm-l6-v2" / "manifest.json"
    if not manifest.exists():
        snakemake(tmp_path_factory.mktemp("fetch"), str(manifest))
    return resolve(manifest)


# --- llama-cpp-python's OpenAI-compatible server, for the endpoint backend ---------------

SERVED_NAME = "micro-served"
KEY_VARIABLE = "GRABRAG_TEST_ENDPOINT_KEY"
KEY = "grabrag-test-key"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(
    model: Path,
    log: Path,
    threads: int = CORES,
    n_ctx: int = 4096,
    alias: str = SERVED_NAME,
    api_key: str | None = KEY,
) -> tuple[subprocess.Popen[bytes], str]:
    """llama-cpp-python's server on ``model`` on a free loopback port (by default on this
    worker's cores, as a model job of the tiny run, with the tests' API key), once it
    answers: the process and its base URL. benchmarks/bench_endpoint.py starts it too."""
    port = free_port()
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(model)]
    command += ["--model_alias", alias, "--host", "127.0.0.1", "--port", str(port)]
    command += ["--n_ctx", str(n_ctx), "--n_threads", str(threads)]
    command += ["--n_threads_batch", str(threads)]
    if api_key is not None:
        command += ["--api_key", api_key]
    proc = subprocess.Popen(command, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key is not None else {}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"llama_cpp.server exited: {log.read_text()[-3000:]}")
        request = urllib.request.Request(base_url + "/models", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=5):
                return proc, base_url
        except OSError:
            time.sleep(0.3)
    proc.terminate()
    raise AssertionError(f"llama_cpp.server did not answer in 120 s: {log.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a real llama_cpp.server on the micro model (with an API key)."""
    model = ensure_micro_model()
    log = tmp_path_factory.mktemp("server") / "server.log"
    proc, base_url = serve(model, log)
    try:
        yield base_url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
