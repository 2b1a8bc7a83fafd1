"""Time the QC swap stage (issue: misleading context) on 500 SQuAD questions.

Builds 500 SQuAD v1.1 dev questions with the data stage's own code, then times the
entity pool (spaCy NER over the sampled gold passages, the paper's pool) and the swaps,
and prints the eligibility summary. Needs the embedded assets (run `snakemake` first).
Usage: python benchmarks/bench_swaps.py [--questions 500] [--seed 42]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from grabrag.assets import resolve
from grabrag.data import adapt_squad_v1, build_dataset
from grabrag.ner import load_ner
from grabrag.swaps import (
    NerCache,
    build_entity_pool,
    build_swaps,
    eligibility_summary,
    gold_passage_texts,
)

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=500)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    squad = resolve(REPO / "resources/squad-v1.1-dev/manifest.json")
    questions, _, _ = build_dataset(adapt_squad_v1(squad), args.questions, args.seed)
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    started = time.perf_counter()
    ner = NerCache(load_ner("spacy", resolve(REPO / "resources/en-core-web-sm/manifest.json")))
    loaded = time.perf_counter()
    pool = build_entity_pool(gold_passage_texts(questions), ner)
    pooled = time.perf_counter()
    records, _ = build_swaps(questions, ner, seed=args.seed, pool=pool)
    done = time.perf_counter()
    print(
        f"{len(questions)} questions: spaCy load {loaded - started:.1f} s, pool "
        f"{pooled - loaded:.1f} s, swaps {done - pooled:.1f} s, total {done - started:.1f} s"
    )
    print(json.dumps(eligibility_summary(records), indent=1))


if __name__ == "__main__":
    main()
