"""Every result file a later stage, a table, a figure or a user reads, declared once: its
path pattern, the cell axes it varies over (in the order its files are listed), which of
the config's datasets it exists for, and its reader.

The rules derive the input files of the tables and figures from these declarations
(``rules/common.smk``: every axis takes the config's values: its models, its datasets or
a method's, its conditions, its policies, the context prompts), so a table or figure that
names an output it reads needs no rule edit; a test checks that a rule writes each
pattern. A user's analysis reads them the same way::

    from grabrag.core.outputs import read_metrics
    metrics = read_metrics(glob.glob("results/metrics/*.csv"))
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from grabrag.core.conditions import CLOSED_BOOK
from grabrag.core.io import read_json, read_jsonl

Cell = Mapping[str, str]


def read_csvs(
    paths: Iterable[str | Path],
    strings: Sequence[str] = (),
    labels: Iterable[Mapping[str, str]] | None = None,
    integers: Sequence[str] = (),
    floats: Sequence[str] | None = None,
) -> pl.DataFrame:
    """CSV files as one frame: the ``strings`` columns as text, the ``integers`` as
    integers, every other column as a float (an empty field or "nan" is missing); with
    ``floats``, only those columns (and the ``integers``) are numbers and every other is
    text. Columns a file lacks are missing in its rows. With ``labels``, one dict per file
    whose items become constant columns (the file's model and dataset, say)."""
    paths = list(paths)
    constants = list(labels) if labels is not None else [{}] * len(paths)
    frames = []
    for path, constant in zip(paths, constants, strict=True):
        frame = pl.read_csv(path, infer_schema=False)
        numbers = [
            c
            for c in frame.columns
            if c in integers or (c in floats if floats is not None else c not in strings)
        ]
        frame = frame.with_columns(
            pl.col(c).cast(pl.Int64 if c in integers else pl.Float64) for c in numbers
        ).with_columns(pl.lit(value, dtype=pl.String).alias(k) for k, value in constant.items())
        frames.append(frame)
    return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()


# The number columns of the metric table and the diagnostics; every other column is a
# label, read as text.
ESTIMATES = ("value", "ci_low", "ci_high")
SWEEP_LABELS = ("policy", "variant", "rule", "condition", "reason")
"""The text columns of the sweep CSVs (a fusion rule is "dempster" or a lambda as text)."""
AUDIT_LABELS = ("dataset", "model", "policy", "sign_preserved")
"""The text columns of a QC audit's HwSA file (``results/qc/<dataset>/audit_hwsa.csv``)."""


def read_metrics(paths: Iterable[str | Path]) -> pl.DataFrame:
    """Metric CSVs (``results/metrics/*.csv``) as one frame; ``seed`` says which
    construction seed's build each row is from (empty: pooled over the seeds)."""
    return read_csvs(paths, floats=ESTIMATES, integers=("n", "seed"))


def read_diagnostics(paths: Iterable[str | Path]) -> pl.DataFrame:
    """CDD diagnostics CSVs (``results/cdd/<model>/<dataset>/diagnostics.csv``) as one
    frame."""
    return read_csvs(paths, floats=ESTIMATES, integers=("n",))


def read_sweeps(paths: Iterable[str | Path], cells: Iterable[Cell]) -> pl.DataFrame:
    """Per model x dataset sweep CSVs (``P3_sweep.csv``, ``sweep.csv``) as one frame, with
    each file's ``model`` and ``dataset`` (from its cell, as the rule names it)."""
    labels = [{"model": cell["model"], "dataset": cell["dataset"]} for cell in cells]
    return read_csvs(paths, strings=SWEEP_LABELS, labels=labels)


# --- readers: (the files, the cell each is about) -> what a builder gets --------------------

Reader = Callable[[Sequence[str], Sequence[Cell]], Any]


def rows_by_cell(paths: Sequence[str], cells: Sequence[Cell]) -> list[tuple[Cell, list[dict]]]:
    """JSONL files: (cell, its rows) per file, in the files' order."""
    return [(cell, read_jsonl(path)) for cell, path in zip(cells, paths, strict=True)]


def json_by_cell(paths: Sequence[str], cells: Sequence[Cell]) -> list[tuple[Cell, Any]]:
    """JSON files: (cell, its content) per file, in the files' order."""
    return [(cell, read_json(path)) for cell, path in zip(cells, paths, strict=True)]


def metric_frame(paths: Sequence[str], cells: Sequence[Cell]) -> pl.DataFrame:
    return read_metrics(paths)


def metric_frame_by_seed(paths: Sequence[str], cells: Sequence[Cell]) -> pl.DataFrame:
    """Each seed's metric files as one frame, with a ``seed`` column (text) from the cell."""
    return read_csvs(
        paths, floats=ESTIMATES, integers=("n",), labels=[{"seed": str(c["seed"])} for c in cells]
    )


def diagnostics_frame(paths: Sequence[str], cells: Sequence[Cell]) -> pl.DataFrame:
    return read_diagnostics(paths)


def audit_frame(paths: Sequence[str], cells: Sequence[Cell]) -> pl.DataFrame:
    return read_csvs(paths, strings=AUDIT_LABELS)


def paths_by_cell(paths: Sequence[str], cells: Sequence[Cell]) -> list[tuple[Cell, str]]:
    """The files themselves, for a builder with a reader of its own."""
    return list(zip(cells, paths, strict=True))


# --- the declarations -----------------------------------------------------------------------

# Which datasets an output exists for (the values of its ``dataset`` axis):
ALL_DATASETS = "all"  # every configured dataset
EVIDENTIAL_DATASETS = "evidential"  # those EvidentialRAG runs on (evidential.datasets)
CDD_DATASETS = "cdd"  # those the CDD family runs on (cdd.datasets)
CDD_TRACE_DATASETS = "cdd_traces"  # the CDD datasets, when CDD or CDD-alpha is configured
CDD_DIAGNOSTIC_DATASETS = "cdd_diagnostics"  # the CDD datasets, with cdd.diagnostics on
AUDITED_DATASETS = "audited"  # those whose QC audit is filled in (qc.audit_filled)
SENSITIVITY_VARIANT_DATASETS = "sensitivity_variants"  # Table 13's ("<dataset>_sensitivity<seed>")
TRUTHFULQA_DATASETS = "truthfulqa"  # the TruthfulQA probe's dataset, when truthfulqa_probe is set
DATASET_SCOPES = (
    ALL_DATASETS,
    EVIDENTIAL_DATASETS,
    CDD_DATASETS,
    CDD_TRACE_DATASETS,
    CDD_DIAGNOSTIC_DATASETS,
    AUDITED_DATASETS,
    SENSITIVITY_VARIANT_DATASETS,
    TRUTHFULQA_DATASETS,
)
# The axes a pattern may vary over; ``condition`` takes the generation conditions (the
# TruthfulQA probe's two on its dataset), ``policy`` the policies that run on the cell's
# dataset, ``prompt`` the context prompts P0-P2.
AXES = ("model", "dataset", "condition", "policy", "prompt")


@dataclass(frozen=True)
class Output:
    """One kind of result file. ``pattern`` names its axes in braces; ``axes`` lists them in
    the order the files are listed (outermost first). ``pattern`` None: a file the config
    names (the filled QC audit), one per dataset of ``datasets``."""

    name: str
    pattern: str | None
    axes: tuple[str, ...]
    read: Reader
    description: str
    datasets: str = ALL_DATASETS
    # One file per construction seed's build of each dataset (seeds): each cell also
    # names its ``seed``, and the file is that seed's (``<dataset>_seed<N>`` but for the
    # base seed).
    per_seed: bool = False

    def __post_init__(self) -> None:
        named = set(re.findall(r"{(\w+)}", self.pattern or "{dataset}"))
        if named != set(self.axes) or not set(self.axes) <= set(AXES):
            raise ValueError(
                f"output {self.name}: axes {self.axes} do not match the pattern's {sorted(named)}"
            )
        if self.datasets not in DATASET_SCOPES:
            raise ValueError(f"output {self.name}: unknown dataset scope {self.datasets!r}")


_BY_NAME: dict[str, Output] = {}


def declare(output: Output) -> Output:
    """Add an output kind (a module may declare its own); a name is declared once."""
    if output.name in _BY_NAME and _BY_NAME[output.name] != output:
        raise ValueError(f"an output named {output.name} is already declared")
    _BY_NAME[output.name] = output
    return output


def output(name: str) -> Output:
    if name not in _BY_NAME:
        raise ValueError(f"unknown output {name!r}; declared: {', '.join(_BY_NAME)}")
    return _BY_NAME[name]


def outputs() -> dict[str, Output]:
    return dict(_BY_NAME)


_MDC = ("model", "dataset", "condition")
CONTEXT_ROWS = declare(
    Output(
        "contexts",
        "results/contexts/{dataset}/{condition}.jsonl",
        ("dataset", "condition"),
        rows_by_cell,
        "the context rows of a condition: the question, its passages, the gold answers",
    )
).name
GENERATION_ROWS = declare(
    Output(
        "generation",
        "results/generation/{model}/{dataset}/{condition}/{prompt}.jsonl",
        ("model", "dataset", "condition", "prompt"),
        rows_by_cell,
        "a context prompt's generation rows (decision, answer, confidence, raw output)",
    )
).name
CLOSED_BOOK_ROWS = declare(
    Output(
        "closed_book",
        f"results/generation/{{model}}/{{dataset}}/{CLOSED_BOOK}/CB.jsonl",
        ("model", "dataset"),
        rows_by_cell,
        "the closed-book (CB) pass's generation rows",
    )
).name
GENERATION_REPORTS = declare(
    Output(
        "generation_reports",
        "results/generation/{model}/{dataset}/report.json",
        ("model", "dataset"),
        json_by_cell,
        "per model x dataset: parse failures, truncations and timing of the generation",
    )
).name
NLI_LABELS = declare(
    Output(
        "nli",
        "results/nli/{model}/{dataset}/{condition}.jsonl",
        _MDC,
        rows_by_cell,
        "the NLI verifier's label of each passage against the CB answer (P4's input)",
    )
).name
DECISION_ROWS = declare(
    Output(
        "decisions",
        "results/policies/{model}/{dataset}/{condition}/{policy}.jsonl",
        ("dataset", "model", "condition", "policy"),
        rows_by_cell,
        "one policy's decision rows in one cell",
    )
).name
P3_SWEEPS = declare(
    Output(
        "p3_sweeps",
        "results/policies/{model}/{dataset}/P3_sweep.csv",
        ("model", "dataset"),
        read_sweeps,
        "P3's answer rate and HwSA over the threshold x cutoff grid (Table 12)",
    )
).name
METRICS = declare(
    Output(
        "metrics",
        "results/metrics/{dataset}.csv",
        ("dataset",),
        metric_frame,
        "every metric of every model x policy x condition of a dataset, with its CI",
    )
).name
METRICS_PER_SEED = declare(
    Output(
        "metrics_per_seed",
        "results/metrics/{dataset}.csv",
        ("dataset",),
        metric_frame_by_seed,
        "the metrics of each construction seed's build of a dataset, with a seed column "
        "(the spread over the seeds, where a figure shows it)",
        per_seed=True,
    )
).name
SEED_METRICS = declare(
    Output(
        "seed_metrics",
        "results/metrics/{dataset}.csv",
        ("dataset",),
        paths_by_cell,
        "the metrics of the seed-sensitivity variant (Table 13)",
        SENSITIVITY_VARIANT_DATASETS,
    )
).name
METRICS_OVER_DATASETS = declare(
    Output(
        "metrics_over_datasets",
        "results/metrics/over_datasets/abstention.csv",
        (),
        metric_frame,
        "abstention rates averaged over the datasets, with CIs (Figure 2)",
    )
).name
SWAP_ROWS = declare(
    Output(
        "swaps",
        "results/qc/{dataset}/swaps.jsonl",
        ("dataset",),
        rows_by_cell,
        "the QC swap of each question: tier, replaced span and replacement",
    )
).name
AUDIT_HWSA = declare(
    Output(
        "audit_hwsa",
        "results/qc/{dataset}/audit_hwsa.csv",
        ("dataset",),
        audit_frame,
        "HwSA at QC on the audited swaps only (Table 6)",
        AUDITED_DATASETS,
    )
).name
AUDIT_RATINGS = declare(
    Output(
        "audit_ratings",
        None,
        ("dataset",),
        paths_by_cell,
        "a person's ratings of the QC audit sample (qc.audit_filled)",
        AUDITED_DATASETS,
    )
).name
EVIDENTIAL_EVALUATIONS = declare(
    Output(
        "evidential_evaluations",
        "results/evidential/{model}/{dataset}/{condition}/evaluations.jsonl",
        _MDC,
        rows_by_cell,
        "the EvidentialRAG evaluator's judgement of each passage (claim, stance, masses)",
        EVIDENTIAL_DATASETS,
    )
).name
EVIDENTIAL_ROWS = declare(
    Output(
        "evidential",
        "results/evidential/{model}/{dataset}/{condition}/{policy}.jsonl",
        ("model", "dataset", "condition", "policy"),
        rows_by_cell,
        "an EvidentialRAG policy's generator rows in one cell (its masses, route, answer)",
        EVIDENTIAL_DATASETS,
    )
).name
EVID_SWEEPS = declare(
    Output(
        "evid_sweeps",
        "results/evidential/{model}/{dataset}/sweep.csv",
        ("model", "dataset"),
        read_sweeps,
        "EvidentialRAG's lambda and tau sweep from stored evaluator outputs",
        EVIDENTIAL_DATASETS,
    )
).name
EVID_EFFICIENCY = declare(
    Output(
        "evid_efficiency",
        "results/evidential/{model}/{dataset}/efficiency.json",
        ("model", "dataset"),
        json_by_cell,
        "EvidentialRAG's calls, tokens and time per query against naive RAG",
        EVIDENTIAL_DATASETS,
    )
).name
EVID_EVALUATE_REPORTS = declare(
    Output(
        "evid_evaluate_reports",
        "results/evidential/{model}/{dataset}/{condition}/evaluate_report.json",
        _MDC,
        json_by_cell,
        "the EvidentialRAG evaluator's parse and evidence counts per cell",
        EVIDENTIAL_DATASETS,
    )
).name
CDD_TRACE_ROWS = declare(
    Output(
        "cdd_traces",
        "results/cdd/{model}/{dataset}/{condition}/traces.jsonl",
        _MDC,
        rows_by_cell,
        "CDD's five-step traces with their ablations and perturbed reruns",
        CDD_TRACE_DATASETS,
    )
).name
CDD_BASELINE_ROWS = declare(
    Output(
        "cdd_baselines",
        "results/cdd/{model}/{dataset}/{condition}/{policy}.jsonl",
        ("model", "dataset", "condition", "policy"),
        rows_by_cell,
        "a CDD prompt-only baseline's generation rows in one cell",
        CDD_DATASETS,
    )
).name
CDD_DIAGNOSTICS_TABLE = declare(
    Output(
        "cdd_diagnostics",
        "results/cdd/{model}/{dataset}/diagnostics.csv",
        ("model", "dataset"),
        diagnostics_frame,
        "CDD's trace diagnostics: causal sensitivity, ablations, source control",
        CDD_DIAGNOSTIC_DATASETS,
    )
).name

TRUTHFULQA_QUESTIONS = declare(
    Output(
        "truthfulqa_questions",
        "results/data/{dataset}/questions.jsonl",
        ("dataset",),
        rows_by_cell,
        "the TruthfulQA probe's questions: category, best, true and false answers",
        TRUTHFULQA_DATASETS,
    )
).name
TRUTHFULQA_DECISIONS = declare(
    Output(
        "truthfulqa_decisions",
        "results/policies/{model}/{dataset}/{condition}/{policy}.jsonl",
        ("dataset", "model", "condition", "policy"),
        rows_by_cell,
        "every policy's decision rows on the TruthfulQA probe, clean and injected",
        TRUTHFULQA_DATASETS,
    )
).name
TRUTHFULQA_SCORES = declare(
    Output(
        "truthfulqa_scores",
        "results/truthfulqa/{model}/{dataset}/scores.jsonl",
        ("dataset", "model"),
        rows_by_cell,
        "each probe decision's outcome (true, false, abstained, unparsed) and its scorer",
        TRUTHFULQA_DATASETS,
    )
).name
