"""One GPU per model job: real processes claim fake devices (CUDA_VISIBLE_DEVICES entries
on a machine without a GPU; the claim only reads and narrows that list)."""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from grabrag.core.devices import claim_gpu, visible_devices

from .conftest import MODEL_RULES, REPO, snakemake

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


@pytest.mark.integration
def test_workflow_model_jobs_each_claim_their_own_device(tmp_path: Path) -> None:
    """`--resources gpu=2` with two (fake) devices: every model job logs its device, both
    devices are used, and no two jobs that ran at the same time shared one."""
    conditions = ("Q100", "Q50", "Q0")
    targets = [f"results/generation/micro/nq_bigbench/{c}/P1.jsonl" for c in conditions]
    targets.append("results/generation/micro/nq_bigbench/Qclosed/CB.jsonl")
    env = {"CUDA_VISIBLE_DEVICES": "0,1", "GRABRAG_GPU_LOCKS": str(tmp_path / "locks")}
    # two cores whatever the worker's share, so that two model jobs (one thread each) can run
    snakemake(tmp_path / "run", *targets, "--cores", "2", "--resources", "gpu=2", env=env)
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
    for rule in MODEL_RULES:
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
