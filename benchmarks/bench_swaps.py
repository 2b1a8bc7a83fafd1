"""QC swap stage: eligibility with one replacement draw per tier vs candidates tried in
seeded order until one passes every filter, at construction seeds 42 and 43.

For each dataset (500 SQuAD v1.1 dev questions, and 500 BIG-bench NQ questions of
Longpre et al.'s knowledge-conflicts task) the questions are sampled once with the data
seed (42), the entity pool is built once from their gold passages with spaCy, and the
swaps are built four times: {one draw, all candidates} x construction seed {42, 43}. The
construction seed is the paper's Appendix G seed: it changes only the random order of the
replacement candidates (and shifts), on the same questions. Prints the eligibility, the
seed 42/43 difference (counts and the symmetric difference of the eligible sets) and the
times. Needs the embedded assets (run `snakemake` first, or point --resources, or the
environment variable GRABRAG_RESOURCES, at a folder that has them). BIG-bench's file is no
longer on PyPI (docs/configs.md): `nq_bigbench` needs a resources folder that still holds
its `bigbench-knowledge-conflicts` manifest, and is off by default.

Usage: python benchmarks/bench_swaps.py [--questions 500] [--datasets squad nq_bigbench]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from grabrag.contexts.audit import eligibility_summary
from grabrag.contexts.entity_pool import NerCache, build_entity_pool, gold_passage_texts
from grabrag.contexts.ner import load_ner
from grabrag.contexts.swaps import build_swaps
from grabrag.data.assets import resolve
from grabrag.data.datasets import adapt_bigbench_knowledge_conflicts, adapt_squad_v1, build_dataset

REPO = Path(__file__).resolve().parents[1]
DATASETS = {
    "squad": ("squad-v1.1-dev", adapt_squad_v1),
    "nq_bigbench": ("bigbench-knowledge-conflicts", adapt_bigbench_knowledge_conflicts),
}
DATA_SEED = 42
SEEDS = (42, 43)


def _eligible(records: list[dict]) -> set[str]:
    return {r["qid"] for r in records if r["status"] == "accepted"}


def bench(name: str, resources: Path, n: int, ner: NerCache) -> dict:
    asset, adapter = DATASETS[name]
    questions, _, _ = build_dataset(
        adapter(resolve(resources / asset / "manifest.json")), n, DATA_SEED
    )
    started = time.perf_counter()
    pool = build_entity_pool(gold_passage_texts(questions), ner)
    out: dict = {
        "questions": len(questions),
        "pool_seconds": round(time.perf_counter() - started, 1),
        "pool_sizes": {k: len(v) for k, v in pool.entries.items()},
    }
    runs = {}
    for label, cap in (("one_draw", 1), ("all_candidates", None)):
        for seed in SEEDS:
            started = time.perf_counter()
            records, _ = build_swaps(questions, ner, seed=seed, pool=pool, max_candidates=cap)
            summary = eligibility_summary(records)
            runs[(label, seed)] = records
            out[f"{label}_seed{seed}"] = {
                "eligible": summary["eligible"],
                "eligible_rate": summary["eligible_rate"],
                "by_tier": summary["by_tier"],
                "accepted_after_retry": summary["accepted_after_retry"],
                "max_candidates_tried": summary["max_candidates_tried"],
                "leaks": summary["leaks"],
                "top_skip_reasons": dict(list(summary["skip_reasons"].items())[:6]),
                "seconds": round(time.perf_counter() - started, 1),
            }
        a, b = _eligible(runs[(label, SEEDS[0])]), _eligible(runs[(label, SEEDS[1])])
        out[f"{label}_seed_difference"] = {
            "eligible_42_minus_43": len(a) - len(b),
            "points": round(100 * (len(a) - len(b)) / len(questions), 1),
            "symmetric_difference": len(a ^ b),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=500)
    parser.add_argument("--datasets", nargs="+", default=["squad"], choices=list(DATASETS))
    parser.add_argument(
        "--resources",
        type=Path,
        default=Path(os.environ.get("GRABRAG_RESOURCES", REPO / "resources")),
    )
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    started = time.perf_counter()
    ner = NerCache(load_ner("spacy", resolve(args.resources / "en-core-web-sm/manifest.json")))
    print(f"spaCy load {time.perf_counter() - started:.1f} s")
    results = {name: bench(name, args.resources, args.questions, ner) for name in args.datasets}
    print(json.dumps(results, indent=1))
    print(f"total {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
