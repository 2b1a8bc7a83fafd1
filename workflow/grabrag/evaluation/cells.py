"""The per-question columns of one (model, dataset, condition, policy) cell: each decision
row scored once (answered, abstained, unparseable, EM, F1, the (confidence, correct) pair
of AURC/ECE, the QC answer category, and for EvidentialRAG's policies the answer-ECE bins
and the route), as 0/1 or numeric arrays in the dataset frame's question order.

Every metric of the evaluation is a ratio or a function of sums of these columns, which is
what lets the bootstrap resample them with one matrix product.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from grabrag.core import registry
from grabrag.core.errors import DataError
from grabrag.evaluation.inputs import DatasetFrame
from grabrag.evaluation.schema import (
    ANSWER_ECE_BINS,
)
from grabrag.evidential.routing import ROUTES
from grabrag.scoring.answers import (
    QC_CATEGORIES,
    abstained,
    answered,
    classify_qc_answer,
    parse_failed,
    planted_strings,
    row_correct,
    row_em,
    row_f1,
)
from grabrag.scoring.calibration import CONFIDENCE_SCALE, ece_bin_index, selected_answer_score


class CellColumns:
    """Per-question indicator columns of one (model, dataset, condition, policy) cell."""

    def __init__(
        self,
        ds: DatasetFrame,
        condition: str,
        rows: Mapping[str, Mapping[str, Any]],
        policy: str | None = None,
    ):
        n = ds.n
        self.condition = condition
        # EvidentialRAG's ECE: per question, rows / correct rows / summed [0, 1] confidence
        # in each of the 15 bins (None: not computed for this policy).
        self.answer_bins: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        spec = registry.policies().get(policy)  # None: a name no module registered
        if spec is not None and spec.answer_ece:
            self.answer_bins = tuple(np.zeros((n, ANSWER_ECE_BINS)) for _ in range(3))
        self.routes: dict[str, np.ndarray] | None = None
        if spec is not None and spec.routed:
            self.routes = {route: np.zeros(n) for route in ROUTES}
        self.present = np.zeros(n)
        self.answered = np.zeros(n)
        self.abstained = np.zeros(n)
        self.failed = np.zeros(n)
        self.em = np.zeros(n)
        self.f1 = np.zeros(n)
        self.category = {c: np.zeros(n) for c in QC_CATEGORIES}
        self.lenient = {c: np.zeros(n) for c in QC_CATEGORIES}
        self.scored: list[tuple[int, float, int]] = []  # (position, confidence, correct)
        for qid, row in rows.items():
            self._score(ds, qid, row)

    def _score(self, ds: DatasetFrame, qid: str, row: Mapping[str, Any]) -> None:
        """Enter one decision row in the columns, at its question's position."""
        i = ds.position[qid]
        gold = ds.gold[qid]
        self.present[i] = 1
        self.answered[i] = answered(row)
        self.abstained[i] = abstained(row)
        self.failed[i] = parse_failed(row)
        self.em[i] = row_em(row, gold)
        self.f1[i] = row_f1(row, gold)
        if self.routes is not None and "fused_confidence" not in row:
            raise DataError(
                f"qid {qid}: EvidentialRAG decision row without fused_confidence (written "
                "by an older version); rerun the policy rule"
            )
        if self.answer_bins is not None:
            self._score_answer(i, qid, row, gold)
        if self.routes is not None:
            if row.get("route") not in self.routes:
                raise DataError(f"qid {qid}: unknown route {row.get('route')!r}")
            self.routes[row["route"]][i] = 1
        y = row_correct(row, gold, self.condition)
        if y is not None:
            confidence = float(row["confidence"])
            if not 0 <= confidence <= 100:
                raise DataError(f"qid {qid}: confidence {confidence} is outside 0-100")
            self.scored.append((i, confidence, y))
        if self.condition == "QC" and answered(row):
            context = ds.qc[qid]
            planted = planted_strings(context)
            answer = row.get("answer")
            category = classify_qc_answer(answer, context["answers"], planted)
            self.category[category][i] = 1
            lenient = classify_qc_answer(answer, context["answers"], planted, True)
            self.lenient[lenient][i] = 1

    def _score_answer(self, i: int, qid: str, row: Mapping[str, Any], gold: list[str]) -> None:
        """Enter the row's selected answer in its bin of EvidentialRAG's answer ECE."""
        scored = selected_answer_score(row, gold)
        if scored is not None:
            confidence, correct = scored
            if not 0 <= confidence <= 100:
                raise DataError(f"qid {qid}: confidence {confidence} is outside 0-100")
            b = int(ece_bin_index(np.array([confidence]), ANSWER_ECE_BINS)[0])
            rows_in, correct_in, conf_in = self.answer_bins
            rows_in[i, b] += 1
            correct_in[i, b] += correct
            conf_in[i, b] += confidence / CONFIDENCE_SCALE

    def grid(self) -> np.ndarray:
        """The confidence levels this cell uses, descending."""
        return np.array(sorted({conf for _, conf, _ in self.scored}, reverse=True), dtype=float)

    def levels(self, grid: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """n x L rows and correct rows per confidence level of ``grid`` (descending)."""
        rows_at = np.zeros((n, len(grid)))
        correct_at = np.zeros((n, len(grid)))
        where = {level: j for j, level in enumerate(grid)}
        for i, confidence, y in self.scored:
            rows_at[i, where[confidence]] += 1
            correct_at[i, where[confidence]] += y
        return rows_at, correct_at
