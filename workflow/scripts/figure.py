"""Rule figure: one of the paper's figures as PDF + PNG."""

from collections import defaultdict
from pathlib import Path

import _grabrag_path  # noqa: F401  (makes grabrag importable without an install)

from grabrag import figures as f
from grabrag.io import read_jsonl
from grabrag.metrics import confidence_and_correct, reliability_bins, risk_coverage
from grabrag.results import read_metrics, read_sweeps
from grabrag.runner import run_rule


def _scored(smk):
    """(model, dataset, policy) -> pooled (confidence, correct) over the conditions."""
    cells = smk.params.cells
    gold = {
        (cell["dataset"], cell["condition"]): {r["qid"]: r["answers"] for r in read_jsonl(path)}
        for cell, path in zip(cells["contexts"], smk.input.contexts, strict=True)
    }
    pooled = defaultdict(lambda: ([], []))
    for cell, path in zip(cells["decisions"], smk.input.decisions, strict=True):
        model, dataset, condition = cell["model"], cell["dataset"], cell["condition"]
        conf, correct = confidence_and_correct(
            read_jsonl(path), gold[(dataset, condition)], condition
        )
        pooled[(model, dataset, cell["policy"])][0].extend(conf)
        pooled[(model, dataset, cell["policy"])][1].extend(correct)
    return pooled


def main(smk):
    figure = smk.wildcards.figure
    metrics = read_metrics(smk.input.metrics)
    if figure == "abstention_by_condition":
        fig = f.abstention_by_condition(metrics)
    elif figure == "abstention_by_dataset":
        fig = f.abstention_by_dataset(metrics)
    elif figure == "qc_breakdown":
        fig = f.qc_breakdown_figure(metrics)
    elif figure == "p3_sweep":
        fig = f.p3_sweep_figure(read_sweeps(smk.input.sweeps, smk.params.cells["sweeps"]))
    elif figure == "lambda_sweep":
        sweeps = read_sweeps(smk.input.sweeps, smk.params.cells["sweeps"])
        fusion = smk.params.fusion
        fig = f.lambda_sweep_figure(sweeps, fusion["lam"], fusion["tau1"], fusion["tau2"])
    elif figure == "risk_coverage":
        fig = f.risk_coverage_figure(
            {key: risk_coverage(*pair) for key, pair in _scored(smk).items()}
        )
    else:  # reliability
        by_policy = defaultdict(lambda: ([], []))
        for (_, _, policy), (conf, correct) in _scored(smk).items():
            by_policy[policy][0].extend(conf)
            by_policy[policy][1].extend(correct)
        fig = f.reliability_figure(
            {policy: reliability_bins(*pair) for policy, pair in by_policy.items()}
        )
    f.save(fig, Path(smk.output.pdf).with_suffix(""))


run_rule(snakemake, main)  # noqa: F821
