"""Table builders on hand-made tidy metric rows."""

from __future__ import annotations

import pandas as pd

from grabrag.tables import table_seed_sensitivity

COLUMNS = ("model", "dataset", "policy", "condition", "metric", "value", "ci_low", "ci_high", "n")


def _metrics(dataset: str, rates: dict[tuple[str, str], tuple[float, int]]) -> pd.DataFrame:
    rows = [
        ("m", dataset, policy, condition, "answer_rate", value, value, value, n)
        for (policy, condition), (value, n) in rates.items()
    ]
    rows.append(("m", dataset, "P1", "Q100", "answer_rate", 0.9, 0.9, 0.9, 10))
    return pd.DataFrame(rows, columns=COLUMNS)


def test_seed_sensitivity_compares_answer_rates_of_each_seeds_own_cells() -> None:
    base = _metrics("nq", {("P1", "Q0"): (0.05, 500), ("P1", "QC"): (0.8267, 202)})
    variant = _metrics("nq_seed43", {("P1", "Q0"): (0.066, 500), ("P1", "QC"): (0.82, 200)})
    table = table_seed_sensitivity(base, variant, "m", "nq", 42, 43)
    assert table.to_dict("records") == [
        {
            "model": "m",
            "dataset": "nq",
            "policy": "P1",
            "condition": "Q0",
            "seed 42": "5.0",
            "n (seed 42)": 500,
            "seed 43": "6.6",
            "n (seed 43)": 500,
            "|delta| (pp)": "1.60",
        },
        {
            "model": "m",
            "dataset": "nq",
            "policy": "P1",
            "condition": "QC",
            "seed 42": "82.7",
            "n (seed 42)": 202,
            "seed 43": "82.0",
            "n (seed 43)": 200,
            "|delta| (pp)": "0.67",
        },
    ]


def test_seed_sensitivity_missing_cell_is_not_a_number() -> None:
    base = _metrics("nq", {("P1", "Q0"): (0.05, 500)})
    variant = _metrics("nq_seed43", {("P1", "Q0"): (0.066, 500), ("P1", "QC"): (0.82, 200)})
    qc = table_seed_sensitivity(base, variant, "m", "nq", 42, 43).iloc[1]
    assert (qc["seed 42"], qc["n (seed 42)"], qc["|delta| (pp)"]) == ("n/a", 0, "n/a")
