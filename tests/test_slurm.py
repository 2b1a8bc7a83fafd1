"""The tiny config through profiles/slurm on a real single-node SLURM.

tests/slurm/slurm_up.sh starts munged, MariaDB, slurmdbd, slurmctld and slurmd (a node of
16 CPUs and two fake GPUs in gres.conf) under a temporary folder; the job status goes through
`sacct`, the executor plugin's default. The daemons are stopped by pid afterwards whether the
tests passed or not.
Needs root; the Debian packages are installed by tests/slurm/install_packages.sh when missing.
Where that cannot be done (no root, no apt-get) the tests say so in one line and skip, except
under CI=true, where the skip is a failure: CI always runs them. The first test is also the
suite's "two clean runs give identical outputs" check: the SLURM run and the local run are
two independent runs of the same work.

The cluster runs the tiny config's paper pipeline (policies P0-P4) on its SQuAD questions
in two of the context conditions, Q0 and QC (QC needs the whole CPU chain: swaps and the
QC contexts), up to the metrics: every SLURM job adds ~20 s of scheduling and start-up on
CI's 2 cores, too slow to run the whole tiny config, and each further condition adds only
more jobs of the same rules. The same targets run locally first (the `local_pipeline`
fixture, with the workflow profile as `snakemake` uses it): every file the cluster writes,
metrics included, must equal the local run's.
"""

from __future__ import annotations

import fcntl
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from .conftest import (
    GPU_RULES,
    REPO,
    RULE_NAMES,
    TINY,
    copy_run,
    install_missing_packages,
    snakemake,
    snakemake_command,
    unavailable,
)
from .test_workflow import _outputs, planned_jobs

pytestmark = pytest.mark.integration

SLURM_DIR = REPO / "tests" / "slurm"
PROFILE = REPO / "profiles" / "slurm"
SLURM_TEST = "real-SLURM test"
INSTALL_TIMEOUT = 900
REQUIRED_TOOLS = (
    "munged",
    "munge",
    "unmunge",
    "mungekey",
    "runuser",
    "mariadbd",
    "mariadb",
    "mariadb-install-db",
    "slurmdbd",
    "slurmctld",
    "slurmd",
    "sbatch",
    "squeue",
    "sacct",
    "sacctmgr",
    "scancel",
    "sinfo",
)
# Status polling in seconds instead of the profile's cluster-friendly intervals; nothing else
# differs from `snakemake --profile profiles/slurm`.
FAST_POLLING = (
    "--slurm-init-seconds-before-status-checks",
    "2",
    "--seconds-between-status-checks",
    "2",
    "--latency-wait",
    "10",
)
# A wrong status setup makes snakemake wait forever: every run is bounded.
UP_TIMEOUT = 240
DOWN_TIMEOUT = 180
RUN_TIMEOUT = 2400
LOCK = Path(tempfile.gettempdir()) / "grabrag-slurm-test.lock"
LOCK_TIMEOUT = 3600


def _missing_tools() -> list[str]:
    return [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]


def _tail(text: str | bytes | None, n: int = 6000) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return (text or "")[-n:]


def _cluster_report(base: Path) -> str:
    """Queue, accounting and daemon log tails: what a failure message needs."""
    parts = []
    for cmd in (["squeue"], ["sacct", "-X", "-a", "-o", "JobID,State,AllocTRES%60,Comment%80"]):
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
            parts.append(f"--- {' '.join(cmd)} ---\n{out.stdout}{out.stderr}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            parts.append(f"--- {' '.join(cmd)} --- {exc}")
    for log in sorted((base / "log").glob("*.log")):
        parts.append(f"--- {log.name} ---\n{_tail(log.read_text(errors='replace'), 1500)}")
    return "\n".join(parts)


def _start_time(pid: int) -> str | None:
    """When the process with this pid started (field 22 of /proc/PID/stat), or None if
    there is none or only a zombie. A pid alone may name another process by the time it is
    checked: the kernel hands out pids again (pid_max is 32768 here, and the workflow's
    processes and threads wrap it in minutes); a pid with its start time names one."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else fields[19]


def _daemons(base: Path) -> dict[str, tuple[int, str]]:
    """Each running daemon's pid file name, with its pid and that process's start time."""
    daemons = {}
    for pidfile in (*base.glob("*.pid"), base / "db/run/mysqld.pid"):
        if pidfile.is_file() and pidfile.read_text().strip().isdigit():
            pid = int(pidfile.read_text().strip())
            if (started := _start_time(pid)) is not None:
                daemons[pidfile.name] = (pid, started)
    return daemons


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A running single-node SLURM; yields its state folder. Stopped by pid at the end."""
    script = SLURM_DIR / "install_packages.sh"
    missing = install_missing_packages(script, _missing_tools, SLURM_TEST, INSTALL_TIMEOUT)
    if missing:
        unavailable(
            SLURM_TEST,
            f"SLURM is not installed (missing: {', '.join(missing)}) and cannot be installed "
            f"here (needs root and apt-get: {script})",
        )
    if os.geteuid() != 0:
        unavailable(
            SLURM_TEST, "the SLURM test starts munged and the SLURM daemons: run it as root"
        )
    # One test cluster per machine at a time (ports and /etc/slurm are global).
    lock = LOCK.open("w")
    deadline = time.monotonic() + LOCK_TIMEOUT
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                pytest.fail(f"another SLURM test held {LOCK} for {LOCK_TIMEOUT} s")
            time.sleep(2)
    base = Path(tempfile.mkdtemp(prefix="grabrag-slurm-"))
    base.chmod(0o755)  # mysql and munge read below it
    started: dict[str, tuple[int, str]] = {}
    try:
        up_log = base / "slurm_up.out"
        with up_log.open("w") as out:
            try:
                proc = subprocess.run(
                    ["bash", str(SLURM_DIR / "slurm_up.sh"), str(base)],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    timeout=UP_TIMEOUT,
                )
                returncode = proc.returncode
            except subprocess.TimeoutExpired:
                returncode = "timeout"
        started = _daemons(base)
        if returncode != 0:
            pytest.fail(
                f"slurm_up.sh failed ({returncode}):\n{_tail(up_log.read_text())}\n"
                f"{_cluster_report(base)}",
                pytrace=False,
            )
        yield base
    finally:
        started.update(_daemons(base))
        try:
            down = subprocess.run(
                ["bash", str(SLURM_DIR / "slurm_down.sh"), str(base)],
                capture_output=True,
                text=True,
                timeout=DOWN_TIMEOUT,
            )
            down_report = f"rc {down.returncode}\n{down.stdout}{down.stderr}"
        except subprocess.TimeoutExpired as exc:
            down, down_report = None, f"timed out after {DOWN_TIMEOUT} s\n{_tail(exc.stdout)}"
        kept = tmp_path_factory.mktemp("slurm_daemon_logs")
        for log in (base / "log", base / "slurm_up.out"):
            if log.is_dir():
                shutil.copytree(log, kept / log.name, dirs_exist_ok=True)
            elif log.exists():
                shutil.copy(log, kept)
        survivors = {
            name: pid for name, (pid, start) in started.items() if _start_time(pid) == start
        }
        if not survivors:
            shutil.rmtree(base, ignore_errors=True)
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()
        assert not survivors, (
            f"daemons still running after slurm_down.sh: {survivors}\n{down_report}"
        )
        assert down is not None and down.returncode == 0, down_report


# The context conditions the cluster runs (the closed-book pass Qclosed always runs).
SLURM_CONDITIONS = ("Q0", "QC")


def paper_pipeline_config(directory: Path) -> Path:
    """The tiny config's SQuAD questions with the paper's policies in two conditions (see
    the module docstring); written to `directory`."""
    config = yaml.safe_load(TINY.read_text())
    config.setdefault("policies", {})["names"] = ["P0", "P1", "P2", "P3", "P4"]
    config.setdefault("generation", {})["conditions"] = list(SLURM_CONDITIONS)
    config["datasets"] = {"squad": config["datasets"]["squad"]}
    config["seed_sensitivity"] = None
    # The model offloads its layers, as on a GPU cluster, so its jobs ask SLURM for a GPU
    # (allow_cpu: the test node's llama.cpp is a CPU build; a model on the CPU asks for none).
    config["models"]["micro"].update(n_gpu_layers=-1, allow_cpu=True)
    for method in ("evidential", "cdd"):
        config.get(method, {}).pop("datasets", None)
    path = directory / "tiny_paper_pipeline.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


# What the cluster runs: the SQuAD metrics, so every stage upstream of them runs (data,
# retrieval, contexts, QC swaps, generation, NLI, policies). Tables and figures take one
# SLURM job of their own and test nothing more about the cluster.
TARGETS = ("results/metrics/squad.csv",)


@pytest.fixture(scope="module")
def local_pipeline(slurm_cluster: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The paper pipeline's targets run locally: the reference the cluster's run must equal,
    and the finished work the failing-rule test reruns on the cluster. (It asks for the
    cluster first, so that where there is none the tests skip before running anything.)"""
    workdir = tmp_path_factory.mktemp("local_pipeline")
    snakemake(workdir, *TARGETS, configfile=paper_pipeline_config(workdir))
    return workdir


def run_on_slurm(workdir: Path, base: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`snakemake --profile profiles/slurm` (as conftest.snakemake) on the tiny paper
    pipeline."""
    cmd = snakemake_command(
        workdir,
        "--profile",
        str(PROFILE),
        *FAST_POLLING,
        *args,
        configfile=paper_pipeline_config(workdir),
    )
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT, cwd=REPO)
    except subprocess.TimeoutExpired as exc:
        report = _cluster_report(base)
        # Our private cluster: cancel what the killed snakemake left queued or running.
        subprocess.run(["scancel", "--user=root"], capture_output=True, timeout=30)
        pytest.fail(
            f"snakemake on SLURM did not finish in {RUN_TIMEOUT} s (a status query that never "
            f"answers hangs it): {' '.join(cmd)}\n--- stdout ---\n{_tail(exc.stdout)}\n"
            f"--- stderr ---\n{_tail(exc.stderr)}\n{report}",
            pytrace=False,
        )


def slurm_jobs(output: str) -> list[dict[str, str]]:
    """The SLURM jobs of one snakemake run (found by its run ID), as sacct reports them."""
    match = re.search(r"SLURM run ID: (\S+)", output)
    assert match, "no SLURM run ID in the snakemake output: was the slurm executor used?"
    fields = ("JobIDRaw", "State", "AllocTRES", "Comment", "Start", "End")
    proc = subprocess.run(
        ["sacct", "-X", "-P", "--noheader", "-S", "now-1days", "-E", "now"]
        + ["--name", match.group(1), "-o", ",".join(fields)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return [dict(zip(fields, line.split("|"), strict=True)) for line in proc.stdout.splitlines()]


def tres(job: dict[str, str]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in job["AllocTRES"].split(",") if "=" in item)


def gpu_rules(dry_run_output: str) -> set[str]:
    """Rules whose jobs declare `gpu=1` in a dry run's job listing."""
    rules, rule = set(), None
    for line in dry_run_output.splitlines():
        if match := re.match(r"(?:local)?rule (\w+):", line):
            rule = match.group(1)
        elif rule and line.strip().startswith("resources:") and "gpu=1" in line:
            rules.add(rule)
    return rules


def test_the_profile_names_only_the_workflows_rules_and_places_every_rule() -> None:
    """A misspelt rule name in the profile is ignored by Snakemake: its jobs would run one
    SLURM job each with the default memory and runtime. The tiny run on the cluster below
    plans only some rules, so the profile is checked here against every rule there is."""
    profile = yaml.safe_load((PROFILE / "config.yaml").read_text())
    for section in ("groups", "set-resources", "set-threads"):
        unknown = set(profile[section]) - RULE_NAMES
        assert not unknown, f"the profile's {section} names no rule: {sorted(unknown)}"
    declared = re.search(
        r"^localrules:\n((?:\s+\w+,\n)+)", (REPO / "rules" / "assets.smk").read_text(), re.MULTILINE
    )
    assert declared, "no localrules in rules/assets.smk"
    local = set(re.findall(r"\w+", declared.group(1)))
    assert local == {"fetch_asset", "plan"}
    # each rule that runs as a job declares its memory and runtime
    assert set(profile["set-resources"]) == RULE_NAMES - local
    # every CPU rule is grouped; the model (GPU) rules run one SLURM job per cell
    assert RULE_NAMES - local - set(profile["groups"]) == GPU_RULES


def test_tiny_config_on_slurm_equals_the_local_run(
    local_pipeline: Path, slurm_cluster: Path, tmp_path: Path
) -> None:
    profile = yaml.safe_load((PROFILE / "config.yaml").read_text())
    grouped = profile["groups"]
    plan_dir = tmp_path / "plan"
    plan_dir.mkdir()
    dry = subprocess.run(
        snakemake_command(plan_dir, "-n", *TARGETS, configfile=paper_pipeline_config(plan_dir)),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert dry.returncode == 0, dry.stdout + dry.stderr
    planned = planned_jobs(dry.stdout)
    gpu = gpu_rules(dry.stdout)
    assert {"generate_context_prompts", "generate_closed_book", "nli"} <= gpu
    assert planned["generate_context_prompts"] == planned["nli"] == len(SLURM_CONDITIONS)
    assert {"swaps", "qc_contexts", "policy", "metrics"} <= set(planned), planned
    planned_logs = set(re.findall(r"^\s+log: (results/logs/\S+)$", dry.stdout, re.MULTILINE))

    workdir = tmp_path / "run"
    workdir.mkdir()
    proc = run_on_slurm(workdir, slurm_cluster, *TARGETS)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{_tail(output, 8000)}\n{_cluster_report(slurm_cluster)}"

    # Every output is exactly the local run's (timing aside), the metrics included.
    local = _outputs(local_pipeline)
    on_slurm = _outputs(workdir)
    assert sorted(on_slurm) == sorted(local)
    assert [name for name in on_slurm if local[name] != on_slurm[name]] == []
    for condition in SLURM_CONDITIONS:
        for policy in ("P0", "P1", "P2", "P3", "P4"):
            assert f"policies/micro/squad/{condition}/{policy}.jsonl" in on_slurm
    assert "metrics/squad.csv" in on_slurm
    # Every rule job kept its log: each log the plan declares.
    logs = {str(p.relative_to(workdir)) for p in (workdir / "results/logs").rglob("*.log")}
    assert planned_logs and sorted(planned_logs - logs) == []

    jobs = slurm_jobs(output)
    assert jobs and all(job["State"] == "COMPLETED" for job in jobs), jobs
    by_comment: dict[str, list[dict[str, str]]] = {}
    for job in jobs:
        by_comment.setdefault(job["Comment"].split("_wildcards_")[0], []).append(job)
    # One SLURM job per cell for every rule not grouped; GPU rules got --gpus=1, and no job
    # asked for more CPUs than the node has.
    for rule, count in planned.items():
        if rule == "all" or rule in grouped:
            assert f"rule_{rule}" not in by_comment, f"{rule} is grouped in the profile"
            continue
        assert len(by_comment.get(f"rule_{rule}", [])) == count, (rule, by_comment.keys())
        for job in by_comment[f"rule_{rule}"]:
            assert tres(job).get("gres/gpu") == ("1" if rule in gpu else None), (rule, job)
    # Each job's CPUs are its threads from the profile's set-threads, even above the
    # submitting host's CPU count (the workflow profile's `cores: all` does not cap them).
    threads = profile["set-threads"]
    for rule in ("generate_context_prompts", "generate_closed_book", "nli"):
        for job in by_comment[f"rule_{rule}"]:
            assert int(tres(job)["cpu"]) == threads[rule], (rule, job)
    assert threads["generate_context_prompts"] > (os.cpu_count() or 1)
    # GPU jobs run side by side (the node has two GPUs), not one after another as the
    # workflow profile's local `gpu=1` would make them.
    spans = sorted(
        (datetime.fromisoformat(job["Start"]), datetime.fromisoformat(job["End"]))
        for rule in gpu
        for job in by_comment.get(f"rule_{rule}", [])
    )
    # two jobs that start and end in the same second overlap too
    overlapping = [(a, b) for i, a in enumerate(spans) for b in spans[i + 1 :] if b[0] < a[1]]
    assert overlapping, f"no two GPU jobs overlapped in time: {spans}"
    # Grouped rules: one `prep` job per dataset, the small summary jobs 20 to a SLURM job.
    group_jobs = [job for job in jobs if job["Comment"].startswith("rule_prep")]
    assert len(group_jobs) == 1, by_comment.keys()  # one dataset
    summary_rules = [rule for rule, group in grouped.items() if group == "summary"]
    n_summary = sum(planned.get(rule, 0) for rule in summary_rules)
    summary_jobs = [job for job in jobs if job["Comment"].startswith("rule_summary")]
    assert 1 <= len(summary_jobs) <= math.ceil(n_summary / 2) < n_summary
    # Every SLURM job kept its log (slurm-keep-successful-logs).
    slurm_logs = {p.stem for p in (workdir / ".snakemake/slurm_logs").rglob("*.log")}
    assert slurm_logs == {job["JobIDRaw"] for job in jobs}


def test_failing_rule_on_slurm_is_reported_and_its_log_kept(
    local_pipeline: Path, slurm_cluster: Path, tmp_path: Path
) -> None:
    copy_run(local_pipeline, tmp_path)
    # A truncated line in one context file: its generation and NLI jobs (one SLURM job each)
    # and the grouped qc_contexts job fail; the closed-book cell, which does not read it,
    # does not rerun.
    contexts = tmp_path / "results/contexts/squad/Q0.jsonl"
    lines = contexts.read_text().splitlines()
    lines[0] = lines[0][:40]
    contexts.write_text("\n".join(lines) + "\n")
    closed_book = {k: v for k, v in _outputs(tmp_path).items() if "Qclosed" in k}
    assert closed_book

    proc = run_on_slurm(tmp_path, slurm_cluster, *TARGETS)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, _tail(output)
    assert "Q0.jsonl, line 1: not valid JSON" in output, _tail(output)
    jobs = slurm_jobs(output)
    failed = {job["Comment"]: job for job in jobs if job["State"] == "FAILED"}
    cell = "rule_generate_context_prompts_wildcards_micro_squad_Q0"
    assert cell in failed, f"{jobs}\n{_tail(output)}"
    assert "Error in rule generate_context_prompts" in output
    assert f"SLURM-job '{failed[cell]['JobIDRaw']}' failed, SLURM status is: 'FAILED'" in output
    for job in failed.values():
        logs = list((tmp_path / ".snakemake/slurm_logs").rglob(f"{job['JobIDRaw']}.log"))
        assert len(logs) == 1, f"SLURM log of failed job {job} not kept"
        assert f"Logfile {logs[0]}:" in output  # the failure report shows it
        assert "not valid JSON" in logs[0].read_text(errors="replace")
    assert not [job for job in jobs if "closed_book" in job["Comment"]], jobs
    assert {k: v for k, v in _outputs(tmp_path).items() if "Qclosed" in k} == closed_book
