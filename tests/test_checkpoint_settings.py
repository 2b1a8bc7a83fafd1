"""A resumed model job never keeps rows made under other settings.

A checkpoint's first line records everything its rows depend on (the job's params: the
model entry with its batch, the decoding settings, the code hash that covers prompts and
grammars, the stage's own settings; and the sha256 of each input file: the context rows,
the model's asset manifest that pins the weights). A job resuming under other settings
drops those rows, says how many and what changed, and redoes them: Snakemake records the
output as made under the new settings, so no later run would repair a kept row.

The unit tests check the reader; the workflow tests plant a checkpoint of stale rows under
other settings in each model stage's cell of a copy of the tiny run and rerun the cell:
the output is the uninterrupted run's, not one stale row survives. (The NLI verifier
keeps no checkpoint: a killed NLI job redoes its cell whole.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grabrag.core.io import (
    SETTINGS,
    job_settings,
    read_checkpoint_rows,
    settings_changes,
    stamp_checkpoint,
)

from .conftest import copy_run, snakemake
from .test_workflow import _without_timing

MODEL = "micro"


def _settings(max_tokens: int, contexts: Path) -> dict:
    params = [("generation", {"max_tokens": max_tokens, "seed": 42}), ("code", "abc")]
    return job_settings(params, [contexts])


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_rows_made_under_the_same_settings_are_kept(tmp_path: Path) -> None:
    contexts = tmp_path / "Q0.jsonl"
    contexts.write_text('{"qid": "a"}\n')
    checkpoint = tmp_path / ".checkpoint.jsonl"
    settings = _settings(512, contexts)
    assert stamp_checkpoint(checkpoint, settings) == 0
    with checkpoint.open("a") as handle:
        handle.write(json.dumps({"qid": "a", "prompt": "P0"}) + "\n")
    assert stamp_checkpoint(checkpoint, _settings(512, contexts)) == 0
    done = read_checkpoint_rows(checkpoint, ("qid", "prompt"))
    assert list(done) == [("a", "P0")]
    # the settings line stays first, once
    assert [SETTINGS in row for row in _rows(checkpoint)] == [True, False]


def test_rows_made_under_other_settings_are_dropped_naming_what_changed(tmp_path: Path) -> None:
    contexts = tmp_path / "Q0.jsonl"
    contexts.write_text('{"qid": "a"}\n')
    checkpoint = tmp_path / ".checkpoint.jsonl"
    stamp_checkpoint(checkpoint, _settings(512, contexts))
    with checkpoint.open("a") as handle:
        for prompt in ("P0", "P1"):
            handle.write(json.dumps({"qid": "a", "prompt": prompt}) + "\n")
        handle.write('{"qid": "a", "pro')  # torn: never a finished row
    said: list[str] = []
    assert stamp_checkpoint(checkpoint, _settings(40, contexts), said.append) == 2
    assert read_checkpoint_rows(checkpoint, ("qid", "prompt")) == {}
    (line,) = said
    assert "2 rows made under other settings dropped" in line
    assert "generation.max_tokens: 512 -> 40" in line
    # an input's bytes changing drops them too, naming the file
    stamp_checkpoint(checkpoint, _settings(40, contexts))
    with checkpoint.open("a") as handle:
        handle.write(json.dumps({"qid": "a", "prompt": "P0"}) + "\n")
    contexts.write_text('{"qid": "a", "question": "edited"}\n')
    said.clear()
    assert stamp_checkpoint(checkpoint, _settings(40, contexts), said.append) == 1
    assert f"{contexts} changed" in said[0]


def test_a_checkpoint_that_records_no_settings_is_dropped(tmp_path: Path) -> None:
    checkpoint = tmp_path / ".checkpoint.jsonl"
    checkpoint.write_text(json.dumps({"qid": "a", "prompt": "P0"}) + "\n")
    said: list[str] = []
    assert stamp_checkpoint(checkpoint, {"params": {}, "inputs": {}}, said.append) == 1
    assert "records no settings" in said[0]


def test_settings_changes_list_each_changed_key() -> None:
    before = {"params": {"model": {"batch": 1}, "code": "a"}, "inputs": {"c.jsonl": "1"}}
    after = {"params": {"model": {"batch": 2}, "code": "a"}, "inputs": {"c.jsonl": "2"}}
    assert settings_changes(before, after) == ["c.jsonl changed", "model.batch: 1 -> 2"]


# --- every model stage, through the workflow --------------------------------------------

CELL = f"results/{{stage}}/{MODEL}/nq_bigbench/Q100"
# (the rule's outputs in the cell, its checkpoint file, the row keys that hold model text)
STAGES = {
    "generate_context_prompts": (
        "generation",
        ("P0.jsonl", "P1.jsonl", "P2.jsonl"),
        ".checkpoint.jsonl",
    ),
    "evidential_evaluate": ("evidential", ("evaluations.jsonl",), ".evaluate_checkpoint.jsonl"),
    "evidential_generate": (
        "evidential",
        ("EVID.jsonl", "EVID_CB.jsonl"),
        ".generate_checkpoint.jsonl",
    ),
    "baselines_generate": (
        "cdd",
        ("CAI.jsonl", "SHAM.jsonl", "REFLECT.jsonl", "FILTER.jsonl"),
        ".baselines_checkpoint.jsonl",
    ),
    "cdd_generate": ("cdd", ("traces.jsonl",), ".traces_checkpoint.jsonl"),
}
STALE = "STALE: made under other settings"


def _stale(row: dict) -> dict:
    """A finished row with every model text replaced, as other settings would have made it."""
    return {
        k: STALE if isinstance(v, str) and k not in ("qid", "prompt", "policy", "condition") else v
        for k, v in row.items()
    }


@pytest.mark.parametrize("rule", list(STAGES))
def test_a_resumed_job_redoes_rows_made_under_other_settings(
    rule: str, tiny_run: Path, tmp_path: Path
) -> None:
    stage, names, checkpoint_name = STAGES[rule]
    copy_run(tiny_run, tmp_path)
    cell = tmp_path / CELL.format(stage=stage)
    outputs = [cell / name for name in names]
    stale = [_stale(row) for path in outputs for row in _rows(path)]
    for path in outputs:
        path.unlink()
    # a checkpoint of every row of the cell, made under other settings (another max_tokens)
    checkpoint = cell / checkpoint_name
    stamp_checkpoint(checkpoint, {"params": {"generation": {"max_tokens": 7}}, "inputs": {}})
    with checkpoint.open("a") as handle:
        for row in stale:
            handle.write(json.dumps(row) + "\n")
    targets = [str(path.relative_to(tmp_path)) for path in outputs]
    snakemake(tmp_path, *targets)
    for path in outputs:
        relative = path.relative_to(tmp_path)
        assert STALE not in path.read_text(), relative
        assert _without_timing(path) == _without_timing(tiny_run / relative), relative
    assert not checkpoint.exists()
    said = [
        p.relative_to(tmp_path)
        for p in (tmp_path / "results/logs").rglob("*.log")
        if "rows made under other settings dropped" in p.read_text()
    ]
    assert len(said) == 1, said
