"""The documentation stays true: the configuration reference is the schema's current
rendering, every schema key is described, relative links resolve, the README stays a
short front door and its two commands are the ones .ci/run runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from grabrag.pipeline.config import load_schema
from grabrag.pipeline.config_doc import REGENERATE, render, undocumented

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
README_MAX_LINES = 300

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.MULTILINE)


def _prose(text: str) -> str:
    """Markdown without its code blocks and code spans, where links are not links."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for heading in _HEADING.findall(_FENCE.sub("", path.read_text(encoding="utf-8"))):
        slug = _slug(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def test_configuration_reference_is_current() -> None:
    # Rendered in a process of its own, as the regeneration command renders it: a policy
    # module another test registered in this process would add its name to the schema.
    rendered = subprocess.run(
        [sys.executable, "-m", "grabrag.pipeline.config_doc"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    page = DOCS / "configuration.md"
    assert page.exists(), f"docs/configuration.md is missing: run `{REGENERATE}`"
    assert page.read_text(encoding="utf-8") == rendered, (
        f"docs/configuration.md is out of date with the config schema: run `{REGENERATE}`"
    )


def test_configuration_reference_names_its_command() -> None:
    text = render(load_schema())
    assert REGENERATE in text.split("\n## ", 1)[0]
    for key in load_schema()["properties"]:
        assert f"\n## `{key}`\n" in text


def test_every_schema_property_is_described() -> None:
    missing = undocumented(load_schema())
    assert not missing, "schema properties without a description: " + ", ".join(missing)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in _LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            continue  # https:, mailto: and the like
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            broken.append(f"{target} (no heading with that anchor in {resolved.name})")
    assert not broken, f"{page.relative_to(REPO)}: broken links: " + "; ".join(broken)


def test_readme_is_short() -> None:
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines (at most {README_MAX_LINES}): move detail into docs/"
    )


def _commands(lines: list[str]) -> list[str]:
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def test_readme_two_commands_are_what_ci_runs() -> None:
    section = README.read_text(encoding="utf-8").split("\n## Two commands\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    block = re.search(r"^```bash\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    assert block, "README.md's 'Two commands' section has no bash block"
    readme = _commands(block.group(1).splitlines())
    assert len(readme) == 2, readme
    ci = [
        line
        for line in _commands((REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines())
        if not line.startswith(("set ", "cd "))
    ]
    assert ci == readme, "README's two commands and .ci/run's commands differ"


_PROJECT_INCLUDE = re.compile(r"-DCMAKE_PROJECT_llama\.cpp_INCLUDE=\$PWD/(\S+?)\"")


def test_the_install_turns_off_llamas_common_library_after_llama_cpp_python_forces_it_on(
    tmp_path: Path,
) -> None:
    """The README's CMAKE_ARGS name a project include that turns off llama.cpp's `common`
    library. llama-cpp-python's CMakeLists forces that option on in the cache before it adds
    llama.cpp, so a plain -DLLAMA_BUILD_COMMON=OFF cannot; the include runs at llama.cpp's
    project() call, after the forcing. Checked with the real cmake on a project of the same
    shape (the forcing parent, llama.cpp's project() and its option)."""
    docs = [README.read_text(encoding="utf-8"), (DOCS / "gpu-and-cluster.md").read_text()]
    named = {path for text in docs for path in _PROJECT_INCLUDE.findall(text)}
    assert named == {"envs/llama-cpp-library-only.cmake"}, named
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.21)\nproject(llama_cpp_python NONE)\n"
        'set(LLAMA_BUILD_COMMON ON CACHE BOOL "" FORCE)\nadd_subdirectory(llama.cpp)\n'
    )
    (tmp_path / "llama.cpp").mkdir()
    (tmp_path / "llama.cpp" / "CMakeLists.txt").write_text(
        'project("llama.cpp" NONE)\noption(LLAMA_BUILD_COMMON "" ON)\n'
        'message(STATUS "common library: ${LLAMA_BUILD_COMMON}")\n'
    )

    def configure(*args: str) -> str:
        build = tmp_path / f"build{len(args)}"
        proc = subprocess.run(
            ["cmake", "-S", str(tmp_path), "-B", str(build), *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    assert "common library: ON" in configure("-DLLAMA_BUILD_COMMON=OFF")
    include = f"-DCMAKE_PROJECT_llama.cpp_INCLUDE={REPO / named.pop()}"
    assert "common library: OFF" in configure(include)
