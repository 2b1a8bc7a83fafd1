"""Library code is an input: editing a module of grabrag plans the jobs whose scripts import
it (directly or through other modules) and what depends on them; comments, layout and
docstrings plan nothing. Each test edits a copy of the workflow's source and plans
(`snakemake -n`) against a copy of the finished tiny run."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import MODEL_RULES, copy_run, copy_workflow, planned_jobs, snakemake

pytestmark = pytest.mark.integration

# The stages before generation.
UPSTREAM_RULES = {
    "fetch_asset",
    "prepare_data",
    "embed",
    "retrieve",
    "build_contexts",
    "entity_pool",
    "swaps",
    "qc_contexts",
    "qx_contexts",
}


@pytest.fixture
def edit_and_plan(tiny_run: Path, tmp_path: Path):
    """Returns plan(edits): applies {module: edit(text) -> text} to a copy of the library
    and returns the jobs a dry run plans against a copy of the finished run."""
    copy_run(tiny_run, tmp_path)
    source = copy_workflow(tmp_path / "workflow_copy")

    def plan(edits) -> dict[str, int]:
        for module, edit in edits.items():
            path = source / "workflow" / "grabrag" / module
            path.write_text(edit(path.read_text()))
        out = snakemake(tmp_path, "-n", snakefile=source / "Snakefile").stdout
        return planned_jobs(out)

    return plan


def code_edit(text: str) -> str:
    return text + "\n_EDITED_FOR_A_TEST = True\n"


def layout_edit(text: str) -> str:
    """Comments, blank lines and a reworded module docstring: no change to the code."""
    assert text.startswith('"""'), "the edit rewords the module docstring"
    text = text.replace('"""', '"""Reworded for a test. ', 1)
    text = text.replace("\ndef ", "\n\n# a comment added by a test\ndef ", 1)
    return "# a comment added by a test\n" + text + "\n\n\n# and one at the end\n"


@pytest.fixture(scope="module")
def full_plan(tmp_path_factory: pytest.TempPathFactory) -> dict[str, int]:
    """Every job of the tiny config, planned in an empty folder."""
    return planned_jobs(snakemake(tmp_path_factory.mktemp("empty"), "-n").stdout)


def test_a_run_plans_nothing_and_comment_edits_plan_nothing(edit_and_plan) -> None:
    assert edit_and_plan({}) == {}
    modules = (
        "policies/paper.py",
        "generation/prompts.py",
        "report/figures.py",
        "report/cdd_tables.py",
        "core/io.py",
        "generation/generator.py",
        "policies/nli.py",
    )
    assert edit_and_plan(dict.fromkeys(modules, layout_edit)) == {}


def test_editing_grabrag_policies_plans_theirs_and_what_follows_never_generation(
    edit_and_plan, full_plan
) -> None:
    jobs = edit_and_plan({"policies/paper.py": code_edit})
    # P0-P4's jobs rerun; EvidentialRAG's and CDD's policies decide in modules of their own.
    assert 0 < jobs["policy"] < full_plan["policy"], jobs
    # the P3 sweep imports P3's rule; metrics, tables and figures read the decisions
    assert {"p3_sweep", "table", "metrics", "figure"} <= set(jobs), jobs
    assert not (MODEL_RULES | UPSTREAM_RULES) & set(jobs), jobs


def test_editing_the_prompts_plans_generation(edit_and_plan, full_plan) -> None:
    jobs = edit_and_plan({"generation/prompts.py": code_edit})
    for rule in ("generate_context_prompts", "generate_closed_book"):
        assert jobs[rule] == full_plan[rule], jobs
    assert "policy" in jobs and "table" in jobs, jobs
    assert not UPSTREAM_RULES & set(jobs), jobs


def test_editing_a_metric_plans_no_data_retrieval_or_swap_stage(edit_and_plan, full_plan) -> None:
    # The SQuAD normalisation every stage uses lives in core/text.py, not with the metrics.
    jobs = edit_and_plan({"scoring/calibration.py": code_edit})
    assert jobs["metrics"] == full_plan["metrics"] and "table" in jobs, jobs
    assert not UPSTREAM_RULES & set(jobs), jobs
    assert not {"generate_context_prompts", "generate_closed_book"} & set(jobs), jobs


def test_editing_the_plotting_code_plans_figures_only(edit_and_plan, full_plan) -> None:
    jobs = edit_and_plan({"report/figures.py": code_edit})
    assert jobs == {"figure": full_plan["figure"], "all": 1}, jobs


def test_editing_one_family_of_tables_plans_those_tables_only(edit_and_plan, tiny_run) -> None:
    cdd_tables = sorted(p.stem for p in (tiny_run / "results" / "tables").glob("cdd_*.md"))
    assert cdd_tables, "the tiny config must produce the CDD tables"
    jobs = edit_and_plan({"report/cdd_tables.py": code_edit})
    # and the one job that copies the tables' pages into the report's folder, and the
    # reproduction report, which holds CDD's published numbers against cdd_results and
    # cdd_ablation
    assert jobs == {"table": len(cdd_tables), "table_pages": 1, "reproduction": 1, "all": 1}, jobs


def test_a_script_rule_without_its_code_param_is_an_error(tmp_path: Path) -> None:
    source = copy_workflow(tmp_path / "workflow_copy")
    rules = source / "rules" / "policies.smk"
    text = rules.read_text()
    assert 'code=script_code("p3_sweep.py"),' in text
    rules.write_text(text.replace('code=script_code("p3_sweep.py"),', ""))
    proc = snakemake(tmp_path, "-n", snakefile=source / "Snakefile", check=False)
    assert proc.returncode != 0
    assert 'p3_sweep runs p3_sweep.py, so its params need code=script_code("p3_sweep.py")' in (
        proc.stdout + proc.stderr
    )
