"""The re-ask audit: each generation cell's first questions sent again at another
concurrency, and the table of per-model agreement with the cells' own calls."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from grabrag.generation.prompts import CONTEXT_PROMPTS
from grabrag.generation.reask import (
    audit_concurrency,
    audit_model,
    compare_rows,
    pooled_agreement,
)
from grabrag.pipeline.config import validate_config
from grabrag.report.reask_table import agreement_table
from grabrag.report.tables import decoding_note

from .conftest import TINY, copy_run, planned_jobs, snakemake


def call(qid: str, prompt: str = "P0", **fields: object) -> dict:
    row = {"qid": qid, "prompt": prompt, "decision": "answer", "answer": "Paris"}
    return {**row, "confidence": 80, "raw": '{"answer": "Paris"}', **fields}


def test_each_count_is_at_most_the_coarser_one_before() -> None:
    own = [call("a"), call("b"), call("c"), call("d"), call("a", "P1")]
    again = [
        call("a"),  # the same call
        call("b", raw='{"answer":"Paris"}'),  # the same fields, another output text
        call("c", decision="abstain", answer="Paris"),  # the answer alike, not the decision
        call("d", confidence=60),
        call("a", "P1", answer="Lyon"),
    ]
    assert compare_rows(own, again) == {
        "calls": 5,
        "decision": 4,
        "answer": 3,
        "confidence": 2,
        "raw": 1,
    }


def test_a_reasked_question_missing_from_its_cell_is_named() -> None:
    with pytest.raises(ValueError, match=r"'z' \(P0\) is not in its generation cell"):
        compare_rows([call("a")], [call("z")])


def test_cells_pool_per_model() -> None:
    cells = [{"model": "m"}, {"model": "m"}, {"model": "n"}]
    counts = pooled_agreement(
        cells,
        [[call("a")], [call("b", decision="abstain")], [call("c")]],
        [[call("a")], [call("b")], [call("c", raw="x")]],
    )
    assert counts["m"] == {"calls": 2, "decision": 1, "answer": 1, "confidence": 1, "raw": 1}
    assert counts["n"]["calls"] == 1 and counts["n"]["raw"] == 0


def test_the_reask_runs_at_another_concurrency_by_default() -> None:
    served = {"endpoint": {"base_url": "http://h/v1", "model": "x", "concurrency": 8}}
    assert audit_concurrency(served, None) == 1
    assert audit_concurrency({"batch": 1}, None) == 4
    assert audit_concurrency({"batch": 2}, 3) == 3
    assert audit_model(served, 1)["endpoint"]["concurrency"] == 1
    assert audit_model({"batch": 2, "asset": "a"}, 1) == {"batch": 1, "asset": "a"}


def test_the_table_says_per_model_what_came_back_the_same() -> None:
    counts = {"m": {"calls": 4, "decision": 3, "answer": 2, "confidence": 2, "raw": 1}}
    table = agreement_table(counts, {"m": 8}, {"m": 1}, served=["m"])
    (row,) = table.rows
    assert row["Run at"] == "concurrency 8" and row["Re-asked at"] == "concurrency 1"
    assert row["Same decision (%)"].estimate == 75.0 and row["Same output (%)"] == "25.0"
    assert "not a paper's quantity" in table.note


def test_the_batching_note_covers_served_concurrency() -> None:
    one = {"side_by_side": 1, "served": False, "audited": False}
    assert decoding_note({"m": one}) == ""
    served = {"side_by_side": 4, "served": True, "audited": False}
    note = decoding_note({"m": one, "s": served})
    assert "s concurrency 4" in note and "config reask_audit" in note and "m " not in note
    audited = {"audited": True}
    note = decoding_note({"s": {**served, **audited}, "g": {**one, "side_by_side": 2, **audited}})
    assert "g batch 2, s concurrency 4" in note and "table reask_agreement" in note


def test_the_audit_reasks_every_cell_and_tables_the_agreement(
    tiny_run: Path, tmp_path: Path
) -> None:
    """On a copy of the tiny run (the micro model at batch 2): the first question of every
    generation cell sent again one call at a time; nothing but the audit runs, and the
    table's counts are those of the files."""
    copy_run(tiny_run, tmp_path)
    config = yaml.safe_load(TINY.read_text())
    audit = tmp_path / "audit.yaml"
    audit.write_text(yaml.safe_dump({**config, "reask_audit": {"questions": 1}}))
    table = "results/tables/reask_agreement.csv"
    proc = snakemake(tmp_path, table, configfile=audit)
    jobs = planned_jobs(proc.stdout + proc.stderr)
    # every configured dataset and condition (not the seed rebuild's cells)
    generation = tmp_path / "results" / "generation" / "micro"
    conditions = validate_config(config)["generation"]["conditions"]
    cells = [generation / d / c for d in config["datasets"] for c in conditions]
    assert jobs == {"reask": len(cells), "reask_table": 1}, jobs
    calls = decisions = 0
    for cell in cells:
        reasked = tmp_path / "results/reask/micro" / cell.parent.name / f"{cell.name}.jsonl"
        rows = [json.loads(line) for line in reasked.read_text().splitlines()]
        own_rows = (cell / "P0.jsonl").read_text().splitlines()
        if not own_rows:  # a condition no question of the dataset reached (QC: no swap)
            assert rows == []
            continue
        assert [r["prompt"] for r in rows] == list(CONTEXT_PROMPTS)
        first = json.loads(own_rows[0])
        assert {r["qid"] for r in rows} == {first["qid"]}
        assert {r["batch"] for r in rows} == {1} and first["batch"] == 2
        benchmark = tmp_path / "results/benchmarks/reask/micro" / cell.parent.name
        assert (benchmark / f"{cell.name}.tsv").read_text().startswith("s\th:m:s\tmax_rss")
        for row in rows:
            own = json.loads((cell / f"{row['prompt']}.jsonl").read_text().splitlines()[0])
            calls += 1
            decisions += row["decision"] == own["decision"]
    assert calls >= 3 * 6, calls  # NQ's five conditions and SQuAD's Q100, Q50 and Q0 at least
    (line,) = csv.DictReader((tmp_path / table).open())
    assert line["Model"] == "micro" and line["Run at"] == "batch 2"
    assert line["Re-asked at"] == "batch 1" and int(line["Calls"]) == calls
    assert float(line["Same decision (%)"]) == pytest.approx(100 * decisions / calls, abs=0.05)
    # the audit is part of the run: a second run plans nothing
    proc = snakemake(tmp_path, table, "-n", configfile=audit)
    assert planned_jobs(proc.stdout + proc.stderr) == {}
