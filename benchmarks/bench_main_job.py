"""The main job (`snakemake` on the embedded default) at several commits or settings, one
after another on this machine: each run's wall time, its ratio to the first, and whether
every row the runs wrote agrees with the first run's once timing fields are dropped.

    python benchmarks/bench_main_job.py 144e70c HEAD
    python benchmarks/bench_main_job.py HEAD "HEAD --resources gpu=2"

Each argument is a commit, optionally followed by extra `snakemake` arguments. Each run
gets a fresh clone of this repository at that commit in a temporary folder (its own
library: the scripts import the checkout's `grabrag`) and shares one `resources_dir`, so
assets are fetched once and no run pays for a download (the first run of an empty
resources folder does: run once before timing). Runs go one at a time; run it on an
otherwise idle machine and note its load. The README's command is the one timed.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# What differs between two runs of the same rows: how long they took.
TIMING_KEYS = {
    "seconds",
    "question_seconds",
    "generator_seconds",
    "evaluator_seconds",
    "cb_seconds",
    "peak_memory",
}


def without_timing(value: object) -> object:
    if isinstance(value, dict):
        return {k: without_timing(v) for k, v in value.items() if k not in TIMING_KEYS}
    if isinstance(value, list):
        return [without_timing(v) for v in value]
    return value


def rows(results: Path) -> dict[str, list[object]]:
    """Every JSONL file under results/, by relative path, timing fields dropped."""
    found = {}
    for path in sorted(results.rglob("*.jsonl")):
        if path.name.startswith(".") or "endpoint-cache" in path.parts:
            continue
        lines = path.read_text().splitlines()
        found[str(path.relative_to(results))] = [without_timing(json.loads(x)) for x in lines]
    return found


def run(spec: str, workdir: Path, resources: Path) -> float:
    commit, *extra = shlex.split(spec)
    subprocess.run(["git", "clone", "-q", "--shared", str(REPO), str(workdir)], check=True)
    subprocess.run(["git", "-C", str(workdir), "checkout", "-q", commit], check=True)
    command = [sys.executable, "-m", "snakemake", "--config", f"resources_dir={resources}"]
    started = time.perf_counter()
    proc = subprocess.run(
        [*command, *extra], cwd=workdir, capture_output=True, text=True, env=os.environ.copy()
    )
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"{spec}: snakemake failed ({proc.returncode})\n{proc.stderr[-4000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "runs", nargs="+", help='a commit, optionally with snakemake args: "HEAD --resources gpu=2"'
    )
    parser.add_argument("--resources-dir", type=Path, default=REPO / "resources")
    args = parser.parse_args()
    print(f"load at start: {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="bench-main-job-") as tmp:
        first_seconds, first_rows = None, None
        for i, spec in enumerate(args.runs):
            workdir = Path(tmp) / f"run{i}"
            seconds = run(spec, workdir, args.resources_dir.resolve())
            found = rows(workdir / "results")
            if first_rows is None:
                first_seconds, first_rows, agree = seconds, found, "-"
            else:
                differ = [p for p in first_rows if found.get(p) != first_rows[p]]
                missing = sorted(set(first_rows) ^ set(found))
                agree = "yes" if not differ and not missing else f"no: {(differ + missing)[:5]}"
            ratio = first_seconds / seconds
            print(f"{spec}: {seconds:.1f} s, {ratio:.2f}x the first, rows agree: {agree}")


if __name__ == "__main__":
    main()
