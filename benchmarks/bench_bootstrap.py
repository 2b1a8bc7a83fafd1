"""Time every metric and bootstrap CI of a paper-sized config.

Synthetic decision and context rows of the paper's size: 3 models x 2 datasets x 5 (or 13)
policies x 4 conditions (Q100, Q50, Q0, QC), 500 questions per dataset, 202 and 330
QC-eligible (the paper's NQ and HotpotQA counts), 10,000 resamples. Times
``grabrag.evaluation.evaluate.evaluate`` end to end: scoring every row, the resample matrices, and
every point estimate and 95% CI of the tidy table (rates, EM/F1, FAC, paired HwSA and
QC - Q0, AURC, ECE at 10 and 15 bins, the QC breakdown, normalised HwSA, the EM gap).
Then times ``grabrag.evaluation.evaluate.abstention_over_datasets`` (Figure 2's dataset means with
their CIs) on the same rows.

Confidence levels decide the cost of AURC/ECE: ``--confidence llm`` draws from the
handful of values small LLMs report (0, 50, 60, 70, 80, 85, 90, 95, 100);
``--confidence uniform`` draws every integer 0-100 (the worst case, 101 levels).
BLAS threads are capped at ``--threads`` (default 2) before numpy loads.

Usage: python benchmarks/bench_bootstrap.py [--confidence llm|uniform] [--threads 2]
       [--policies 5|13]
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--confidence", choices=("llm", "uniform"), default="uniform")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--questions", type=int, default=500)
    parser.add_argument("--resamples", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--policies",
        type=int,
        default=5,
        help="5: P0-P4 (the paper); 13: with EVID, EVID_CB, the CDD family and baselines",
    )
    args = parser.parse_args()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    if "numpy" in sys.modules:
        raise SystemExit("numpy was imported before the thread cap")

    import numpy as np

    from grabrag.evaluation.evaluate import abstention_over_datasets, evaluate

    rng = np.random.default_rng(args.seed)
    levels = (
        np.array([0, 50, 60, 70, 80, 85, 90, 95, 100])
        if args.confidence == "llm"
        else np.arange(101)
    )
    eligible_counts = {"nq": 202, "hotpotqa": 330}
    models = ("phi", "llama", "qwen")
    policies = (
        "P0", "P1", "P2", "P3", "P4", "EVID", "EVID_CB",
        "CDD", "CDD_ALPHA", "CAI", "SHAM", "REFLECT", "FILTER",
    )[: args.policies]  # fmt: skip
    contexts: dict = {}
    decisions: dict = {}
    for dataset, n_eligible in eligible_counts.items():
        qids = [f"{dataset}-{i}" for i in range(args.questions)]
        gold = {q: [f"gold answer {i}"] for i, q in enumerate(qids)}
        eligible = sorted(rng.choice(args.questions, n_eligible, replace=False).tolist())
        for condition in ("Q100", "Q50", "Q0"):
            contexts[(dataset, condition)] = [
                {"qid": q, "index": i, "answers": gold[q]} for i, q in enumerate(qids)
            ]
        contexts[(dataset, "QC")] = [
            {
                "qid": qids[i],
                "index": i,
                "answers": gold[qids[i]],
                "replacement": f"planted {i}",
                "replacement_entity": f"planted {i}",
            }
            for i in eligible
        ]
        for model in models:
            for policy in policies:
                for condition in ("Q100", "Q50", "Q0", "QC"):
                    p_answer = {"Q100": 0.8, "Q50": 0.75, "Q0": 0.05, "QC": 0.5}[condition]
                    rows = []
                    for c in contexts[(dataset, condition)]:
                        u = rng.random()
                        if u < 0.01:
                            rows.append(
                                {
                                    "qid": c["qid"],
                                    "decision": None,
                                    "answer": None,
                                    "confidence": None,
                                }
                            )
                            continue
                        answer = rng.random() < p_answer
                        text = (
                            str(rng.choice([c["answers"][0], f"planted {c['index']}", "other"]))
                            if answer
                            else ""
                        )
                        rows.append(
                            {
                                "qid": c["qid"],
                                "index": c["index"],
                                "condition": condition,
                                "policy": policy,
                                "decision": "answer" if answer else "abstain",
                                "answer": text,
                                "confidence": int(rng.choice(levels)),
                            }
                        )
                    decisions[(model, dataset, condition, policy)] = rows

    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    started = time.perf_counter()
    table = evaluate(decisions, contexts, n_resamples=args.resamples, seed=args.seed)
    elapsed = time.perf_counter() - started
    with_ci = sum(1 for row in table if row["ci_low"] == row["ci_low"])
    print(
        f"{len(decisions)} cells, {args.questions} questions per dataset, "
        f"{args.resamples} resamples, confidence '{args.confidence}' "
        f"({len(levels)} levels), {args.threads} BLAS threads: {len(table)} table rows, "
        f"{with_ci} with a CI, in {elapsed:.1f} s"
    )
    started = time.perf_counter()
    means = abstention_over_datasets(
        decisions, contexts, n_resamples=args.resamples, seed=args.seed
    )
    figure_2 = time.perf_counter() - started
    print(
        f"Figure 2's dataset means (abstention_over_datasets): {len(means)} rows with CIs "
        f"in {figure_2:.1f} s; metrics stage total {elapsed + figure_2:.1f} s"
    )


if __name__ == "__main__":
    main()
