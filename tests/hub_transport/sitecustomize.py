"""Test-only: the Hugging Face hub's transport served from a local folder in every Python
process of a workflow run (Snakemake's jobs are subprocesses, so an in-process monkeypatch
does not reach them).

Active only when ``GRABRAG_TEST_HUB`` names the folder (see tests/local_hub.py); the
rehearsal tests put this folder on ``PYTHONPATH``. ``huggingface_hub`` and ``datasets`` are
patched right after they are first imported, so a job that never imports them pays
nothing.
"""

from __future__ import annotations

import importlib.abc
import os
import sys
from pathlib import Path

ROOT = os.environ.get("GRABRAG_TEST_HUB")


def _hub():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    try:
        from local_hub import LocalHub
    finally:
        sys.path.pop(0)
    return LocalHub(Path(ROOT))


def _patch_huggingface_hub(module) -> None:
    hub = _hub()
    module.snapshot_download = hub.snapshot_download
    module.hf_hub_download = hub.hf_hub_download

    class LocalApi(module.HfApi):  # a class still: transformers uses it in annotations
        repo_info = staticmethod(hub.repo_info)
        model_info = staticmethod(hub.model_info)
        dataset_info = staticmethod(hub.dataset_info)

    module.HfApi = LocalApi


def _patch_datasets(module) -> None:
    module.load_dataset = _hub().load_dataset


PATCHES = {"huggingface_hub": _patch_huggingface_hub, "datasets": _patch_datasets}


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Finds the patched packages with the other finders and patches each module once
    its own code has run."""

    def find_spec(self, name, path=None, target=None):
        if name not in PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            PATCHES[name](module)

        spec.loader.exec_module = exec_module
        return spec


if ROOT:
    sys.meta_path.insert(0, _PatchAfterImport())
