"""P3's sweep over the F1 thresholds and closed-book confidence cutoffs (Table 12's and
Appendix F's inputs), from the stored P1 and closed-book generations without a model call.

Apart from the table modules, so that the p3_sweep rule's code (and its jobs' code hash)
does not change when a table's formatting does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from grabrag.policies.paper import SWEEP_CUTOFFS, SWEEP_THRESHOLDS, p3_sweep_decisions
from grabrag.scoring.abstention import capability_set, decision_rate


def p3_sweep_rows(
    p1: Mapping[str, Sequence[dict]],
    cb: Sequence[dict],
    p1_q100_decisions: Sequence[dict],
    gold: Mapping[str, Sequence[str]],
    thresholds: Sequence[float] = SWEEP_THRESHOLDS,
    cutoffs: Sequence[float] = SWEEP_CUTOFFS,
) -> list[dict[str, Any]]:
    """Table 12 inputs for one model x dataset: for every (threshold, cutoff), HwSA at QC,
    FAC at Q100 (on the P1 capability set) and the Q100 answer rate, from stored outputs."""
    capability = capability_set(p1_q100_decisions, gold)
    sweeps = {
        condition: p3_sweep_decisions(rows, cb, thresholds, cutoffs)
        for condition, rows in p1.items()
    }
    out = []
    for threshold in thresholds:
        for cutoff in cutoffs:
            row = {"threshold": threshold, "cutoff": cutoff}
            if "QC" in sweeps:
                row["hwsa_qc"] = float(decision_rate(sweeps["QC"][(threshold, cutoff)], "answer"))
            if "Q100" in sweeps:
                decisions = sweeps["Q100"][(threshold, cutoff)]
                row["ans_q100"] = float(decision_rate(decisions, "answer"))
                row["fac_q100"] = (
                    float(decision_rate(decisions, "abstain", capability))
                    if capability
                    else float("nan")
                )
            out.append(row)
    return out
