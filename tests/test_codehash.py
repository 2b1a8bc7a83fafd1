"""The import closure of rule scripts and the normalised code hash (grabrag.pipeline.codehash)."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from grabrag.pipeline.codehash import (
    code_hash,
    import_closure,
    module_code_hash,
    normalised_source,
)

from .conftest import REPO

SCRIPTS = REPO / "workflow" / "scripts"
LIBRARY = REPO / "workflow" / "grabrag"


def closure(script: str) -> set[str]:
    """The closure of one rule script, as paths inside the library ("core/io.py")."""
    return {p.relative_to(LIBRARY).as_posix() for p in import_closure(SCRIPTS / script, LIBRARY)}


def module_closure(module: str) -> set[str]:
    """The closure of one library module, as paths inside the library."""
    return {p.relative_to(LIBRARY).as_posix() for p in import_closure(LIBRARY / module, LIBRARY)}


def test_policy_script_reaches_the_registry_not_any_policy_code() -> None:
    modules = closure("policy.py")
    assert {"core/registry.py", "core/io.py", "core/runner.py", "core/errors.py"} <= modules
    # A policy job's own decide module is its `policy_code` param (rules/common.smk), so
    # editing P3 reruns P3's jobs and not EVID's: no policy's code is in the script's closure.
    assert not any(m.startswith(("policies/", "evidential/", "cdd/", "report/")) for m in modules)


def test_a_policy_code_reaches_what_it_decides_with() -> None:
    modules = module_closure("policies/paper.py")
    assert {"policies/rows.py", "scoring/answers.py", "core/errors.py"} <= modules
    assert not any(m.startswith(("evidential/", "cdd/", "report/")) for m in modules)
    assert {"evidential/routing.py", "policies/rows.py"} <= module_closure(
        "evidential/decisions.py"
    )


def test_figure_script_reaches_the_plotting_code_not_the_tables() -> None:
    modules = closure("figure.py")
    assert {"report/figures.py", "report/specs.py", "scoring/calibration.py"} <= modules
    # Legends and colours come from the registry's declarations, not the policies' code.
    assert "core/registry.py" in modules
    assert not {"policies/paper.py", "policies/nli.py", "contexts/swaps.py"} & modules
    assert not any(m.endswith("_tables.py") for m in modules)


def test_table_script_reaches_no_table_builder() -> None:
    # Each table's builder module is its job's `module_code` param: editing the CDD tables
    # reruns the CDD tables only.
    modules = closure("table.py")
    assert {"report/specs.py", "report/tables.py", "report/tabular.py"} <= modules
    assert not any(m.endswith("_tables.py") for m in modules)
    assert "report/figures.py" not in modules


def test_generate_script_reaches_the_prompts_not_the_policies() -> None:
    modules = closure("generate.py")
    assert {"generation/generator.py", "generation/prompts.py", "data/assets.py"} <= modules
    assert "generation/greedy_grammar.py" in modules
    assert not any(m.startswith(("policies/", "report/", "scoring/")) for m in modules)
    assert "generation/prompts.py" not in closure("build_contexts.py")


def test_p3_sweep_script_reaches_no_table_code() -> None:
    assert not any(m.startswith("report/") for m in closure("p3_sweep.py"))


def test_imports_inside_functions_count() -> None:
    # the Table 4 builder imports the NER labels inside the function that needs them
    assert "contexts/ner.py" in module_closure("report/audit_tables.py")


def test_every_script_reaches_the_package_init_and_nothing_outside() -> None:
    for script in SCRIPTS.glob("[!_]*.py"):
        modules = import_closure(script, LIBRARY)
        assert LIBRARY / "__init__.py" in modules, script.name
        assert all(p.is_relative_to(LIBRARY) for p in modules), script.name


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def test_every_import_form_is_followed(tmp_path: Path) -> None:
    package = _package(
        tmp_path / "grabrag",
        {
            "__init__.py": "",
            "a.py": "from . import b\nfrom .c import f\n",
            "b.py": "import numpy\nimport grabrag.sub.d as d\n",
            "c.py": "def f():\n    from grabrag import e\n    return e\n",
            "e.py": "from .sub.deep import g\n",
            "sub/__init__.py": "from ..leaf import x\n",
            "sub/d.py": "",
            "sub/deep.py": "from .. import f_module\n",
            "f_module.py": "",
            "leaf.py": "x = 1\n",
            "unused.py": "",
        },
    )
    script = _package(tmp_path / "scripts", {"run.py": "from grabrag.a import thing\n"})
    found = {p.relative_to(package).as_posix() for p in import_closure(script / "run.py", package)}
    assert found == {
        "__init__.py",
        "a.py",
        "b.py",
        "c.py",
        "e.py",
        "sub/__init__.py",
        "sub/d.py",
        "sub/deep.py",
        "f_module.py",
        "leaf.py",
    }


@pytest.fixture
def library_copy(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the scripts and the library, to edit."""
    scripts = tmp_path / "workflow" / "scripts"
    library = tmp_path / "workflow" / "grabrag"
    shutil.copytree(SCRIPTS, scripts, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(LIBRARY, library, ignore=shutil.ignore_patterns("__pycache__"))
    return scripts, library


def _hashes(scripts: Path, library: Path) -> dict[str, str]:
    hashes = {
        s: code_hash(scripts / s, library)
        for s in ("policy.py", "figure.py", "generate.py", "build_contexts.py")
    }
    hashes["P3"] = module_code_hash(library / "policies" / "paper.py", library)
    hashes["EVID"] = module_code_hash(library / "evidential" / "decisions.py", library)
    return hashes


def test_comments_layout_and_docstrings_keep_the_hash(library_copy) -> None:
    scripts, library = library_copy
    before = _hashes(scripts, library)
    policies = library / "policies" / "paper.py"
    text = policies.read_text()
    # comments, blank lines and a reworded module docstring
    assert text.startswith('"""') and "\ndef " in text
    edited = text.replace('"""', '"""Reworded. ', 1).replace("\ndef ", "\n\n# why\ndef ", 1)
    policies.write_text("# an added comment\n" + edited + "\n\n# trailing comment\n")
    assert normalised_source(policies) == normalised_source(LIBRARY / "policies" / "paper.py")
    assert _hashes(scripts, library) == before


def test_a_code_edit_changes_the_hash_of_what_reaches_it(library_copy) -> None:
    scripts, library = library_copy
    before = _hashes(scripts, library)
    paper = library / "policies" / "paper.py"
    paper.write_text(paper.read_text() + "\nEDITED = True\n")
    after = _hashes(scripts, library)
    assert after["P3"] != before["P3"]
    assert {k: v for k, v in after.items() if k != "P3"} == {
        k: v for k, v in before.items() if k != "P3"
    }
    # a module reached only through others: the decision rows, via paper.py and decisions.py
    rows = library / "policies" / "rows.py"
    rows.write_text(rows.read_text() + "\nEDITED = True\n")
    again = _hashes(scripts, library)
    assert again["P3"] != after["P3"] and again["EVID"] != after["EVID"]
    assert again["generate.py"] == before["generate.py"]
    prompts = library / "generation" / "prompts.py"
    prompts.write_text(prompts.read_text() + "\nEDITED = True\n")
    assert _hashes(scripts, library)["generate.py"] != before["generate.py"]


def test_a_config_module_hash_covers_the_helpers_beside_it(tmp_path: Path) -> None:
    folder = _package(
        tmp_path / "mine",
        {
            "policy.py": "import helpers\nfrom grabrag.policies.rows import ANSWER\n",
            "helpers.py": "from more import x\n",
            "more.py": "x = 1\n",
            "unrelated.py": "y = 2\n",
        },
    )
    before = module_code_hash(folder / "policy.py", LIBRARY)
    (folder / "unrelated.py").write_text("y = 3\n")
    assert module_code_hash(folder / "policy.py", LIBRARY) == before
    (folder / "more.py").write_text("x = 2\n")  # a helper's helper
    assert module_code_hash(folder / "policy.py", LIBRARY) != before


def test_the_script_itself_is_hashed(library_copy) -> None:
    scripts, library = library_copy
    before = code_hash(scripts / "figure.py", library)
    script = scripts / "figure.py"
    script.write_text(script.read_text() + "\n# a comment\n")
    assert code_hash(script, library) == before
    script.write_text(script.read_text() + "\nEDITED = True\n")
    assert code_hash(script, library) != before


def test_quotes_and_line_breaks_keep_the_form(tmp_path: Path) -> None:
    one = _package(tmp_path / "one", {"m.py": "x = f('a', b=[1, 2])  # note\n"})
    broken = 'x = f(\n    "a",\n    b=[\n        1,\n        2,\n    ],\n)\n'
    two = _package(tmp_path / "two", {"m.py": broken})
    assert normalised_source(one / "m.py") == normalised_source(two / "m.py")
    three = _package(tmp_path / "three", {"m.py": "x = f('a', b=[1, 3])\n"})
    assert normalised_source(one / "m.py") != normalised_source(three / "m.py")


def test_docstrings_count_where_code_reads_them(tmp_path: Path) -> None:
    package = _package(
        tmp_path / "grabrag",
        {
            "__init__.py": "",
            "doc.py": 'def f():\n    """Old."""\n\n\ndef g():\n    return f.__doc__\n',
            "plain.py": 'def h():\n    """Old."""\n',
        },
    )
    scripts = _package(
        tmp_path / "scripts",
        {"reads.py": "from grabrag.doc import g\n", "plain.py": "from grabrag.plain import h\n"},
    )
    before = {s: code_hash(scripts / s, package) for s in ("reads.py", "plain.py")}
    for name in ("doc.py", "plain.py"):
        module = package / name
        module.write_text(module.read_text().replace("Old.", "New."))
    assert code_hash(scripts / "reads.py", package) != before["reads.py"]
    assert code_hash(scripts / "plain.py", package) == before["plain.py"]
