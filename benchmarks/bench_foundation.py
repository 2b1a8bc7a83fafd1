"""Time the data + retrieval + contexts stages.

Runs the real workflow twice in fresh working directories, with the shared
``resources/`` (so first-time downloads are excluded):

1. the embedded default (config.yaml), target: under 3 minutes on 2 cores;
2. 500 SQuAD questions over the full SQuAD dev corpus (2,067 paragraphs).

Prints wall-clock time per run and each rule's own time (from the rule logs).
Usage: python benchmarks/bench_foundation.py [--cores 2]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
RESOURCES = REPO / "resources"
SNAKEMAKE = [sys.executable, "-m", "snakemake"]  # targets go first: --quiet takes a list


def run(name: str, config: dict, cores: int) -> None:
    with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp:
        workdir = Path(tmp)
        configfile = workdir / "config.yaml"
        configfile.write_text(yaml.safe_dump({**config, "resources_dir": str(RESOURCES)}))
        # Materialise assets first so the timed run excludes downloads.
        options = [
            "--snakefile",
            str(REPO / "Snakefile"),
            "--directory",
            str(workdir),
            "--configfile",
            str(configfile),
            "--cores",
            str(cores),
            "--quiet",
            "all",
        ]
        needed = {config["retrieval"]["encoder"]} | {
            d["asset"] for d in config["datasets"].values()
        }
        manifests = [f"{RESOURCES}/{a}/manifest.json" for a in sorted(needed)]
        subprocess.run([*SNAKEMAKE, *manifests, *options], check=True, capture_output=True)
        started = time.perf_counter()
        proc = subprocess.run([*SNAKEMAKE, "all", *options], capture_output=True, text=True)
        wall = time.perf_counter() - started
        if proc.returncode != 0:
            print(proc.stderr[-3000:])
            raise SystemExit(f"{name}: snakemake failed")
        print(
            f"\n== {name}: {wall:.1f} s wall clock on {cores} cores "
            f"(load average before: {os.getloadavg()[0]:.2f})"
        )
        for log in sorted((workdir / "results" / "logs").rglob("*.log")):
            match = re.search(r"done in ([0-9.]+) s", log.read_text())
            if match:
                print(f"   {log.parent.name:15s} {log.stem:12s} {float(match.group(1)):7.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()
    embedded = yaml.safe_load((REPO / "config.yaml").read_text())
    run("embedded-default", embedded, args.cores)
    squad500 = yaml.safe_load((REPO / "config.yaml").read_text())
    squad500["datasets"] = {
        "squad": {**squad500["datasets"]["squad"], "n_questions": 500, "corpus_max_passages": None}
    }
    run("squad-500", squad500, args.cores)


if __name__ == "__main__":
    main()
