"""Compare two finished runs, or two models of one run, cell by cell and paired by
question (:mod:`grabrag.evaluation.run_comparison`)::

    python -m grabrag.pipeline.compare RESULTS_A RESULTS_B --out results/compare
    python -m grabrag.pipeline.compare results --models MODEL_A MODEL_B --out results/compare

Each side's decision cells are its ``policies/<model>/<dataset>/<condition>/<policy>.jsonl``
files; the gold answers come from A's ``contexts/<dataset>/<condition>.jsonl``. Writes
``comparison.{csv,md,tex,tidy.csv,html,pdf,png}`` under ``--out`` and prints one line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from grabrag.core.errors import GrabragError
from grabrag.core.io import read_jsonl
from grabrag.evaluation.run_comparison import (
    ALPHA,
    DIFFERS,
    Key,
    Rows,
    compare_sides,
    model_side,
)
from grabrag.report.run_comparison_report import write_comparison


class CompareError(GrabragError):
    """What to compare cannot be read: the message names the folder or file."""


def decision_cells(results: Path) -> dict[Key, Rows]:
    """Every decision cell of a results folder, by (model, dataset, condition, policy)."""
    policies = results / "policies"
    if not policies.is_dir():
        raise CompareError(
            f"{results} holds no policies/ folder: give a run's results folder (the one "
            "with policies/, contexts/, tables/)"
        )
    cells = {}
    for path in sorted(policies.glob("*/*/*/*.jsonl")):
        model, dataset, condition = path.parts[-4:-1]
        cells[(model, dataset, condition, path.stem)] = read_jsonl(path)
    if not cells:
        raise CompareError(f"{policies} holds no decision files; finish the run first")
    return cells


def gold_answers(results: Path, keys: Sequence[Key]) -> dict[tuple[str, str], dict]:
    """(dataset, condition) -> qid -> gold answers, from the run's context rows."""
    gold = {}
    for dataset, condition in sorted({(k[1], k[2]) for k in keys}):
        path = results / "contexts" / dataset / f"{condition}.jsonl"
        if path.exists():
            gold[(dataset, condition)] = {r["qid"]: r.get("answers", []) for r in read_jsonl(path)}
    return gold


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m grabrag.pipeline.compare",
        description="Compare two runs (or two models of one run) cell by cell, paired by "
        "question: B - A with paired-bootstrap CIs, decision flips, and a within-noise "
        "verdict after Holm's correction.",
    )
    parser.add_argument("a", type=Path, help="run A's results folder")
    parser.add_argument("b", type=Path, nargs="?", help="run B's results folder")
    parser.add_argument("--models", nargs=2, metavar=("A", "B"), help="two models of run A")
    parser.add_argument("--out", type=Path, default=Path("results/compare"))
    parser.add_argument("--alpha", type=float, default=ALPHA)
    parser.add_argument("--n-resamples", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    if (args.b is None) == (args.models is None):
        parser.error("give two results folders, or one and --models A B")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        cells = decision_cells(args.a)
        if args.models:
            model_a, model_b = args.models
            found = {key[0] for key in cells}
            for model in args.models:
                if model not in found:
                    raise CompareError(
                        f"{args.a} has no cells of model {model!r} (it has: "
                        f"{', '.join(sorted(found))})"
                    )
            side_a = model_side(cells, model_a, "A")
            side_b = model_side(cells, model_b, "A")
            name_a, name_b = model_a, model_b
        else:
            side_a, side_b = cells, decision_cells(args.b)
            name_a, name_b = str(args.a), str(args.b)
        gold = gold_answers(args.a, list(side_a))
        comparisons = compare_sides(
            side_a,
            side_b,
            gold,
            n_resamples=args.n_resamples,
            seed=args.seed,
            alpha=args.alpha,
        )
        if not comparisons:
            raise CompareError(f"{name_a} and {name_b} share no decision cell")
        write_comparison(comparisons, args.out, name_a, name_b, args.alpha)
    except GrabragError as error:
        print(f"compare: {error}", file=sys.stderr)
        return 1
    differing = sum(c.verdict == DIFFERS for c in comparisons)
    flips = sum(len(c.flips) for c in comparisons if c.metric == "answer_rate")
    print(
        f"{len(comparisons)} comparisons, {differing} differ beyond noise (Holm, alpha "
        f"{args.alpha:g}), {flips} decision flips: {args.out}/comparison.md"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
