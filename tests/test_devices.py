"""How jobs get devices, cores and turns: one GPU per model job (real processes claim fake
devices: CUDA_VISIBLE_DEVICES entries on a machine without a GPU; the claim only reads and
narrows that list), GPU slots only for models that offload, and the context chain first."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

import pytest
import yaml

from grabrag.core.devices import claim_gpu, visible_devices

from .conftest import GPU_RULES, MODEL_RULES, REPO, TINY, snakemake

CLAIMER = """
import os, sys, time
sys.path.insert(0, sys.argv[1])
from grabrag.core.devices import claim_gpu
claim = claim_gpu(lock_dir=sys.argv[2], poll_seconds=0.05)
print(claim.device, os.environ["CUDA_VISIBLE_DEVICES"], flush=True)
while not os.path.exists(sys.argv[3]):
    time.sleep(0.05)
"""


def _claimer(lock_dir: Path, release: Path, devices: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["CUDA_VISIBLE_DEVICES"] = devices
    return subprocess.Popen(
        [sys.executable, "-c", CLAIMER, str(REPO / "workflow"), str(lock_dir), str(release)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _claimed(proc: subprocess.Popen[str], timeout: float) -> list[str] | None:
    """The device a claimer printed and the CUDA_VISIBLE_DEVICES it then saw, None when it
    printed nothing within ``timeout`` seconds."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    return proc.stdout.readline().split() if ready else None


def test_concurrent_jobs_get_distinct_devices_and_a_crash_frees_its_device(
    tmp_path: Path,
) -> None:
    release = tmp_path / "release"
    first, second = (_claimer(tmp_path / "locks", release, "0,1") for _ in range(2))
    try:
        claims = [_claimed(first, 30), _claimed(second, 30)]
        assert sorted(claim[0] for claim in claims) == ["0", "1"], claims
        assert all(device == visible for device, visible in claims)
        # Both devices held: a third job waits, and says so.
        third = _claimer(tmp_path / "locks", release, "0,1")
        assert _claimed(third, 2) is None
        # kill -9 of a holder frees its device for the waiting job.
        os.kill(first.pid, signal.SIGKILL)
        first.wait()
        assert _claimed(third, 30) == claims[0]
        release.touch()
        for proc in (second, third):
            assert proc.wait(30) == 0
        assert third.stderr is not None and "waiting for a free GPU" in third.stderr.read()
    finally:
        for proc in (first, second):
            if proc.poll() is None:
                proc.kill()


def test_a_claim_narrows_the_visible_devices_in_order(tmp_path: Path) -> None:
    env = {"CUDA_VISIBLE_DEVICES": "2,3"}
    first = claim_gpu(env, tmp_path)
    assert first is not None and first.device == "2" and env["CUDA_VISIBLE_DEVICES"] == "2"
    env = {"CUDA_VISIBLE_DEVICES": "2,3"}
    second = claim_gpu(env, tmp_path)  # the first still holds device 2
    assert second is not None and second.device == "3" and env["CUDA_VISIBLE_DEVICES"] == "3"
    assert (tmp_path / "gpu-2.lock").read_text() == f"{os.getpid()}\n"
    assert "GPU 3 claimed (CUDA_VISIBLE_DEVICES=3" in second.describe()


def test_nothing_to_claim_under_slurm_or_without_devices(tmp_path: Path) -> None:
    slurm = {"SLURM_JOB_ID": "7", "CUDA_VISIBLE_DEVICES": "0"}
    assert claim_gpu(slurm, tmp_path) is None
    assert slurm["CUDA_VISIBLE_DEVICES"] == "0"  # SLURM's assignment stays
    assert claim_gpu({"CUDA_VISIBLE_DEVICES": ""}, tmp_path) is None
    assert claim_gpu({"CUDA_VISIBLE_DEVICES": "-1"}, tmp_path) is None
    assert list(tmp_path.iterdir()) == []


def test_visible_devices(tmp_path: Path) -> None:
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "0, 1,"}) == ["0", "1"]
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "GPU-8f2a"}) == ["GPU-8f2a"]
    driver = tmp_path / "gpus"
    for pci in ("0000:17:00.0", "0000:65:00.0", "0000:ca:00.0"):
        (driver / pci).mkdir(parents=True)
    assert visible_devices({}, driver) == ["0", "1", "2"]
    assert visible_devices({}, tmp_path / "no-driver") == []


def _span(log: str) -> tuple[datetime, datetime]:
    stamps = re.findall(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ", log, re.MULTILINE)
    return (
        datetime.strptime(stamps[0], "%Y-%m-%d %H:%M:%S,%f"),
        datetime.strptime(stamps[-1], "%Y-%m-%d %H:%M:%S,%f"),
    )


def tiny_with_models(dest: Path, models: dict[str, dict[str, object]]) -> Path:
    """The tiny config with `models` in place of its own (each on the micro model's GGUF
    unless it says otherwise), written to `dest`."""
    config = yaml.safe_load(TINY.read_text())
    micro = config["models"]["micro"]
    config["models"] = {
        name: entry if "endpoint" in entry else {**micro, **entry} for name, entry in models.items()
    }
    if "micro" not in models:  # Table 13's rebuild names the micro model
        config["seed_sensitivity"] = None
    dest.write_text(yaml.safe_dump(config))
    return dest


class PlannedJob(NamedTuple):
    rule: str
    model: str  # "" for a job without a model wildcard
    threads: int
    gpu: int
    priority: int


def planned_job_list(dry_run_output: str) -> list[PlannedJob]:
    """Each job of a dry run's listing, with the threads, GPU slots and priority Snakemake
    prints for it (it leaves out one thread, no gpu and priority 0)."""

    def number(pattern: str, block: str, default: int) -> int:
        found = re.search(pattern, block, re.MULTILINE)
        return int(found.group(1)) if found else default

    jobs = []
    for block in re.split(r"\n\s*\n", dry_run_output):
        rule = re.search(r"^(?:local)?rule (\w+):$", block, re.MULTILINE)
        if not rule:
            continue
        model = re.search(r"^\s+wildcards: .*\bmodel=([\w.-]+)", block, re.MULTILINE)
        jobs.append(
            PlannedJob(
                rule.group(1),
                model.group(1) if model else "",
                number(r"^\s+threads: (\d+)$", block, 1),
                number(r"^\s+resources: .*\bgpu=(\d+)", block, 0),
                number(r"^\s+priority: (\d+)$", block, 0),
            )
        )
    return jobs


def planned_slots(dry_run_output: str) -> dict[tuple[str, str], set[tuple[int, int]]]:
    """Each planned model job's (rule, model) -> its (threads, gpu)."""
    slots: dict[tuple[str, str], set[tuple[int, int]]] = {}
    for job in planned_job_list(dry_run_output):
        if job.model:
            slots.setdefault((job.rule, job.model), set()).add((job.threads, job.gpu))
    return slots


@pytest.mark.parametrize("gpu_slots", [1, 2])
def test_only_a_model_that_offloads_holds_a_gpu_slot(tmp_path: Path, gpu_slots: int) -> None:
    """Every model-calling rule, planned on 2 cores: a GGUF on the CPU holds no GPU slot and
    runs with its `threads` (without: every core, or a share under --resources gpu=N),
    so its jobs run side by side; a GGUF that
    offloads holds one slot and a share of the cores; a served model one thread, no slot."""
    config = tiny_with_models(
        tmp_path / "models.yaml",
        {
            "cpu_one": {"n_gpu_layers": 0, "threads": 1},
            "cpu_all": {"n_gpu_layers": 0},
            "offloads": {"n_gpu_layers": -1, "allow_cpu": True},
            "served": {"endpoint": {"base_url": "http://127.0.0.1:9/v1", "model": "micro"}},
        },
    )
    targets = [
        path.format(model=model)
        for model in ("cpu_one", "cpu_all", "offloads", "served")
        for path in (
            "results/generation/{model}/nq_bigbench/Q100/P1.jsonl",
            "results/generation/{model}/nq_bigbench/Qclosed/CB.jsonl",
            "results/nli/{model}/nq_bigbench/Q100.jsonl",
            "results/evidential/{model}/nq_bigbench/Q100/EVID.jsonl",
            "results/cdd/{model}/nq_bigbench/Q100/traces.jsonl",
            "results/cdd/{model}/nq_bigbench/Q100/CAI.jsonl",
            "results/reask/{model}/nq_bigbench/Q100.jsonl",
        )
    ]
    resources = ("--resources", f"gpu={gpu_slots}")
    proc = snakemake(tmp_path, "-n", *targets, "--cores", "2", *resources, configfile=config)
    slots = planned_slots(proc.stdout)
    expected = {
        "cpu_one": {(1, 0)},
        "cpu_all": {(2 // gpu_slots, 0)},  # every core, shared as among N GPU jobs
        "offloads": {(2 // gpu_slots, 1)},
        "served": {(1, 0)},
    }
    for rule in MODEL_RULES:
        for model, want in expected.items():
            assert slots.get((rule, model)) == want, (rule, model, slots.get((rule, model)))


def test_the_context_chain_runs_first_and_its_all_core_jobs_before_the_rest(
    tmp_path: Path,
) -> None:
    """The tiny config planned on 2 cores: every job that builds contexts outranks every
    model job, and those that take every core outrank the rest, so none waits for a moment
    when no one-thread model job holds a core."""
    proc = snakemake(tmp_path, "-n", "--cores", "2")
    jobs = [(job.rule, job.threads, job.priority) for job in planned_job_list(proc.stdout)]
    chain = {"prepare_data", "embed", "retrieve", "build_contexts", "entity_pool", "swaps"}
    chain |= {"qc_contexts", "qx_contexts"}
    assert chain <= {rule for rule, _, _ in jobs}, jobs
    lowest_chain = min(priority for rule, _, priority in jobs if rule in chain)
    highest_model = max(priority for rule, _, priority in jobs if rule in MODEL_RULES)
    assert lowest_chain > highest_model, jobs
    all_cores = [(rule, p) for rule, threads, p in jobs if rule in chain and threads == 2]
    assert {rule for rule, _ in all_cores} == {"embed"}, all_cores
    assert min(p for _, p in all_cores) > max(
        priority for rule, threads, priority in jobs if threads == 1
    ), jobs


@pytest.mark.integration
def test_workflow_model_jobs_each_claim_their_own_device(tmp_path: Path) -> None:
    """`--resources gpu=2` with two (fake) devices: every model job logs its device, both
    devices are used, and no two jobs that ran at the same time shared one. The model asks
    to offload its layers (as on a GPU machine; allow_cpu: this llama.cpp is a CPU build)."""
    conditions = ("Q100", "Q50", "Q0")
    targets = [f"results/generation/micro/nq_bigbench/{c}/P1.jsonl" for c in conditions]
    targets.append("results/generation/micro/nq_bigbench/Qclosed/CB.jsonl")
    env = {"CUDA_VISIBLE_DEVICES": "0,1", "GRABRAG_GPU_LOCKS": str(tmp_path / "locks")}
    config = tiny_with_models(
        tmp_path / "offloads.yaml", {"micro": {"n_gpu_layers": -1, "allow_cpu": True}}
    )
    # two cores whatever the worker's share, so that two model jobs (one thread each) can run
    run = ("--cores", "2", "--resources", "gpu=2")
    snakemake(tmp_path / "run", *targets, *run, configfile=config, env=env)
    jobs = []
    for log in sorted((tmp_path / "run/results/logs/generate/micro/nq_bigbench").glob("*.log")):
        text = log.read_text()
        claimed = re.findall(r"GPU (\d) claimed \(CUDA_VISIBLE_DEVICES=(\d);", text)
        assert len(claimed) == 1 and claimed[0][0] == claimed[0][1], (log.name, text)
        jobs.append((claimed[0][0], *_span(text)))
    assert len(jobs) == len(conditions) + 1
    assert {device for device, _, _ in jobs} == {"0", "1"}, jobs
    shared = [
        (a, b) for a in jobs for b in jobs if a < b and a[0] == b[0] and a[1] < b[2] and b[1] < a[2]
    ]
    assert shared == [], shared


def test_every_gpu_rule_claims_its_device_before_llama_cpp_or_torch_loads() -> None:
    from .conftest import _rule_declarations

    declarations = _rule_declarations()
    for rule in GPU_RULES:
        script = re.search(r'^\s*script:\s*"([^"]+)"', declarations[rule], re.MULTILINE)
        assert script, f"GPU rule {rule} runs no script"
        source = (REPO / "rules" / script.group(1)).resolve().read_text()
        imports = re.findall(r"^(?:import|from) (\w+)", source, re.MULTILINE)
        assert "_job_gpu" in imports, f"{script.group(1)} (rule {rule}) claims no GPU"
        claim = imports.index("_job_gpu")
        assert imports.index("_grabrag_path") < claim, script.group(1)
        assert all(imports.index(m) > claim for m in ("llama_cpp", "torch") if m in imports)


def test_the_claim_loads_no_cuda_library() -> None:
    """What the GPU scripts import ahead of llama_cpp loads neither numpy, torch nor llama.cpp
    (see test_generation's check of their import order)."""
    scripts = REPO / "workflow" / "scripts"
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, _grabrag_path, _job_gpu; print(*sys.modules)"],
        cwd=scripts,
        env={**os.environ, "PYTHONPATH": str(scripts)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert "grabrag.core.devices" in loaded
    assert not {"numpy", "torch", "llama_cpp"} & set(loaded)
