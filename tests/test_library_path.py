"""A rule script imports its own checkout's grabrag, never an installed copy."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from .conftest import REPO, copy_workflow

PROBE = """import _grabrag_path  # noqa: F401
import grabrag
from pathlib import Path
Path(snakemake.output[0]).write_text(grabrag.__file__ + "\\n" + grabrag.__version__)
"""


def _run_probe(tmp_path: Path, clone: Path, pythonpath: Path) -> subprocess.CompletedProcess:
    """A real Snakemake job whose script lives in ``clone``'s scripts folder, with another
    copy of grabrag first on the job's path (as an installed copy is)."""
    (clone / "workflow/scripts/probe.py").write_text(PROBE)
    snakefile = tmp_path / "Snakefile"
    snakefile.write_text(
        f'rule probe:\n    output: "loaded.txt"\n    script: "{clone}/workflow/scripts/probe.py"\n'
    )
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(snakefile), "-c1", "-d", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )


def _clone_and_installed_copy(tmp_path: Path) -> tuple[Path, Path]:
    """A second clone of the workflow, and a site folder holding a copy of the library to
    put ahead of it on the path (a non-editable install, or a venv shared with another
    checkout)."""
    clone = copy_workflow(tmp_path / "clone")
    installed = tmp_path / "site"
    shutil.copytree(REPO / "workflow/grabrag", installed / "grabrag")
    return clone, installed


def test_a_job_runs_its_checkouts_library_over_an_installed_copy(tmp_path: Path) -> None:
    clone, installed = _clone_and_installed_copy(tmp_path)
    (installed / "grabrag/__init__.py").write_text('__version__ = "the installed copy"\n')
    proc = _run_probe(tmp_path, clone, installed)
    assert proc.returncode == 0, proc.stderr[-3000:]
    where, version = (tmp_path / "loaded.txt").read_text().splitlines()
    assert Path(where).resolve() == (clone / "workflow/grabrag/__init__.py").resolve()
    assert version != "the installed copy"


def test_a_job_with_another_grabrag_already_imported_stops_naming_both(tmp_path: Path) -> None:
    clone, installed = _clone_and_installed_copy(tmp_path)
    # sitecustomize runs at interpreter start: the other copy is imported before the script
    (installed / "sitecustomize.py").write_text("import grabrag\n")
    proc = _run_probe(tmp_path, clone, installed)
    assert proc.returncode != 0
    assert "imported grabrag from" in proc.stderr
    assert str((installed / "grabrag").resolve()) in proc.stderr
    assert str((clone / "workflow/grabrag").resolve()) in proc.stderr
    assert not (tmp_path / "loaded.txt").exists()
