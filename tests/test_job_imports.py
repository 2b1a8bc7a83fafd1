"""A light job's fixed cost: the rule scripts that load no model import no heavy library
(torch, sentence-transformers, transformers, spaCy, GLiNER, llama.cpp, matplotlib) before
their work starts. Every job is a Python process of its own, and the main job runs about
a hundred light ones, so an import they do not use is paid a hundred times."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "workflow" / "scripts"
HEAVY = (
    "torch",
    "sentence_transformers",
    "transformers",
    "spacy",
    "gliner",
    "llama_cpp",
    "matplotlib",
)
# The scripts whose work is a model or a heavy library, and what each may load.
ALLOWED = {
    "embed.py": {"torch", "sentence_transformers", "transformers"},  # the encoder
    "entity_pool.py": set(HEAVY) - {"llama_cpp", "matplotlib"},  # NER: spaCy or GLiNER
    "swaps.py": set(HEAVY) - {"llama_cpp", "matplotlib"},
    "figure.py": {"matplotlib"},
    **{
        name: set(HEAVY) - {"matplotlib"}
        for name in (
            "generate.py",
            "nli.py",
            "cdd_generate.py",
            "cdd_baselines.py",
            "evidential_evaluate.py",
            "evidential_generate.py",
            "reask.py",
        )
    },
}
RULE_SCRIPTS = sorted(p.name for p in SCRIPTS.glob("*.py") if not p.name.startswith("_"))


def _top_level_imports(script: Path) -> str:
    """The script's module-level import statements, as source (what runs before main)."""
    tree = ast.parse(script.read_text(encoding="utf-8"))
    nodes = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    # the GPU claim reads the job's resources from Snakemake's object: not here
    return "\n".join(ast.unparse(n) for n in nodes if "_job_gpu" not in ast.unparse(n))


def _loaded_after(script: Path) -> set[str]:
    probe = (
        f"import sys; sys.path[:0] = [{str(SCRIPTS)!r}]\n"
        f"{_top_level_imports(script)}\n"
        f"import json; print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    return set(json.loads(proc.stdout.splitlines()[-1])) & set(HEAVY)


def test_every_rule_script_is_classified() -> None:
    assert set(ALLOWED) <= set(RULE_SCRIPTS), set(ALLOWED) - set(RULE_SCRIPTS)
    assert "retrieve.py" in RULE_SCRIPTS and "policy.py" in RULE_SCRIPTS


@pytest.mark.parametrize("name", RULE_SCRIPTS)
def test_a_script_imports_only_the_heavy_libraries_its_work_needs(name: str) -> None:
    loaded = _loaded_after(SCRIPTS / name)
    assert loaded <= ALLOWED.get(name, set()), f"{name} imports {sorted(loaded)} at its top"
