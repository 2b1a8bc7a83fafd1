"""The cost ledger's table: per model and stage the calls, tokens, call seconds and cache
hits the rows record (:mod:`grabrag.evaluation.ledger`), then per stage all models beside
the plan's estimate, then the run's total."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from grabrag.evaluation.ledger import USAGE, Usage
from grabrag.report.tabular import Number, Table

ALL_MODELS = "all models"
NOT_RECORDED = "n/a"


def _count(value: int | None) -> Number | str:
    return NOT_RECORDED if value is None else Number(str(value), value)


def _row(model: str, stage: str, usage: Usage, planned: int | str = "") -> dict:
    return {
        "Model": model,
        "Stage": stage,
        "Calls": usage.calls,
        "Plan (at most)": planned,
        "Prompt tokens": _count(usage.prompt_tokens),
        "Completion tokens": _count(usage.completion_tokens),
        "Call seconds": Number(f"{usage.seconds:.1f}", usage.seconds),
        "Cache hits": usage.cache_hits,
    }


def ledger_table(
    totals: Mapping[tuple[str, str], Usage], models: Sequence[str], planned: Mapping[str, int]
) -> Table:
    """``totals``: (model, stage) -> usage; ``planned``: stage -> the plan's calls."""
    rows = []
    run = Usage()
    for stage in USAGE:
        found = [(m, totals[(m, stage)]) for m in models if (m, stage) in totals]
        if not found:
            continue
        stage_total = Usage()
        for model, usage in found:
            rows.append(_row(model, stage, usage))
            stage_total.add(usage)
        rows.append(_row(ALL_MODELS, stage, stage_total, planned.get(stage, "")))
        run.add(stage_total)
    rows.append(_row(ALL_MODELS, "every stage", run, sum(planned.values())))
    note = (
        "The configured datasets only: the TruthfulQA probe's and further seeds' calls are "
        "not in it. Plan: snakemake plan's upper "
        "bound (every question kept and QC-eligible). Call seconds: the model calls' own "
        "time (a cache hit keeps its call's original seconds), not the jobs' wall time "
        "(results/benchmarks/). n/a: the verifier's rows keep no token counts (totals "
        "leave them out)."
    )
    return Table(rows, note=note)
