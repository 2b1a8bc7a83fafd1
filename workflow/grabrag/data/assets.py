"""The one registry that knows where models, encoders and datasets come from.

An asset is materialised once into ``<resources_dir>/<name>/`` and described by a
``manifest.json`` file target; every other stage takes the manifest as input and calls
:func:`resolve` to get the path. Sources:

* ``pypi``: a PyPI package used only as a file container. ``pip download --no-deps``
  fetches the wheel or sdist, its sha256 is checked, one member (file or folder) is
  extracted. The package is never installed or imported.
* ``path``: a local file or folder, checked (sha256 for files) and referenced in place.
* ``hub``: a Hugging Face hub model (snapshot, some files, or one file) or dataset split,
  exported to JSONL in the hub's own row format, at a named revision. The manifest
  records the commit and every file's sha256; with a lock folder, the first fetch pins
  both there and every later fetch must reproduce them.

Failures raise AssetError naming the asset and leave no manifest and no partial files.

This module is the registry's front: manifests, :func:`resolve` and :func:`materialise`
(which works in a folder beside the final one); the transports are ``asset_pypi.py`` and
``asset_hub.py``, the checks they share ``asset_checks.py``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from grabrag.core.errors import AssetError
from grabrag.core.io import read_json, write_json
from grabrag.data.asset_checks import _check_sha
from grabrag.data.asset_hub import _from_hub, _locked_spec
from grabrag.data.asset_pypi import _from_pypi

MANIFEST = "manifest.json"
log = logging.getLogger("grabrag")


def manifest_path(resources_dir: str, name: str) -> str:
    return f"{resources_dir}/{name}/{MANIFEST}"


def resolve(manifest: str | Path) -> Path:
    """Path of the materialised file or folder that a manifest describes."""
    manifest = Path(manifest)
    data = read_json(manifest)
    path = Path(data["path"])
    if not path.is_absolute():
        path = manifest.parent / path
    if not path.exists():
        raise AssetError(
            f"asset '{data.get('name')}': {path} is gone although {manifest} exists; "
            f"delete {manifest} and rerun so the asset is fetched again"
        )
    return path


def given_path(rule_input: Any) -> Path | None:
    """A rule input that may be empty (a served model has no file), a path or a
    one-element list, as a path or None."""
    if not rule_input:
        return None
    return Path(rule_input if isinstance(rule_input, str | Path) else rule_input[0])


def resolve_given(manifest: Any) -> Path | None:
    """:func:`resolve` of a rule input that may be empty (see :func:`given_path`)."""
    given = given_path(manifest)
    return None if given is None else resolve(given)


def _from_path(name: str, spec: Mapping[str, Any]) -> tuple[Path, dict[str, Any]]:
    path = Path(spec["path"]).expanduser().resolve()
    if not path.exists():
        raise AssetError(
            f"asset '{name}': local path {path} does not exist; fix 'assets.{name}.path'"
        )
    info: dict[str, Any] = {"source": "path"}
    if path.is_file():
        info["sha256"] = _check_sha(name, path, spec.get("sha256"), "file")
    return path, info


def materialise(
    name: str,
    spec: Mapping[str, Any],
    manifest: str | Path,
    lock_dir: str | Path | None = None,
) -> Path:
    """Fetch asset ``name`` and write its manifest last; return the materialised path.

    A hub asset is pinned by ``<lock_dir>/<name>.json`` when ``lock_dir`` is given: the
    first fetch records the commit and every file's sha256 there; later fetches download
    that commit and fail on any file whose sha256 differs.

    Work happens in a folder beside the final one and is moved into place only when
    every check passed, so a failure leaves nothing that looks finished. A hub download
    works in ``.fetch-partial``, kept when a run dies (killed, out of disk), so the next
    run's hub client resumes its partly downloaded files there; it is cleared when it was
    made for another spec. Other sources work in a fresh temporary folder, and a killed
    run's leftovers (``.fetch-*``) are removed before the next one starts.
    """
    manifest = Path(manifest)
    home = manifest.parent
    home.mkdir(parents=True, exist_ok=True)
    manifest.unlink(missing_ok=True)
    resumable = "hub" in spec
    for stale in home.glob(".fetch-*"):
        if stale.is_dir() and not (resumable and stale.name == PARTIAL):
            log.info("asset '%s': removing %s, left by an earlier fetch that died", name, stale)
            shutil.rmtree(stale, ignore_errors=True)
    with _work_dir(name, home, spec, resumable) as work:
        if "pypi" in spec:
            target, info = _from_pypi(name, spec, work)
        elif "path" in spec:
            target, info = _from_path(name, spec)
        elif "hub" in spec:
            target, info = _from_hub(name, spec, work, lock_dir)
        else:
            raise AssetError(f"asset '{name}': no source; give one of 'pypi', 'path', 'hub'")
        if info["source"] != "path":
            rel = target.resolve().relative_to(work / "files")
            final_files = home / "files"
            if final_files.exists():
                shutil.rmtree(final_files)
            (work / "files").rename(final_files)
            target = final_files / rel
            info["path"] = str(Path("files") / rel)
        else:
            info["path"] = str(target)
    info["name"] = name
    write_json(manifest, info)
    return target


PARTIAL = ".fetch-partial"
_PARTIAL_SPEC = "spec.json"


@contextlib.contextmanager
def _work_dir(name: str, home: Path, spec: Mapping[str, Any], resumable: bool) -> Iterator[Path]:
    """The folder one fetch works in (resolved: the hub clients return fully resolved
    paths, and ``relative_to`` in :func:`materialise` must compare like with like)."""
    if not resumable:
        with tempfile.TemporaryDirectory(prefix=".fetch-", dir=home) as tmp:
            yield Path(tmp).resolve()
        return
    work = (home / PARTIAL).resolve()
    marker = work / _PARTIAL_SPEC
    wanted = json.dumps(_locked_spec(spec), sort_keys=True)
    if work.exists() and (not marker.is_file() or marker.read_text() != wanted):
        log.info("asset '%s': %s was made for another spec; starting over", name, work)
        shutil.rmtree(work)
    if work.exists():
        log.info("asset '%s': resuming the interrupted download in %s", name, work)
    work.mkdir(exist_ok=True)
    marker.write_text(wanted)
    try:
        yield work
    except BaseException:
        if not _holds_download(work):
            shutil.rmtree(work, ignore_errors=True)  # nothing to resume: leave nothing
        raise
    # Reached only when the fetch succeeded: its files were moved into place.
    shutil.rmtree(work, ignore_errors=True)


def _holds_download(work: Path) -> bool:
    """Whether a dead fetch's folder holds downloaded bytes (a file, or a hub client's
    ``.incomplete`` part), not just our marker and the client's bookkeeping (its
    ``.cache/huggingface`` folder: CACHEDIR.TAG, .gitignore, locks and metadata, which
    an offline attempt writes before it fails)."""
    for path in work.rglob("*"):
        if not path.is_file() or path.stat().st_size == 0 or path.name == _PARTIAL_SPEC:
            continue
        if path.name.endswith(".incomplete"):
            return True
        if ".cache" not in path.relative_to(work).parts:
            return True
    return False
