"""The Hugging Face hub transport of the asset registry, and the lock files that pin it.

A hub model (a snapshot, some of its files, or one file) or dataset split (exported to
JSONL in the hub's own row format) is fetched at a named revision. The manifest records
the commit and every file's sha256; with a lock folder, the first fetch pins both there
and every later fetch must reproduce them. The hub's file metadata also gives an asset's
size before anything is downloaded. ``assets.py`` calls :func:`_from_hub`.
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grabrag.core.errors import AssetError
from grabrag.core.io import read_json, write_json
from grabrag.data.asset_checks import _check_sha, check_free_space, sha256_file

log = logging.getLogger("grabrag")

HUB_TIMEOUT_SECONDS = 10.0


def hub_bytes(spec: Mapping[str, Any], timeout: float = HUB_TIMEOUT_SECONDS) -> int | None:
    """The bytes of a hub asset's files by the hub's metadata at its revision (the one
    file, the listed files, or the whole repository; for a dataset, every file of the
    repository, an upper bound of one split's export); None where the hub does not
    answer (offline, unreachable, unknown repository)."""
    if "hub" not in spec:
        return None
    try:
        import huggingface_hub

        api = huggingface_hub.HfApi()
        revision = spec.get("revision")
        if spec.get("repo_type") == "dataset":
            info = api.dataset_info(
                spec["hub"], revision=revision, files_metadata=True, timeout=timeout
            )
        else:
            info = api.model_info(
                spec["hub"], revision=revision, files_metadata=True, timeout=timeout
            )
    except Exception:  # the hub client raises many types; all mean "no answer here"
        return None
    wanted = [spec["filename"]] if spec.get("filename") else spec.get("files")
    files = [s for s in info.siblings or [] if wanted is None or s.rfilename in wanted]
    sizes = [s.size for s in files if s.size is not None]
    return sum(sizes) if sizes else None


def asset_bytes(spec: Mapping[str, Any], lookup_hub: bool = True) -> tuple[int | None, str]:
    """(bytes, where the number comes from) of one asset: the hub's metadata, else the
    config's ``size_bytes``, else unknown."""
    if lookup_hub:
        measured = hub_bytes(spec)
        if measured is not None:
            return measured, "hub metadata"
    if spec.get("size_bytes") is not None:
        return int(spec["size_bytes"]), "declared (size_bytes)"
    return None, "unknown"


def export_split(ds: Any, target: Path) -> Path:
    """Write a ``datasets.Dataset`` as JSONL rows in the hub's own row format.

    Nested features stay as the hub stores them (HotpotQA's ``context`` is a dict of
    lists), which is the format the ``hf_*`` adapters read.
    """
    ds.to_json(str(target), lines=True, force_ascii=False)
    return target


COMMIT = re.compile(r"^[0-9a-f]{40}$")
# The hub clients' own bookkeeping inside a local_dir download; not part of the asset.
HUB_BOOKKEEPING = ".cache"


def file_hashes(target: Path) -> dict[str, str]:
    """sha256 of every file of a materialised asset, by path relative to ``target``
    (a file asset: its name)."""
    if target.is_file():
        return {target.name: sha256_file(target)}
    return {
        path.relative_to(target).as_posix(): sha256_file(path)
        for path in sorted(target.rglob("*"))
        if path.is_file() and HUB_BOOKKEEPING not in path.relative_to(target).parts
    }


# The spec keys that say which hub content an asset is; a lock entry holds them so that
# an edited config is never checked against the pins of other content.
LOCKED_KEYS = ("hub", "repo_type", "revision", "filename", "files", "hub_config", "split")


def lock_path(lock_dir: str | Path, name: str) -> Path:
    return Path(lock_dir) / f"{name}.json"


def _locked_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    locked = {key: spec.get(key) for key in LOCKED_KEYS}
    locked["repo_type"] = locked["repo_type"] or "model"
    return locked


def _read_lock(name: str, spec: Mapping[str, Any], lock: Path) -> dict[str, Any] | None:
    """The lock entry of a hub asset, None when there is none yet; an entry made for other
    content (the config's repository, revision or files changed) is an error."""
    if not lock.exists():
        return None
    entry = read_json(lock)
    if entry.get("spec") != _locked_spec(spec):
        raise AssetError(
            f"asset '{name}': the lock file {lock} pins {entry.get('spec')}, but the config "
            f"now asks for {_locked_spec(spec)}. If you changed the asset on purpose, delete "
            f"{lock} so that the next fetch records the new pin (and commit it)"
        )
    return entry


def _check_against_lock(
    name: str, hashes: Mapping[str, str], entry: Mapping[str, Any], lock: Path
) -> None:
    locked = entry.get("files") or {}
    problems = []
    for path in sorted(set(locked) | set(hashes)):
        if path not in hashes:
            problems.append(f"{path}: locked sha256 {locked[path]}, missing from the download")
        elif path not in locked:
            problems.append(f"{path}: not in the lock, downloaded sha256 {hashes[path]}")
        elif locked[path] != hashes[path]:
            problems.append(f"{path}: locked sha256 {locked[path]}, downloaded {hashes[path]}")
    if problems:
        raise AssetError(
            f"asset '{name}': the download differs from the pins in {lock} (commit "
            f"{entry.get('commit')}):\n  " + "\n  ".join(problems) + "\nResults computed "
            "from it would silently differ. If the change is expected (say, a new version of "
            f"the hub client or of 'datasets' exports a split differently), delete {lock} to "
            "record the new content, and commit it"
        )


def _hub_commit(repo: str, revision: str, repo_type: str) -> str:
    """The commit a revision (a commit, branch or tag) names on the hub."""
    if COMMIT.match(revision):
        return revision
    import huggingface_hub

    info = huggingface_hub.HfApi().repo_info(repo, revision=revision, repo_type=repo_type)
    return str(info.sha)


def _export_hub_split(
    name: str, spec: Mapping[str, Any], commit: str, content: Path, info: dict[str, Any]
) -> Path:
    """A hub dataset's split at ``commit``, exported to ``<content>/<split>.jsonl``."""
    import datasets

    split = spec.get("split")
    if split is None:
        raise AssetError(f"asset '{name}': a hub dataset needs 'split' (e.g. validation)")
    ds = datasets.load_dataset(spec["hub"], spec.get("hub_config"), split=split, revision=commit)
    target = export_split(ds, content / f"{split}.jsonl")
    info.update(hub_config=spec.get("hub_config"), split=split)
    return target


def _download_hub_files(
    name: str, spec: Mapping[str, Any], commit: str, content: Path, info: dict[str, Any]
) -> Path:
    """A hub model's one file (``filename``) into ``content``, else its snapshot (only the
    listed ``files`` when given) into ``<content>/model``."""
    import huggingface_hub

    repo = spec["hub"]
    if spec.get("filename"):
        downloaded = huggingface_hub.hf_hub_download(
            repo, spec["filename"], revision=commit, local_dir=content
        )
        info["filename"] = spec["filename"]
        return Path(downloaded)
    wanted = spec.get("files")
    target = Path(
        huggingface_hub.snapshot_download(
            repo, revision=commit, local_dir=content / "model", allow_patterns=wanted
        )
    )
    missing = [f for f in wanted or [] if not (target / f).is_file()]
    if missing:
        raise AssetError(
            f"asset '{name}': '{repo}' at commit {commit} has no {missing}; "
            f"check assets.{name}.files"
        )
    return target


def _fetch_hub(
    name: str,
    spec: Mapping[str, Any],
    entry: Mapping[str, Any] | None,
    content: Path,
    info: dict[str, Any],
) -> tuple[str, Path]:
    """(commit, downloaded file or folder): the locked commit, else the one the revision
    names now. Any failure of the hub clients becomes an AssetError saying what to do."""
    repo, revision, repo_type = info["repo"], info["revision"], info["repo_type"]
    try:
        commit = entry["commit"] if entry else _hub_commit(repo, revision, repo_type)
        if repo_type == "dataset":
            target = _export_hub_split(name, spec, commit, content, info)
        else:
            target = _download_hub_files(name, spec, commit, content, info)
    except AssetError:
        raise
    # The hub clients raise many types; all mean "not reachable / not found".
    except Exception as exc:
        raise AssetError(
            f"asset '{name}': could not fetch '{repo}' (revision {revision}) from the Hugging Face "
            f"hub: {type(exc).__name__}: {exc}. On a machine without hub access, download it "
            f"elsewhere and set 'assets.{name}.path' to the local copy"
        ) from None
    return commit, target


def _pin_or_check_lock(
    name: str,
    spec: Mapping[str, Any],
    commit: str,
    hashes: dict[str, str],
    entry: Mapping[str, Any] | None,
    lock: Path,
    info: dict[str, Any],
) -> None:
    """Check the download against its lock entry, or write the entry at the first fetch."""
    if entry:
        _check_against_lock(name, hashes, entry, lock)
        info["lock"] = str(lock)
    else:
        lock.parent.mkdir(parents=True, exist_ok=True)
        write_json(
            lock,
            {"name": name, "spec": _locked_spec(spec), "commit": commit, "files": hashes},
        )
        info["lock"] = str(lock)
        log.info("asset '%s': pinned commit %s and %d files in %s", name, commit, len(hashes), lock)


def _from_hub(
    name: str, spec: Mapping[str, Any], work: Path, lock_dir: str | Path | None = None
) -> tuple[Path, dict[str, Any]]:
    repo, revision = spec["hub"], spec.get("revision")
    if not revision:
        raise AssetError(
            f"asset '{name}': a hub asset needs 'revision': the commit (40 hex characters) "
            f"of '{repo}' to fetch; set assets.{name}.revision"
        )
    repo_type = spec.get("repo_type", "model")
    lock = lock_path(lock_dir, name) if lock_dir is not None else None
    entry = _read_lock(name, spec, lock) if lock is not None else None
    info: dict[str, Any] = {
        "source": "hub",
        "repo": repo,
        "revision": revision,
        "repo_type": repo_type,
    }
    content = work / "files"
    content.mkdir(exist_ok=True)
    needed, basis = asset_bytes(spec)
    check_free_space(name, content, needed, f"its download ({basis})")
    commit, target = _fetch_hub(name, spec, entry, content, info)
    shutil.rmtree(
        target / HUB_BOOKKEEPING if target.is_dir() else content / HUB_BOOKKEEPING,
        ignore_errors=True,
    )
    if target.is_file():
        info["sha256"] = _check_sha(name, target, spec.get("sha256"), "file")
    hashes = file_hashes(target)
    info.update(commit=commit, files=hashes)
    if lock is not None:
        _pin_or_check_lock(name, spec, commit, hashes, entry, lock, info)
    return target, info
