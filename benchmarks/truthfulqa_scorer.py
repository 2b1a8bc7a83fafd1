"""How often the TruthfulQA probe's binary scorer agrees with hand labels.

    python benchmarks/truthfulqa_scorer.py

Reads ``benchmarks/truthfulqa_scorer_labels.jsonl``: short answers, in the form the
generation grammar's ``answer`` field takes, to questions of BIG-bench's TruthfulQA, each
labelled true or false by hand from the question's reference answers (copied beside it),
and prints the scorer's agreement (grabrag.scoring.truthfulness), its confusion counts and
every disagreement. No model runs: the answers were written by hand, since the offline
models here answer TruthfulQA with nonsense that would make the labels trivial.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))

from grabrag.scoring.truthfulness import agreement  # noqa: E402

LABELS = REPO / "benchmarks" / "truthfulqa_scorer_labels.jsonl"


def main() -> None:
    rows = [json.loads(line) for line in LABELS.read_text(encoding="utf-8").splitlines()]
    result = agreement(rows)
    print(f"agreement: {result.agree} of {result.total} ({100 * result.rate:.1f}%)")
    for (label, scored), n in sorted(result.confusion.items()):
        print(f"  labelled {label}, scored {scored}: {n}")
    for row in result.disagreements:
        print(f"  disagree: {row['qid']} {row['answer']!r}: labelled {row['label']}")


if __name__ == "__main__":
    main()
