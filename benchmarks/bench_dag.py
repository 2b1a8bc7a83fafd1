"""How long Snakemake takes to plan (dry-run) the paper config and a synthetic config
about ten times larger, in an empty working directory.

    python benchmarks/bench_dag.py [--repeats 3]

The synthetic config is `config/extended.yaml` (the paper plus every extension) with six
models (each of the paper's three twice, under new names), four datasets (NQ and
HotpotQA twice each) and 5,000 questions per dataset. One file per cell keeps the DAG's
size independent of the number of questions; the number of cells is what grows.
"""

from __future__ import annotations

import argparse
import copy
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def synthetic_config() -> dict:
    config = yaml.safe_load((REPO / "config/extended.yaml").read_text())
    for name, spec in list(config["models"].items()):
        config["models"][f"{name}-copy"] = copy.deepcopy(spec)
    for name, spec in list(config["datasets"].items()):
        spec["n_questions"] = 5000
        config["datasets"][f"{name}-copy"] = copy.deepcopy(spec)
    return config


def dry_run(configfile: Path) -> tuple[float, int]:
    with tempfile.TemporaryDirectory(prefix="grabrag-dag-") as workdir:
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile")]
            + ["--directory", workdir, "--configfile", str(configfile), "-n"],
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"dry run of {configfile} failed:\n{proc.stdout[-3000:]}{proc.stderr}")
    match = re.search(r"^total\s+(\d+)", proc.stdout, re.M)
    return seconds, int(match.group(1)) if match else -1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        synthetic = Path(tmp) / "synthetic.yaml"
        synthetic.write_text(yaml.safe_dump(synthetic_config()))
        for label, configfile in (
            ("config/paper.yaml", REPO / "config/paper.yaml"),
            ("config/extended.yaml", REPO / "config/extended.yaml"),
            ("synthetic (6 models x 4 datasets, extended)", synthetic),
        ):
            runs = [dry_run(configfile) for _ in range(args.repeats)]
            seconds = [s for s, _ in runs]
            print(
                f"{label}: {runs[0][1]} jobs, dry run median {statistics.median(seconds):.1f} s "
                f"(min {min(seconds):.1f}, max {max(seconds):.1f}, {args.repeats} runs)"
            )


if __name__ == "__main__":
    main()
