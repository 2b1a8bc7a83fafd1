"""The library's layout: subpackages in pipeline order, imports running one way down the
stages, no import cycle, and modules and functions small enough to read."""

from __future__ import annotations

import ast
from pathlib import Path

from grabrag.pipeline.codehash import module_imports

LIBRARY = Path(__file__).resolve().parents[1] / "workflow" / "grabrag"
# Bottom to top: a module imports from its own subpackage and from those before it only.
STAGES = (
    "core",
    "data",
    "contexts",
    "generation",
    "scoring",
    "policies",
    "evidential",
    "cdd",
    "evaluation",
    "report",
    "pipeline",
)
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def _modules(root: Path = LIBRARY) -> list[Path]:
    return sorted(root.rglob("*.py"))


def _stage(path: Path, root: Path = LIBRARY) -> str:
    parts = path.relative_to(root).parts
    return parts[0] if len(parts) > 1 else ""


def _graph(root: Path = LIBRARY) -> dict[Path, tuple[Path, ...]]:
    return {path: module_imports(path, root) for path in _modules(root)}


def _upward(root: Path = LIBRARY) -> list[str]:
    """Each import of a module from a later stage than its own."""
    rank = {stage: i for i, stage in enumerate(STAGES)}
    return [
        f"{path.relative_to(root)} imports {target.relative_to(root)}"
        for path, targets in _graph(root).items()
        if _stage(path, root)
        for target in targets
        if _stage(target, root) and rank[_stage(target, root)] > rank[_stage(path, root)]
    ]


def _cycles(root: Path = LIBRARY) -> list[str]:
    """Import cycles among the modules (a subpackage's face, which imports nothing, aside)."""
    graph = _graph(root)
    state: dict[Path, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[Path]] = []

    def visit(node: Path, trail: list[Path]) -> None:
        state[node] = 1
        for target in graph.get(node, ()):
            if target.name == "__init__.py":
                continue
            if state.get(target) == 1:
                cycles.append(trail[trail.index(target) :] + [target])
            elif target not in state:
                visit(target, [*trail, target])
        state[node] = 2

    for node in graph:
        if node not in state:
            visit(node, [node])
    return [" -> ".join(p.relative_to(root).as_posix() for p in c) for c in cycles]


def test_every_module_sits_in_a_stage_subpackage():
    top = [p.name for p in _modules() if _stage(p) == ""]
    assert top == ["__init__.py"]
    assert sorted({_stage(p) for p in _modules()} - {""}) == sorted(STAGES)


def test_imports_run_down_the_stages():
    assert _upward() == []


def test_no_import_cycle():
    assert _cycles() == []


def test_subpackage_faces_import_nothing():
    for init in LIBRARY.rglob("__init__.py"):
        assert module_imports(init, LIBRARY) == (), init


def test_modules_and_functions_are_small():
    long_modules = {
        str(p.relative_to(LIBRARY)): n
        for p in _modules()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long_modules == {}
    long_functions = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    long_functions[f"{path.relative_to(LIBRARY)}:{node.name}"] = length
    assert long_functions == {}


def test_the_checks_see_a_cycle_and_an_upward_import(tmp_path):
    """The checks walk the real import graph: a planted cycle and a planted upward import
    are both reported."""
    package = tmp_path / "grabrag"
    (package / "core").mkdir(parents=True)
    (package / "report").mkdir()
    for init in (package, package / "core", package / "report"):
        (init / "__init__.py").write_text('"""A face."""\n')
    (package / "core" / "a.py").write_text("from grabrag.core import b\n")
    (package / "core" / "b.py").write_text(
        "from grabrag.core.a import x\nimport grabrag.report.t\n"
    )
    (package / "report" / "t.py").write_text("")
    assert _cycles(package) == ["core/a.py -> core/b.py -> core/a.py"]
    assert _upward(package) == [
        "core/b.py imports report/__init__.py",
        "core/b.py imports report/t.py",
    ]
