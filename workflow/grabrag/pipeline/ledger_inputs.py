"""The files the cost ledger (:mod:`grabrag.evaluation.ledger`) reads: every stage's rows
of model calls on the configured datasets, and the plan's estimate of each stage."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from grabrag.core import registry
from grabrag.evaluation.ledger import USAGE
from grabrag.generation.prompts import CONTEXT_PROMPTS
from grabrag.pipeline.cells import cells
from grabrag.pipeline.files import (
    CDD_CELL_FILE,
    CDD_TRACE_FILE,
    CLOSED_BOOK_FILE,
    EVALUATIONS_FILE,
    EVIDENTIAL_FILE,
    GENERATION_FILE,
    NLI_FILE,
)
from grabrag.pipeline.plan import model_calls
from grabrag.pipeline.run import Run
from grabrag.pipeline.scope import policies_reading


def ledger_files(run: Run) -> list[dict[str, str]]:
    """Each file of model calls as {stage, model, file}, stage by stage."""
    out: list[dict[str, str]] = []

    def add(stage: str, pattern: str, keys: Sequence[Mapping[str, Any]]) -> None:
        out.extend({"stage": stage, "model": k["model"], "file": pattern.format(**k)} for k in keys)

    models, conditions = run.models, run.conditions
    add(
        "generate_context_prompts",
        GENERATION_FILE,
        cells(model=models, dataset=run.datasets, condition=conditions, prompt=CONTEXT_PROMPTS),
    )
    add("generate_closed_book", CLOSED_BOOK_FILE, cells(model=models, dataset=run.datasets))
    if run.config["nli"]["backend"] == "llm":
        verified = [
            d for d in run.datasets if policies_reading(run.dataset_policies(d), registry.NLI)
        ]
        add("nli", NLI_FILE, cells(model=models, dataset=verified, condition=conditions))
    evid = cells(model=models, dataset=run.evid_datasets, condition=conditions)
    add("evidential_evaluate", EVALUATIONS_FILE, evid)
    add(
        "evidential_generate",
        EVIDENTIAL_FILE,
        [{**c, "policy": p} for c in evid for p in run.evid_policies],
    )
    cdd = cells(model=models, dataset=run.cdd_datasets, condition=conditions)
    if run.cdd_traces:
        add("cdd_generate", CDD_TRACE_FILE, cdd)
    add(
        "baselines_generate",
        CDD_CELL_FILE,
        [{**c, "policy": p} for c in cdd for p in run.cdd_baselines],
    )
    return out


def planned_calls(config: Mapping[str, Any]) -> dict[str, int]:
    """The plan's estimate (at most) of each stage's calls on the configured datasets."""
    return {row["rule"]: row["calls"] for row in model_calls(config) if row["rule"] in USAGE}
