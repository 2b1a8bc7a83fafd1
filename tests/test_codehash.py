"""The import closure of rule scripts and the normalised code hash (grabrag.pipeline.codehash)."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from grabrag.pipeline.codehash import code_hash, import_closure, normalised_source

from .conftest import REPO

SCRIPTS = REPO / "workflow" / "scripts"
LIBRARY = REPO / "workflow" / "grabrag"


def closure(script: str) -> set[str]:
    """The closure of one rule script, as module file names."""
    return {p.name for p in import_closure(SCRIPTS / script, LIBRARY)}


def test_policy_script_reaches_the_policies_and_what_they_import() -> None:
    modules = closure("policy.py")
    assert {"policies.py", "io.py", "runner.py", "errors.py", "__init__.py"} <= modules
    # policies.py imports evidential (EVID routes) and cdd_runs (CDD decisions), and
    # cdd_runs imports generation and, through cdd, the prompts
    assert {"evidential.py", "cdd_runs.py", "cdd.py", "generation.py", "prompts.py"} <= modules
    assert not {"figures.py", "tables.py", "nli.py", "swaps.py", "evaluate.py"} & modules


def test_figure_script_reaches_the_plotting_code_and_the_policy_declarations() -> None:
    modules = closure("figure.py")
    assert {"figures.py", "metrics.py"} <= modules  # `from grabrag import figures as f`
    # Legends and colours come from the registry, which loads the built-in policies'
    # declarations (policies.py); an edit there reruns the policies, and so the figures,
    # anyway. The tables, the NLI verifier and the swap pipeline stay out.
    assert {"registry.py", "policies.py"} <= modules
    assert not {"tables.py", "nli.py", "swaps.py", "ner.py", "entity_pool.py"} & modules


def test_generate_script_reaches_the_prompts_not_the_policies() -> None:
    modules = closure("generate.py")
    assert {"generation.py", "prompts.py", "greedy_grammar.py", "assets.py"} <= modules
    assert not {"policies.py", "nli.py", "figures.py", "metrics.py"} & modules
    assert "prompts.py" not in closure("build_contexts.py")


def test_imports_inside_functions_count() -> None:
    # tables.py imports ner and swaps inside the functions that need them
    assert {"tables.py", "ner.py", "swaps.py", "policies.py"} <= closure("tables.py")


def test_every_script_reaches_the_package_init_and_nothing_outside() -> None:
    for script in SCRIPTS.glob("[!_]*.py"):
        modules = import_closure(script, LIBRARY)
        assert LIBRARY / "__init__.py" in modules, script.name
        assert all(p.parent == LIBRARY for p in modules), script.name


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
    return {
        s: code_hash(scripts / s, library)
        for s in ("policy.py", "figure.py", "generate.py", "build_contexts.py")
    }


def test_comments_layout_and_docstrings_keep_the_hash(library_copy) -> None:
    scripts, library = library_copy
    before = _hashes(scripts, library)
    policies = library / "policies.py"
    text = policies.read_text()
    # comments, blank lines and a reworded module docstring
    assert text.startswith('"""') and "\ndef " in text
    edited = text.replace('"""', '"""Reworded. ', 1).replace("\ndef ", "\n\n# why\ndef ", 1)
    policies.write_text("# an added comment\n" + edited + "\n\n# trailing comment\n")
    assert normalised_source(policies) == normalised_source(LIBRARY / "policies.py")
    assert _hashes(scripts, library) == before


def test_a_code_edit_changes_the_hash_of_the_scripts_that_reach_it(library_copy) -> None:
    scripts, library = library_copy
    before = _hashes(scripts, library)
    policies = library / "policies.py"
    policies.write_text(policies.read_text() + "\nEDITED = True\n")
    after = _hashes(scripts, library)
    assert after["policy.py"] != before["policy.py"]
    assert after["figure.py"] != before["figure.py"]  # legends come from the registry
    assert after["generate.py"] == before["generate.py"]
    assert after["build_contexts.py"] == before["build_contexts.py"]
    # and a module a script reaches only through others: prompts.py via generation.py
    prompts = library / "prompts.py"
    prompts.write_text(prompts.read_text() + "\nEDITED = True\n")
    again = _hashes(scripts, library)
    assert again["generate.py"] != after["generate.py"]
    assert again["policy.py"] != after["policy.py"]  # policies -> cdd_runs -> cdd -> prompts
    assert again["build_contexts.py"] == before["build_contexts.py"]


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
