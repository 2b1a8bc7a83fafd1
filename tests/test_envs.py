"""The conda environments for cluster users must not drift from pyproject.toml."""

from __future__ import annotations

import tomllib
from pathlib import Path

import yaml

from .conftest import REPO


def _pip_requirements(env_file: Path) -> set[str]:
    env = yaml.safe_load(env_file.read_text())
    pip_sections = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    return {req for section in pip_sections for req in section}


def test_every_env_pins_what_pyproject_pins() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = set(project["dependencies"])
    env_files = sorted((REPO / "envs").glob("*.yaml"))
    assert env_files, "envs/ holds no conda environment"
    for env_file in env_files:
        assert _pip_requirements(env_file) == wanted, env_file.name


def test_the_rules_env_exists() -> None:
    # That every rule names it is checked by `snakemake --lint` (test_workflow.py).
    text = (REPO / "rules" / "common.smk").read_text()
    env = text.split('GRABRAG_ENV = "', 1)[1].split('"', 1)[0]
    assert (REPO / "rules" / env).resolve().is_file()
