"""How often batched decoding decides as one-call-at-a-time decoding does, on the real model.

    python benchmarks/batch_agreement.py [--questions 24] [--batch 16] [--dataset squad]

Runs the generation stage of the embedded default (SmolLM2-135M, every condition: Q100,
Q50, Q0, QC, QX with P0-P2, and the closed-book CB) on ``--questions`` questions twice in
a scratch directory, once with the model's ``batch: 1`` and once with ``--batch``, and
compares every call: the same decision and the same normalised answer (SQuAD's
normalisation), and the same raw output. The upstream stages run once; only the
generation jobs rerun (the model's settings are their parameter). Run the main job first
(`snakemake`): the assets come from its resources/.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))

from grabrag.core.text import normalize_answer  # noqa: E402

MODEL = "smollm2-135m"


def run(workdir: Path, config: dict, batch: int, dataset: str, cores: int) -> float:
    config["models"][MODEL]["batch"] = batch
    path = workdir / f"config-batch{batch}.yaml"
    path.write_text(yaml.safe_dump(config))
    target = f"results/generation/{MODEL}/{dataset}/report.json"
    started = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--snakefile",
            str(REPO / "Snakefile"),
            "--directory",
            str(workdir),
            "--configfile",
            str(path),
            "--cores",
            str(cores),
            target,
        ],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"batch {batch} run failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return time.perf_counter() - started


def cells(workdir: Path, dataset: str) -> dict[tuple[str, str, str], dict]:
    out = {}
    for path in sorted((workdir / f"results/generation/{MODEL}/{dataset}").glob("*/*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            out[(row["condition"], row["prompt"], row["qid"])] = row
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=24)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--dataset", default="squad")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args()
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    config["resources_dir"] = str(REPO / "resources")
    config["datasets"] = {args.dataset: config["datasets"][args.dataset]}
    config["datasets"][args.dataset]["n_questions"] = args.questions
    # only the generation stage runs (the target below); these name a kept dataset
    config["evidential"]["datasets"] = [args.dataset]
    config["cdd"]["datasets"] = [args.dataset]
    workdir = Path(tempfile.mkdtemp(prefix="grabrag-agreement-"))
    try:
        sequential_s = run(workdir, config, 1, args.dataset, args.cores)
        reference = cells(workdir, args.dataset)
        batched_s = run(workdir, config, args.batch, args.dataset, args.cores)
        batched = cells(workdir, args.dataset)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    assert reference.keys() == batched.keys()
    per_condition: Counter[str] = Counter()
    agree: Counter[str] = Counter()
    raw_same = 0
    for key, row in reference.items():
        other = batched[key]
        per_condition[key[0]] += 1
        same = (row["decision"], normalize_answer(row["answer"] or "")) == (
            other["decision"],
            normalize_answer(other["answer"] or ""),
        )
        agree[key[0]] += same
        raw_same += row["raw"] == other["raw"]
    n = len(reference)
    print(
        f"{args.dataset}, {args.questions} questions, {n} calls (every condition x prompt); "
        f"batch {args.batch} vs batch 1: decision + normalised answer agree on "
        f"{sum(agree.values())}/{n} ({sum(agree.values()) / n:.1%}), raw output identical "
        f"on {raw_same}/{n} ({raw_same / n:.1%})"
    )
    print(
        "by condition: "
        + ", ".join(f"{c} {agree[c]}/{per_condition[c]}" for c in sorted(per_condition))
    )
    print(
        f"wall time (the first run includes the upstream stages): batch 1 {sequential_s:.0f} s, "
        f"batch {args.batch} {batched_s:.0f} s"
    )


if __name__ == "__main__":
    main()
