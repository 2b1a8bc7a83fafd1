"""The metric rows of one (model, dataset, policy), and of the policy mean of section 6,
as bootstrap blocks: one step per metric family (rates, FAC, the QC answer breakdown,
AURC/ECE, EvidentialRAG's answer ECE and routes, paired HwSA, refusal scores, normalised
HwSA, selection bias), each returning its own :class:`~grabrag.evaluation.block.Block`.

:func:`policy_block` merges the steps in the order the tidy table lists the rows; that
order, and the order the columns are added in, is part of the output. What each metric
means: :mod:`grabrag.evaluation.evaluate`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from grabrag.core import registry
from grabrag.core.conditions import PAPER, SHOULD_ABSTAIN, SHOULD_ANSWER
from grabrag.evaluation.block import (
    Block,
    Fn,
    Totals,
    column,
    harmonic_mean,
    nan_like,
    pooled,
    positive,
    rate,
    total,
)
from grabrag.evaluation.cells import CellColumns
from grabrag.evaluation.schema import (
    ALL,
    ANSWER_ECE,
    DIFF,
    DIFF_QX,
    EMPTY_CAP,
    MEAN_POLICY,
    NO_ANSWERED,
    NO_ELIGIBLE,
    NO_EXCLUDED,
    NO_NORMALISE,
    NO_P1,
    NO_PAIR,
    NO_PAIR_QX,
    NO_QC,
    NO_ROWS,
    NO_SCORED,
    POOLED,
    ece_metric,
)
from grabrag.evidential.routing import ROUTES
from grabrag.scoring.abstention import NO_REFUSAL, NO_SHOULD_ABSTAIN
from grabrag.scoring.answers import QC_CATEGORIES
from grabrag.scoring.bootstrap import ratio
from grabrag.scoring.calibration import aurc_from_levels, ece_from_levels, ece_mean_from_bins

Cells = Mapping[str, CellColumns]  # condition -> columns, in conditions.NAMES order

# (metric, column) of the plain rates over every row of a cell.
_RATES = (
    ("answer_rate", "answered"),
    ("abstain_rate", "abstained"),
    ("parse_failed_rate", "failed"),
    ("em", "em"),
    ("f1", "f1"),
)


def policy_block(
    cells: Cells,
    capability: np.ndarray | None,
    eligible: np.ndarray,
    ece_bins: Sequence[int],
    n: int,
) -> Block:
    """Every metric row of one policy's cells: per condition its rates, FAC and QC answer
    breakdown, then AURC/ECE, the answer ECE, the routes, paired HwSA, the refusal scores,
    normalised HwSA and the selection-bias EM. ``capability``: the 0/1 capability set
    C_{P1,m} per question (None without a P1 Q100 cell); ``eligible``: QC eligibility."""
    block = Block()
    for c, cell in cells.items():
        block.extend(_rates(c, cell))
        if c in SHOULD_ANSWER:
            block.extend(_fac(c, cell, capability))
        if c == "QC":
            block.extend(_qc_answers(cell))
    block.extend(_calibration(cells, ece_bins, n))
    block.extend(_answer_ece(cells))
    block.extend(_routes(cells))
    block.extend(_paired_hwsa(cells))
    block.extend(_refusal(cells))
    block.extend(_normalised_hwsa(cells))
    block.extend(_selection_bias(cells, eligible))
    return block


def _rates(c: str, cell: CellColumns) -> Block:
    """Answer, abstain and parse-failure rates, EM and F1 over every row of the cell."""
    block = Block()
    for name in ("present", "answered", "abstained", "failed", "em", "f1"):
        block.columns[column(c, name)] = getattr(cell, name)
    present = total(column(c, "present"))
    for metric, name in _RATES:
        block.add(metric, c, rate(column(c, name), column(c, "present")), present, NO_ROWS)
    return block


def _fac(c: str, cell: CellColumns, capability: np.ndarray | None) -> Block:
    """FAC: the abstain rate on the capability set (NaN without a P1 Q100 cell)."""
    block = Block()
    if capability is None:
        block.add("fac", c, nan_like(column(c, "present")), lambda t: 0, NO_P1)
        return block
    block.columns[column(c, "cap")] = cell.present * capability
    block.columns[column(c, "cap_abstained")] = cell.abstained * capability
    fac = rate(column(c, "cap_abstained"), column(c, "cap"))
    block.add("fac", c, fac, total(column(c, "cap")), EMPTY_CAP)
    return block


def _qc_answers(cell: CellColumns) -> Block:
    """Answered QC rows, and their echo / override / hallucination counts and shares, by
    normalised match and (``_lenient``) by containment."""
    block = Block()
    answered = total(column("QC", "answered"))
    block.add("qc_answered", "QC", answered, total(column("QC", "present")), NO_QC, count=True)
    for split, suffix in ((cell.category, ""), (cell.lenient, "_lenient")):
        for category in QC_CATEGORIES:
            key = column("QC", f"{category}{suffix}")
            block.columns[key] = split[category]
            count = total(key)
            block.add(f"qc_{category}{suffix}", "QC", count, answered, NO_ANSWERED, count=True)
            share = rate(key, column("QC", "answered"))
            block.add(f"qc_{category}{suffix}_share", "QC", share, answered, NO_ANSWERED)
    return block


def _calibration(cells: Cells, ece_bins: Sequence[int], n: int) -> Block:
    """AURC / ECE per condition and pooled over the paper's conditions (Table 10)."""
    # All on one grid: the confidence levels any of the block's cells uses, descending. A
    # level a cell does not use is a zero column (no rows there), which changes neither
    # metric.
    block = Block()
    grid = np.array(
        sorted({x for cell in cells.values() for x in cell.grid()}, reverse=True), dtype=float
    )
    groups: list[tuple[str, str, str]] = []
    for c, cell in cells.items():
        block.columns[column(c, "N")], block.columns[column(c, "C")] = cell.levels(grid, n)
        groups.append((c, column(c, "N"), column(c, "C")))
    paper = [c for c in cells if c in PAPER]
    if paper:
        block.derived["all.N"] = pooled([column(c, "N") for c in paper])
        block.derived["all.C"] = pooled([column(c, "C") for c in paper])
        groups.append((ALL, "all.N", "all.C"))
    for label, rows_at, correct_at in groups:

        def size(t: Totals, key: str = rows_at) -> np.ndarray:
            return t[key].sum(axis=-1)

        def aurc(t: Totals, r: str = rows_at, k: str = correct_at) -> np.ndarray:
            return aurc_from_levels(t[r], t[k])

        block.add("aurc", label, aurc, size, NO_SCORED)
        for bins in ece_bins:

            def ece(
                t: Totals, r: str = rows_at, k: str = correct_at, g=grid, b: int = bins
            ) -> np.ndarray:
                return ece_from_levels(g, t[r], t[k], b)

            block.add(ece_metric(bins), label, ece, size, NO_SCORED)
    return block


def _answer_ece(cells: Cells) -> Block:
    """EvidentialRAG's ECE (Eqs. 26-27) per condition and pooled over every condition of
    the cell (QX included, as the sweep's pooled rows)."""
    block = Block()
    scored = {c: cell for c, cell in cells.items() if cell.answer_bins is not None}
    for c, cell in scored.items():
        for part, array in zip(("AN", "AC", "AS"), cell.answer_bins, strict=True):
            block.columns[column(c, part)] = array
    answer_groups = [(c, [c]) for c in scored]
    if scored:
        answer_groups.append((POOLED, list(scored)))
    for label, members in answer_groups:

        def answer_ece(t: Totals, m: Sequence[str] = members) -> np.ndarray:
            sums = [sum(t[column(c, part)] for c in m) for part in ("AN", "AC", "AS")]
            return ece_mean_from_bins(*sums)

        def answer_size(t: Totals, m: Sequence[str] = members) -> np.ndarray:
            return sum(t[column(c, "AN")] for c in m).sum(axis=-1)

        block.add(ANSWER_ECE, label, answer_ece, answer_size, NO_SCORED)
    return block


def _routes(cells: Cells) -> Block:
    """The share of rows on each EvidentialRAG route, per condition and pooled."""
    block = Block()
    routed = {c: cell for c, cell in cells.items() if cell.routes is not None}
    for c, cell in routed.items():
        for route in ROUTES:
            block.columns[column(c, f"route_{route}")] = cell.routes[route]
    route_groups = [(c, [c]) for c in routed]
    if routed:
        route_groups.append((POOLED, list(routed)))
    for label, members in route_groups:
        size = pooled([column(c, "present") for c in members])
        for route in ROUTES:
            share = pooled([column(c, f"route_{route}") for c in members])

            def route_share(t: Totals, num: Fn = share, den: Fn = size) -> np.ndarray:
                return ratio(num(t), den(t))

            block.add(f"route_{route}", label, route_share, size, NO_ROWS)
    return block


def _paired_hwsa(cells: Cells) -> Block:
    """HwSA on the paired QC-eligible subset and QC - Q0 (Table 1, Table 7); QX vs QC on
    the questions present in both (the inter-context conflict)."""
    block = Block()
    cols = block.columns
    if "Q0" in cells and "QC" in cells:
        pair = cells["Q0"].present * cells["QC"].present
        cols["pair"] = pair
        cols["pair.Q0"] = pair * cells["Q0"].answered
        cols["pair.QC"] = pair * cells["QC"].answered
        size = total("pair")
        block.add("hwsa", "Q0", rate("pair.Q0", "pair"), size, NO_PAIR)
        block.add("hwsa", "QC", rate("pair.QC", "pair"), size, NO_PAIR)
        block.add(
            "hwsa_diff",
            DIFF,
            lambda t: ratio(t["pair.QC"] - t["pair.Q0"], t["pair"]),
            size,
            NO_PAIR,
        )
    if "QC" in cells and "QX" in cells:
        pair = cells["QC"].present * cells["QX"].present
        cols["pairx"] = pair
        cols["pairx.QC"] = pair * cells["QC"].answered
        cols["pairx.QX"] = pair * cells["QX"].answered
        size = total("pairx")
        block.add("hwsa", "QX", rate("pairx.QX", "pairx"), size, NO_PAIR_QX)
        block.add(
            "hwsa_diff",
            DIFF_QX,
            lambda t: ratio(t["pairx.QX"] - t["pairx.QC"], t["pairx"]),
            size,
            NO_PAIR_QX,
        )
    return block


def _refusal(cells: Cells) -> Block:
    """Refusal precision / recall / F1 pooled over every condition of the cell."""
    block = Block()
    if not cells:
        return block
    derived = block.derived
    should = [c for c in cells if c in SHOULD_ABSTAIN]
    derived["refusal.R"] = pooled([column(c, "abstained") for c in cells])
    derived["refusal.all"] = pooled([column(c, "present") for c in cells])
    if should:
        derived["refusal.U"] = pooled([column(c, "present") for c in should])
        derived["refusal.RU"] = pooled([column(c, "abstained") for c in should])
    else:
        derived["refusal.U"] = lambda t: np.zeros_like(t["refusal.R"])
        derived["refusal.RU"] = lambda t: np.zeros_like(t["refusal.R"])
    precision = rate("refusal.RU", "refusal.R")
    recall = rate("refusal.RU", "refusal.U")
    block.add("refusal_precision", POOLED, precision, total("refusal.R"), NO_REFUSAL)
    block.add("refusal_recall", POOLED, recall, total("refusal.U"), NO_SHOULD_ABSTAIN)
    block.add(
        "refusal_f1",
        POOLED,
        lambda t: harmonic_mean(precision(t), recall(t)),
        total("refusal.all"),
        f"{NO_REFUSAL}, or {NO_SHOULD_ABSTAIN}",
    )
    return block


def _normalised_hwsa(cells: Cells) -> Block:
    """Section 6: QC HwSA normalised by the Q100 answer rate (all questions)."""
    block = Block()
    if "QC" in cells and "Q100" in cells:
        block.add(
            "normalised_hwsa",
            "QC",
            lambda t: ratio(
                ratio(t[column("QC", "answered")], t[column("QC", "present")]),
                positive(ratio(t[column("Q100", "answered")], t[column("Q100", "present")])),
            ),
            total(column("QC", "present")),
            NO_NORMALISE,
        )
    return block


def _selection_bias(cells: Cells, eligible: np.ndarray) -> Block:
    """Section 6 selection bias: Q100 EM on QC-eligible vs excluded questions."""
    block = Block()
    if "Q100" not in cells:
        return block
    q100, cols = cells["Q100"], block.columns
    cols["elig"] = q100.present * eligible
    cols["elig.em"] = q100.em * eligible
    cols["excl"] = q100.present * (1 - eligible)
    cols["excl.em"] = q100.em * (1 - eligible)
    block.add("em_eligible", "Q100", rate("elig.em", "elig"), total("elig"), NO_ELIGIBLE)
    block.add("em_excluded", "Q100", rate("excl.em", "excl"), total("excl"), NO_EXCLUDED)
    block.add(
        "em_gap",
        "Q100",
        lambda t: ratio(t["elig.em"], t["elig"]) - ratio(t["excl.em"], t["excl"]),
        lambda t: t["elig"] + t["excl"],
        f"{NO_ELIGIBLE}, or {NO_EXCLUDED}",
    )
    return block


def mean_rows(
    model: str,
    dataset: str,
    policies: Mapping[str, Cells],
    counts: np.ndarray,
    confidence_level: float,
) -> list[dict[str, Any]]:
    """Policy-mean HwSA@QC, Ans@Q100 and their ratio (section 6's normalised HwSA)."""
    # The paper's policies only: adding EVID / EVID_CB must not move section 6's mean.
    chosen = [
        p
        for p in policies
        if p in registry.PAPER_POLICIES and "QC" in policies[p] and "Q100" in policies[p]
    ]
    if not chosen:
        return []
    qc = [policies[p]["QC"] for p in chosen]
    q100 = [policies[p]["Q100"] for p in chosen]
    # Complete cells (checked in DatasetFrame.cell) share one question set per condition,
    # so the mean over policies of the rates is the rate of the mean answered column.
    block = Block()
    block.columns.update(
        {
            "qc.answered": np.mean([c.answered for c in qc], axis=0),
            "qc.present": qc[0].present,
            "q100.answered": np.mean([c.answered for c in q100], axis=0),
            "q100.present": q100[0].present,
        }
    )
    hwsa_qc = rate("qc.answered", "qc.present")
    ans_q100 = rate("q100.answered", "q100.present")
    block.add("hwsa", "QC", hwsa_qc, total("qc.present"), NO_QC)
    block.add("answer_rate", "Q100", ans_q100, total("q100.present"), NO_ROWS)
    block.add(
        "normalised_hwsa",
        "QC",
        lambda t: ratio(hwsa_qc(t), positive(ans_q100(t))),
        total("qc.present"),
        NO_NORMALISE,
    )
    head = {"model": model, "dataset": dataset, "policy": MEAN_POLICY}
    return block.run(counts, confidence_level, head)
