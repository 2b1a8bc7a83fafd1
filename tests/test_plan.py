"""The plan: what a config fetches and runs, stated before any download."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from grabrag.data.asset_checks import human_bytes
from grabrag.data.asset_hub import asset_bytes
from grabrag.pipeline.config import validate_config
from grabrag.pipeline.plan import model_calls, plan_text, used_assets

from .conftest import REPO


def _config(name: str) -> dict:
    return validate_config(yaml.safe_load((REPO / "config" / name).read_text()))


def test_the_paper_config_plan_by_hand() -> None:
    config = _config("paper.yaml")
    assert len(used_assets(config)) == 9  # 3 GGUF, 2 datasets, BGE, GLiNER + tokenizer, DeBERTa
    calls = {r["rule"]: r for r in model_calls(config)}
    # 3 models x (500 + 500) questions x 4 conditions x P0, P1, P2
    assert calls["generate_context_prompts"]["calls"] == 3 * 1000 * 4 * 3 == 36_000
    assert calls["generate_context_prompts"]["jobs"] == 3 * 2 * 4
    assert calls["generate_closed_book"]["calls"] == 3_000
    # Table 13: Llama x NQ rebuilt at Q0 and QC
    assert calls["generate_context_prompts (seed sensitivity)"]["calls"] == 500 * 2 * 3
    # the transformers verifier: at most one pair per passage, not LLM calls
    assert calls["nli"]["calls"] == 3 * 1000 * 4 * 5 and calls["nli"]["llm"] is False
    assert "evidential_evaluate" not in calls and "cdd_generate" not in calls
    text = plan_text(config, lookup_hub=False)
    # the declared sizes: 2.49 + 4.92 + 4.68 + 1.0 + 1.5 + 0.4 + 0.8 + 0.0025 + 3.5 GB
    assert "In all: 19.3 GB." in text
    assert "In all: 102,000 model calls, 42,000 of them LLM calls" in text


def test_the_extended_config_plans_every_method() -> None:
    calls = {r["rule"]: r["calls"] for r in model_calls(_config("extended.yaml"))}
    per_condition = 3 * 1000 * 5  # models x questions x conditions (QX added)
    assert calls["evidential_evaluate"] == per_condition * 5  # one call per passage
    assert calls["evidential_generate"] == per_condition * 2  # EVID and EVID_CB
    # steps 1, 3, 4, 5; the diagnostics' 5 reruns; step 2 in context; the model gate
    assert calls["cdd_generate"] == per_condition * (4 + 5 + 1 + 1)
    assert calls["baselines_generate"] == per_condition * 4
    # EvidentialRAG's seeds: 123 and 999 make every call of seed 42 again
    for rule in ("generate_context_prompts", "evidential_evaluate", "cdd_generate"):
        assert calls[f"{rule} (seeds 123, 999)"] == 2 * calls[rule]
    assert not any("seed" in rule and "TruthfulQA" in rule for rule in calls)


def test_sizes_come_from_the_hub_else_the_config() -> None:
    # the hub is not reachable here: the declared size, then nothing
    spec = {"hub": "org/none", "revision": "7" * 40, "size_bytes": 1_500_000}
    assert asset_bytes(spec) == (1_500_000, "declared (size_bytes)")
    assert asset_bytes({"hub": "org/none", "revision": "7" * 40}) == (None, "unknown")
    assert (human_bytes(1_500_000), human_bytes(999), human_bytes(None)) == (
        "1.5 MB",
        "999 B",
        "unknown",
    )


def test_plan_rule_runs_without_any_download(tmp_path: Path) -> None:
    """`snakemake --configfile config/paper.yaml plan` as the README gives it: one local
    job that fetches nothing."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-s",
            str(REPO / "Snakefile"),
            "-d",
            str(tmp_path),
            "--configfile",
            str(REPO / "config/paper.yaml"),
            "-c1",
            "plan",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    plan = (tmp_path / "results/plan.md").read_text()
    assert "| llama-3.1-8b-instruct-q4_k_m |" in plan and "In all: 19.3 GB" in plan
    assert not (tmp_path / "resources").exists()  # no asset was fetched


def test_the_embedded_default_plans_its_methods_on_the_first_question() -> None:
    """config.yaml runs GRAB-RAG's policies on every SQuAD question and EvidentialRAG and
    the CDD family on the first (evidential.n_questions, cdd.n_questions: 1)."""
    config = validate_config(yaml.safe_load((REPO / "config.yaml").read_text()))
    n = config["datasets"]["squad"]["n_questions"]
    assert n > 1 and config["evidential"]["n_questions"] == config["cdd"]["n_questions"] == 1
    calls = {r["rule"]: r for r in model_calls(config)}
    conditions = 5  # Q100, Q50, Q0, QC, QX
    assert calls["generate_context_prompts"]["calls"] == n * conditions * 3
    assert calls["evidential_evaluate"]["calls"] == 1 * conditions * 5  # one per passage
    assert calls["evidential_generate"]["calls"] == 1 * conditions * 2  # EVID, EVID_CB
    assert calls["cdd_generate"]["calls"] == 1 * conditions * 9  # steps 1-5, the reruns
    assert calls["baselines_generate"]["calls"] == 1 * conditions * 4
    assert calls["cdd_generate"]["how"].endswith("on each dataset's first 1 question")
