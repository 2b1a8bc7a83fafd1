"""One GPU per model job on a multi-GPU machine.

Snakemake gives a local job a count of a resource (`--resources gpu=N` runs up to N model
jobs at once) but no device ids, so every job would see every GPU and all of them would
load onto the first. A model job therefore claims one free device before llama.cpp or
torch loads: an exclusive lock on one file per device, in a folder every job on the
machine shares, held for the life of the process (the kernel drops it when the process
ends, a crash or kill -9 included), and CUDA_VISIBLE_DEVICES narrowed to that device.
A job that finds every device held waits for one. Under SLURM a job keeps the devices
SLURM assigned it.
"""

from __future__ import annotations

import fcntl
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

LOCK_DIR_ENV = "GRABRAG_GPU_LOCKS"
DEFAULT_LOCK_DIR = Path(tempfile.gettempdir()) / "grabrag-gpu-locks"
NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")
POLL_SECONDS = 1.0
NOTE_EVERY_SECONDS = 60.0


@dataclass(frozen=True)
class DeviceClaim:
    """A device this process holds until it exits (``handle`` keeps the lock)."""

    device: str
    lock_file: Path
    waited_s: float
    handle: IO[str]

    def describe(self) -> str:
        waited = f", after waiting {self.waited_s:.0f} s" if self.waited_s >= 1 else ""
        return (
            f"GPU {self.device} claimed (CUDA_VISIBLE_DEVICES={self.device}; lock "
            f"{self.lock_file}{waited})"
        )


# The claim of this process, made by the GPU rules' scripts before llama.cpp or torch
# loads (workflow/scripts/_job_gpu.py); run_rule logs it.
CLAIM: DeviceClaim | None = None


def visible_devices(
    env: MutableMapping[str, str] | None = None, nvidia_gpus: Path = NVIDIA_GPUS
) -> list[str]:
    """The devices a job may use: CUDA_VISIBLE_DEVICES's entries where it is set (empty or
    ``-1``: none), else one per GPU the NVIDIA driver lists, else none."""
    env = os.environ if env is None else env
    if "CUDA_VISIBLE_DEVICES" in env:
        entries = [d.strip() for d in env["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()]
        # CUDA stops at the first invalid entry; "-1" is the usual way to hide every GPU
        if entries and entries[0].startswith("-"):
            return []
        return entries
    if nvidia_gpus.is_dir():
        return [str(i) for i in range(len(list(nvidia_gpus.iterdir())))]
    return []


def _lock_name(device: str) -> str:
    return "gpu-" + re.sub(r"[^A-Za-z0-9_.-]", "_", device) + ".lock"


def claim_gpu(
    env: MutableMapping[str, str] | None = None,
    lock_dir: Path | None = None,
    note: Callable[[str], None] | None = None,
    nvidia_gpus: Path = NVIDIA_GPUS,
    poll_seconds: float = POLL_SECONDS,
) -> DeviceClaim | None:
    """Claim one free device and narrow ``env``'s CUDA_VISIBLE_DEVICES to it; None where
    there is nothing to choose (no device, or SLURM assigned this job's)."""
    env = os.environ if env is None else env
    if "SLURM_JOB_ID" in env:
        return None
    devices = visible_devices(env, nvidia_gpus)
    if not devices:
        return None
    lock_dir = Path(lock_dir or env.get(LOCK_DIR_ENV) or DEFAULT_LOCK_DIR)
    lock_dir.mkdir(parents=True, exist_ok=True)
    note = note or (lambda message: print(message, file=sys.stderr, flush=True))
    started = time.monotonic()
    last_note: float | None = None
    while True:
        for device in devices:
            path = lock_dir / _lock_name(device)
            handle = path.open("a+")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            handle.seek(0)
            handle.truncate()
            handle.write(f"{os.getpid()}\n")
            handle.flush()
            env["CUDA_VISIBLE_DEVICES"] = device
            return DeviceClaim(device, path, time.monotonic() - started, handle)
        now = time.monotonic()
        if last_note is None or now - last_note >= NOTE_EVERY_SECONDS:
            note(
                f"waiting for a free GPU: every one of {', '.join(devices)} is held by another "
                f"model job (lock files in {lock_dir}, each naming its holder's pid)"
            )
            last_note = now
        time.sleep(poll_seconds)
