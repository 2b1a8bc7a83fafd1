"""A stand-in for the Hugging Face hub's download transport, serving a local folder.

``root/<repo>/`` is every commit of ``<repo>``: its files are what ``snapshot_download`` and
``hf_hub_download`` copy, and ``root/<repo>/<config or default>/<split>.jsonl`` is the split
``datasets.load_dataset`` returns. Only the transport is replaced: the asset registry's
pinning, locking, exporting and every loader run as they would against the hub.

Used in-process by the asset tests (monkeypatched) and, through
``tests/hub_transport/sitecustomize.py``, by every process of a workflow run.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

HEAD = "1" * 40
# Environment variables that point the hub clients somewhere (endpoint, cache, token, mode).
HUB_ENV_PREFIXES = ("HF_", "HUGGINGFACE_", "TRANSFORMERS_", "SENTENCE_TRANSFORMERS")


def env_without_hub_settings() -> dict[str, str]:
    """This process's environment less every hub client setting, for a child process whose
    hub settings a test sets itself."""
    return {k: v for k, v in os.environ.items() if not k.startswith(HUB_ENV_PREFIXES)}


class LocalHub:
    """The download transport only; ``head`` is the commit a branch name resolves to.
    Records every revision asked for (``asked``); ``rows``, when set, is the split every
    dataset request gets instead of a file."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.head = HEAD
        self.asked: list[str] = []
        self.rows: list[dict] = []

    def repo_info(self, repo_id: str, revision: str, repo_type: str = "model", **_):
        self.asked.append(revision)
        return SimpleNamespace(sha=self.head)

    def model_info(self, repo_id: str, revision: str | None = None, **_) -> SimpleNamespace:
        """The hub's file metadata (names and sizes) of a repository."""
        folder = self.root / repo_id
        siblings = [
            SimpleNamespace(rfilename=p.relative_to(folder).as_posix(), size=p.stat().st_size)
            for p in sorted(folder.rglob("*"))
            if p.is_file()
        ]
        return SimpleNamespace(sha=self.head, siblings=siblings)

    dataset_info = model_info

    def snapshot_download(self, repo_id, *, revision, local_dir, allow_patterns=None, **_):
        self.asked.append(revision)
        local_dir = Path(local_dir)
        for path in sorted((self.root / repo_id).rglob("*")):
            rel = path.relative_to(self.root / repo_id).as_posix()
            if path.is_file() and (
                allow_patterns is None or any(fnmatch.fnmatch(rel, p) for p in allow_patterns)
            ):
                (local_dir / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, local_dir / rel)
        # the real client keeps its bookkeeping beside the files
        (local_dir / ".cache" / "huggingface").mkdir(parents=True, exist_ok=True)
        (local_dir / ".cache" / "huggingface" / "meta").write_text(revision)
        return str(local_dir)

    def hf_hub_download(self, repo_id, filename, *, revision, local_dir, **_):
        self.asked.append(revision)
        Path(local_dir).mkdir(parents=True, exist_ok=True)
        shutil.copy(self.root / repo_id / filename, Path(local_dir) / filename)
        return str(Path(local_dir) / filename)

    def load_dataset(self, repo, config=None, *, split, revision, **_):
        import datasets

        self.asked.append(revision)
        rows = self.rows
        if not rows:
            source = self.root / repo / (config or "default") / f"{split}.jsonl"
            if not source.is_file():
                raise FileNotFoundError(f"the local hub has no split {split!r} of {repo}: {source}")
            rows = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
        return datasets.Dataset.from_list(rows)
