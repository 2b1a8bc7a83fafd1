"""Loading the config's policy modules (``policies.modules``).

Kept apart from :mod:`grabrag.core.registry` so that every rule script can load them (a job
runs in a process of its own) without importing the registry and, through it, every
built-in policy: the rules hash the code each script imports, and the generation jobs
must not rerun when the policy code changes. A module registers its policies by
importing the registry itself.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from grabrag.core.errors import ConfigError

_LOADED: set[str] = set()


def config_modules(config: Mapping[str, Any]) -> list[str]:
    """The modules a config loads: ``modules`` (policies, output kinds, tables, figures)
    and ``policies.modules`` (policies; the older key, read the same way)."""
    policies = config.get("policies")
    listed = [
        *(config.get("modules") or []),
        *((policies.get("modules") if isinstance(policies, Mapping) else None) or []),
    ]
    return [m for m in listed if isinstance(m, str)]


def _module_key(config: Mapping[str, Any] | None, spec: str) -> str:
    """The config key that lists a module: 'modules', or the older 'policies.modules'."""
    if config is not None and spec in (config.get("modules") or []):
        return "modules"
    return "policies.modules"


def load_modules(specs: Iterable[str], config: Mapping[str, Any] | None = None) -> None:
    """Import each policy module once: a ``.py`` path (relative to the working directory)
    or an importable module name. Importing it registers its policies. ``config``: the
    config that lists them, so that an error names the key it lists a module under."""
    for spec in specs:
        key = str(Path(spec).resolve()) if spec.endswith(".py") else spec
        if key in _LOADED:
            continue
        if spec.endswith(".py"):
            path = Path(key)
            if not path.is_file():
                raise ConfigError(
                    f"config key '{_module_key(config, spec)}': no module at {spec} "
                    f"(looked for {path}; a relative path is read from the directory "
                    "snakemake runs in)"
                )
            name = "grabrag_policy_" + hashlib.sha256(key.encode()).hexdigest()[:12]
            # Its own folder first on the path, so it can import the helper modules beside it.
            if str(path.parent) not in sys.path:
                sys.path.insert(0, str(path.parent))
            module_spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
        else:
            try:
                importlib.import_module(spec)
            except ModuleNotFoundError as error:
                raise ConfigError(
                    f"config key '{_module_key(config, spec)}': cannot import {spec} ({error})"
                ) from None
        _LOADED.add(key)
