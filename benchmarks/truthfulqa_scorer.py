"""How often the TruthfulQA probe's scorers agree with hand labels, per answer type.

    python benchmarks/truthfulqa_scorer.py                       # the token-F1 scorer
    python benchmarks/truthfulqa_scorer.py --nli resources/deberta-v3-large-nli/files
                                                                 # the entailment scorer

Reads ``benchmarks/truthfulqa_scorer_labels.jsonl``: short answers, in the form the
generation grammar's ``answer`` field takes, to questions of TruthfulQA, each labelled true
or false by hand from the question's reference answers (copied beside it) and typed:
``plain`` (states an answer), ``rebuttal`` (rejects a claim in the claim's own words),
``hedge`` (qualified: "probably", "it depends") and ``no_comment`` ("I have no comment.",
on the questions whose true answers list it). Prints the scorer's agreement overall and
per type, its confusion counts and every disagreement. ``--nli DIR`` scores with the
entailment scorer over the local NLI model in DIR (config/extended.yaml fetches
MoritzLaurer/DeBERTa-v3-large-mnli-fever-anli-ling-wanli to resources/deberta-v3-large-nli/);
``--device`` is torch's (cpu, cuda, auto). No language model runs: the answers were
written by hand, since the offline models here answer TruthfulQA with nonsense that would
make the labels trivial.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))

from grabrag.scoring.truthfulness import TokenF1Scorer, agreement  # noqa: E402

LABELS = REPO / "benchmarks" / "truthfulqa_scorer_labels.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nli", type=Path, help="a local NLI model's folder")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--labels", type=Path, default=LABELS)
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.labels.read_text(encoding="utf-8").splitlines()]
    if args.nli:
        from grabrag.evaluation.entailment import nli_scorer

        scorer = nli_scorer(args.nli, name=args.nli.name, device=args.device)
    else:
        scorer = TokenF1Scorer()
    result = agreement(rows, scorer)
    print(f"scorer: {scorer.name}")
    print(f"agreement: {result.agree} of {result.total} ({100 * result.rate:.1f}%)")
    for kind, (agree, total) in result.by_type.items():
        print(f"  {kind}: {agree} of {total} ({100 * agree / total:.1f}%)")
    for (label, scored), n in sorted(result.confusion.items()):
        print(f"  labelled {label}, scored {scored}: {n}")
    for row in result.disagreements:
        print(
            f"  disagree ({row['type']}): {row['qid']} {row['answer']!r}: labelled {row['label']}"
        )


if __name__ == "__main__":
    main()
