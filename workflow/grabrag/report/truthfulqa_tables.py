"""The table of CDD's TruthfulQA misconception-injection probe: each policy's accuracy with
the question's best answer as the only passage (clean) and with its most common
misconception injected in its place, per TruthfulQA category (Misconceptions first), with
paired bootstrap CIs; and each policy's margin over Standard RAG (P1) under injection, the
comparison the CDD paper reports (CDD 62.0% vs Standard RAG 15.0%). The outcomes come
scored (rule ``truthfulqa_scores``, :mod:`grabrag.scoring.truthfulness`); each row names
its scorer.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from grabrag.core import registry
from grabrag.core.conditions import BEST_ANSWER_CONTEXT, MISCONCEPTION_CONTEXT
from grabrag.core.errors import DataError
from grabrag.core.outputs import TRUTHFULQA_QUESTIONS, TRUTHFULQA_SCORES, output
from grabrag.data.truthfulqa import MISCONCEPTIONS, category_group
from grabrag.evaluation.evaluate import policy_sort_key
from grabrag.report.specs import Sources, TableSpec
from grabrag.report.table_cells import pct, pct_ci
from grabrag.report.tabular import Label, Number, Table, in_order
from grabrag.scoring.bootstrap import mean_interval, resample_counts
from grabrag.scoring.truthfulness import ABSTAINED, TOKEN_F1, TOKEN_F1_CAVEAT, TRUE

STANDARD_RAG = "P1"
"""The CDD paper's Standard RAG: the plain RAG prompt that may abstain (GRAB-RAG's P1)."""
ALL = "all"


def _groups(questions: Sequence[Mapping[str, Any]]) -> list[str]:
    """The category groups in print order: Misconceptions, the others by name, all."""
    found = {category_group(q["category"]) for q in questions}
    first = [MISCONCEPTIONS] if MISCONCEPTIONS in found else []
    return [*first, *sorted(found - {MISCONCEPTIONS}), ALL]


def _outcomes(
    scores: Sequence[tuple[Mapping[str, str], list[dict[str, Any]]]],
    questions: Mapping[str, Mapping[str, Any]],
) -> tuple[dict[tuple[str, str, str], dict[str, str]], dict[str, str]]:
    """(model, policy, condition) -> qid -> outcome (true, false, abstained, unparsed),
    and each model's scorer. Each cell holds one outcome per probe question (its scoring
    job checked the decision files): a scores file of other questions is stale."""
    found: dict[tuple[str, str, str], dict[str, str]] = {}
    scorers: dict[str, str] = {}
    for cell, rows in scores:
        for row in rows:
            key = (row["model"], row["policy"], row["condition"])
            found.setdefault(key, {})[row["qid"]] = row["outcome"]
            scorers[row["model"]] = row["scorer"]
        stale = [k for k, v in found.items() if k[0] == cell["model"] and set(v) != set(questions)]
        if stale:
            where = output(TRUTHFULQA_SCORES).pattern.format(**cell)
            raise DataError(
                f"{where}: its {stale[0][1]} {stale[0][2]} outcomes are not one per probe "
                "question; delete it and rerun the workflow to remake it"
            )
    return found, scorers


def _flags(outcomes: Mapping[str, str], qids: Sequence[str], value: str) -> np.ndarray:
    """1.0 for each question whose outcome is ``value`` (a cell not run: none are)."""
    return np.array([outcomes.get(q) == value for q in qids], dtype=float)


def table_truthfulqa_probe(
    questions: Sequence[Mapping[str, Any]],
    scores: Sequence[tuple[Mapping[str, str], list[dict[str, Any]]]],
    bootstrap: Mapping[str, Any],
) -> Table:
    """One row per category x model x policy. ``bootstrap``: n_resamples,
    confidence_level and the config's seed."""
    by_qid = {q["qid"]: q for q in questions}
    outcomes, scorers = _outcomes(scores, by_qid)
    models = in_order("model", {m for m, _, _ in outcomes})
    policies = sorted({p for _, p, _ in outcomes}, key=policy_sort_key)
    level = bootstrap["confidence_level"]
    rows = []
    for group in _groups(questions):
        qids = [q["qid"] for q in questions if group in (ALL, category_group(q["category"]))]
        # one resample of the questions per category, shared by every model, policy and
        # condition: the clean-injected drop and the margin over Standard RAG are paired
        seed = (bootstrap["seed"], zlib.crc32(group.encode("utf-8")))
        counts = resample_counts(len(qids), bootstrap["n_resamples"], seed)

        for model in models:
            reference = outcomes.get((model, STANDARD_RAG, MISCONCEPTION_CONTEXT))
            for policy in policies:
                clean = _flags(outcomes.get((model, policy, BEST_ANSWER_CONTEXT), {}), qids, TRUE)
                injected_outcomes = outcomes.get((model, policy, MISCONCEPTION_CONTEXT), {})
                injected = _flags(injected_outcomes, qids, TRUE)
                margin: Any = ""
                if reference is not None and policy != STANDARD_RAG:
                    margin = _mean_ci(injected - _flags(reference, qids, TRUE), counts, level, True)
                rows.append(
                    {
                        "model": model,
                        "category": group,
                        "policy": _policy_label(policy),
                        "n": len(qids),
                        "accuracy clean": _mean_ci(clean, counts, level, False),
                        "accuracy injected": _mean_ci(injected, counts, level, False),
                        "drop": _mean_ci(clean - injected, counts, level, True),
                        "abstained injected": pct(
                            _flags(injected_outcomes, qids, ABSTAINED).mean(), n=len(qids)
                        ),
                        "vs Standard RAG injected": margin,
                        "scorer": scorers[model],
                    }
                )
    used = sorted(set(scorers.values()))
    note = (
        f"{level:.0%} paired bootstrap CIs over questions ({bootstrap['n_resamples']} "
        "resamples); abstentions and unparsed outputs are not accurate. Scored by "
        f"{', '.join(used) or 'no scorer'}"
        + (f" ({TOKEN_F1_CAVEAT})" if TOKEN_F1 in used else "")
        + ". The CDD paper (Gemini-2.5-Flash, its binary scorer): CDD 62.0%, Standard RAG "
        "15.0% injected."
    )
    return Table(rows, note=note)


def _mean_ci(values: np.ndarray, counts: np.ndarray, level: float, signed: bool) -> Number:
    """The mean of per-question values in percent with its bootstrap interval."""
    ci = mean_interval(values, counts, level)
    return pct_ci(ci.value, ci.low, ci.high, signed=signed, n=values.size)


def _policy_label(policy: str) -> Label | str:
    if policy == STANDARD_RAG:
        return Label("Standard RAG (P1)", STANDARD_RAG)
    known = registry.policies()
    return Label(known[policy].printed or policy, policy) if policy in known else policy


def _build(sources: Sources) -> Table:
    [(_, questions)] = sources.read(TRUTHFULQA_QUESTIONS)
    return table_truthfulqa_probe(
        questions, sources.read(TRUTHFULQA_SCORES), sources.setting("bootstrap")
    )


TABLES = (
    TableSpec(
        "truthfulqa_probe",
        _build,
        (TRUTHFULQA_QUESTIONS, TRUTHFULQA_SCORES),
        ("bootstrap",),
        when=lambda features: features.truthfulqa_probe,
    ),
)
