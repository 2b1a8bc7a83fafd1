"""The library code a rule script runs, and a hash of it that ignores comments and layout.

Snakemake reruns a job when its own script changes, not when a module that the script
imports changes. `import_closure` follows a script's imports, read with `ast` without
running anything, through every module of the package that they reach (``import
grabrag.x``, ``from grabrag.x import y``, ``from grabrag import x`` and relative imports
inside the package, at any depth in the file, including imports inside functions).
`code_hash` hashes the script and that closure in a normalised form: the parsed syntax
tree (`ast.dump`, without line numbers), so an edit of comments, blank lines, line breaks
or quotes changes nothing, and docstrings are dropped, as no code of the package reads
them. Where code in the closure does read docstrings (``__doc__``, ``getdoc``), they
count as code there. Modules outside the package (numpy, llama_cpp) are left out: the
software environment stands for them.

Plain Python, no Snakemake: rules/common.smk passes the hash of each rule's script as a
param.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PACKAGE = "grabrag"
# Names whose presence means the code may read docstrings at run time.
_DOCSTRING_READERS = frozenset({"__doc__", "getdoc"})
# The nodes whose body may start with a docstring.
_WITH_DOCSTRING = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass(frozen=True)
class _Import:
    """One import statement: `level` dots, then `module` (or None), then `names`."""

    level: int
    module: str | None
    names: tuple[str, ...]


@dataclass(frozen=True)
class _Parsed:
    imports: tuple[_Import, ...]
    reads_docstrings: bool
    digest: str  # of the syntax tree without docstrings


@cache
def _parse(source: bytes, filename: str) -> _Parsed:
    """Parsed once per distinct content: every rule that reaches a module shares it."""
    tree = ast.parse(source, filename=filename)
    imports = []
    for node in _statements(tree):
        if isinstance(node, ast.Import):
            imports += [_Import(0, alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = tuple(alias.name for alias in node.names)
            imports.append(_Import(node.level, node.module, names))
        elif isinstance(node, _WITH_DOCSTRING):
            _drop_docstring(node)
    _drop_docstring(tree)
    # By the text, so a mention in a comment counts too: keeping docstrings is the safe side.
    reads_docstrings = any(name.encode() in source for name in _DOCSTRING_READERS)
    return _Parsed(tuple(imports), reads_docstrings, _sha256(ast.dump(tree)))


def _statements(node: ast.AST) -> Iterator[ast.stmt]:
    """Every statement under `node`, at any depth (imports and docstrings are statements,
    so the expressions need no visit)."""
    for field in ("body", "orelse", "finalbody", "handlers", "cases"):
        for child in getattr(node, field, ()):
            if isinstance(child, ast.stmt):
                yield child
            yield from _statements(child)


def _parsed(path: Path) -> _Parsed:
    return _parse(path.read_bytes(), str(path))


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _drop_docstring(node: ast.Module | ast.ClassDef | ast.FunctionDef) -> None:
    body = node.body
    if (
        body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        del body[0]


def _drop_docstrings(tree: ast.Module) -> None:
    """Removes the docstrings of the module, its classes and its functions."""
    _drop_docstring(tree)
    for node in _statements(tree):
        if isinstance(node, _WITH_DOCSTRING):
            _drop_docstring(node)


def normalised_source(path: Path, keep_docstrings: bool = False) -> str:
    """The form of one file that `code_hash` hashes: its syntax tree as text, without
    comments, layout and (unless kept) docstrings."""
    tree = ast.parse(Path(path).read_bytes(), filename=str(path))
    if not keep_docstrings:
        _drop_docstrings(tree)
    return ast.dump(tree)


@cache
def _digest_with_docstrings(source: bytes, filename: str) -> str:
    return _sha256(ast.dump(ast.parse(source, filename=filename)))


def _digest(path: Path, keep_docstrings: bool) -> str:
    source = path.read_bytes()
    if keep_docstrings:
        return _digest_with_docstrings(source, str(path))
    return _parse(source, str(path)).digest


def _module_path(name: str, package_dir: Path) -> Path | None:
    """The file of module `name` (``grabrag.x.y``) inside the package, or None."""
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return None
    base = package_dir.joinpath(*parts[1:])
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    if len(parts) > 1 and base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    return None


def _module_name(path: Path, package_dir: Path) -> str:
    relative = path.relative_to(package_dir).with_suffix("")
    parts = [PACKAGE, *relative.parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported_modules(path: Path, package_dir: Path, in_package: bool) -> set[str]:
    """The package modules one file imports (names; not checked to exist yet)."""
    if in_package:
        name = _module_name(path, package_dir)
        current = name if path.name == "__init__.py" else name.rpartition(".")[0]
    else:
        current = None  # a script: it is no package, so it has no relative imports
    modules = set()
    for imp in _parsed(path).imports:
        if imp.level:
            if current is None:
                continue
            anchor = current.split(".")
            if imp.level > 1:
                anchor = anchor[: -(imp.level - 1)]
            if not anchor:
                continue  # above the package: not its code
            base = ".".join(anchor + ([imp.module] if imp.module else []))
        else:
            base = imp.module
        if base is None:
            continue
        modules.add(base)
        # `from package import x`: x may be a module of its own
        modules.update(f"{base}.{n}" for n in imp.names if n != "*")
    # importing a.b.c runs a/__init__.py and a/b/__init__.py first
    for module in list(modules):
        parts = module.split(".")
        modules.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return {m for m in modules if m == PACKAGE or m.startswith(PACKAGE + ".")}


def module_imports(path: Path, package_dir: Path) -> tuple[Path, ...]:
    """The package's module files that one file imports directly (at any depth in the
    file, functions included), sorted: the edges of the library's import graph."""
    path = Path(path).resolve()
    package_dir = Path(package_dir).resolve()
    found = {
        _module_path(name, package_dir)
        for name in _imported_modules(path, package_dir, path.is_relative_to(package_dir))
    }
    return tuple(sorted(p for p in found if p is not None and p != path))


def import_closure(script: Path, package_dir: Path) -> tuple[Path, ...]:
    """The package's module files that running `script` imports, directly or through one
    another, sorted. `script` may be a module of the package itself."""
    script = Path(script).resolve()
    package_dir = Path(package_dir).resolve()
    in_package = script.is_relative_to(package_dir)
    seen: set[Path] = set()
    queue = [(script, in_package)]
    while queue:
        path, inside = queue.pop()
        for name in _imported_modules(path, package_dir, inside):
            module = _module_path(name, package_dir)
            if module is not None and module not in seen and module != script:
                seen.add(module)
                queue.append((module, True))
    return tuple(sorted(seen))


def code_hash(script: Path, package_dir: Path) -> str:
    """A hash of `script` and its closure in the package, in normalised form (above)."""
    script = Path(script).resolve()
    package_dir = Path(package_dir).resolve()
    modules = import_closure(script, package_dir)
    files = [script, *modules]
    keep_docstrings = any(_parsed(path).reads_docstrings for path in files)
    digest = hashlib.sha256()
    for path in files:
        label = (
            path.relative_to(package_dir).as_posix()
            if path.is_relative_to(package_dir)
            else f"script:{path.name}"
        )
        digest.update(f"{label}\0{_digest(path, keep_docstrings)}\0".encode())
    return digest.hexdigest()[:16]


def _local_helpers(path: Path) -> set[Path]:
    """The modules a file outside the package imports from its own folder (``import x``,
    ``from x import y``, ``from x.y import z`` where x.py or x/ sits beside it)."""
    found = set()
    for imp in _parsed(path).imports:
        if imp.level or not imp.module:
            continue
        base = path.parent.joinpath(*imp.module.split("."))
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                found.add(candidate.resolve())
    return found


def module_code_hash(path: Path, package_dir: Path) -> str:
    """The hash of one module's code, as `code_hash` normalises it: a module of the package
    with its closure in the package; a module from elsewhere (a config's ``modules``) with
    the helper modules it imports from its own folder, theirs, and the package modules any
    of them import."""
    path = Path(path).resolve()
    package_dir = Path(package_dir).resolve()
    if path.is_relative_to(package_dir):
        return code_hash(path, package_dir)
    files, queue = {path}, [path]
    while queue:
        for helper in _local_helpers(queue.pop()) - files:
            files.add(helper)
            queue.append(helper)
    digest = hashlib.sha256()
    for file in sorted(files):
        digest.update(f"{file.name}\0{code_hash(file, package_dir)}\0".encode())
    return digest.hexdigest()[:16]
