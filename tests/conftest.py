"""Shared helpers: running the real workflow on the tiny config."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "config" / "tiny.yaml"
# Assets are shared with the main run so a test session never downloads twice.
RESOURCES = Path(os.environ.get("GRABRAG_RESOURCES", REPO / "resources")).resolve()


def snakemake_command(
    workdir: Path, *args: str, configfile: Path = TINY, snakefile: Path = REPO / "Snakefile"
) -> list[str]:
    """The real workflow in ``workdir`` with the tiny config and the shared resources."""
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
        f"resources_dir={RESOURCES}",
        "--cores",
        "2",
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
) -> subprocess.CompletedProcess[str]:
    cmd = snakemake_command(workdir, *args, configfile=configfile, snakefile=snakefile)
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


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One complete run of the tiny config; tests read its outputs and must not modify them."""
    workdir = tmp_path_factory.mktemp("tiny_run")
    snakemake(workdir)
    return workdir


@pytest.fixture(scope="session")
def encoder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real all-MiniLM-L6-v2 folder, materialised through the workflow if missing."""
    from grabrag.assets import resolve

    manifest = RESOURCES / "all-minilm-l6-v2" / "manifest.json"
    if not manifest.exists():
        snakemake(tmp_path_factory.mktemp("fetch"), str(manifest))
    return resolve(manifest)
