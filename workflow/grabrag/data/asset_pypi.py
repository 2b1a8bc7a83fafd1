"""The PyPI transport of the asset registry: a package used only as a file container.

The container (wheel or sdist) whose sha256 the config names is taken from the
machine-wide download cache, else downloaded from the package index's JSON API, else by
``pip download --no-deps``; then one member (a file or a folder) is extracted. The package
is never installed or imported. ``assets.py`` calls :func:`_from_pypi`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grabrag.core.errors import AssetError
from grabrag.data.asset_checks import _check_sha, check_free_space, sha256_file

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


PYPI_SIMPLE = "https://pypi.org/simple"


def _missing_release_hint(requirement: str, listing: dict) -> str:
    """What to do when the index has no file with the pinned checksum: a release the index
    no longer lists (withdrawn or deleted, as bigbench 1.0.0 was) cannot be fetched from
    there at all, so the way on is a copy of the file; otherwise the pin is wrong."""
    version = requirement.partition("==")[2].strip()
    listed = [str(v) for v in listing.get("versions") or []]
    if version and listed and version not in listed:
        return (
            f"the index lists no release {version} of it (only {', '.join(listed)}): it was "
            "withdrawn or deleted there. With a copy of the file, declare the asset with "
            "'path' and 'sha256' instead of 'pypi'"
        )
    return "check the asset's 'pypi' requirement and checksum"


CHUNK = 1 << 20


def _index_download(name: str, requirement: str, sha256: str, dest: Path) -> Path | None:
    """Download the file whose sha256 is ``sha256`` straight from the package index's
    JSON simple API (PEP 691; ``$PIP_INDEX_URL`` or PyPI), with progress lines. None when
    that is not possible here (``PIP_NO_INDEX``, an index without the JSON API,
    unreachable): pip downloads it instead.

    pip is the fallback, not the first choice: for an sdist it prepares the package's
    metadata, and recent pip refuses sdists whose metadata names a direct URL dependency
    (the BIG-bench sdist does), although the package is never installed here."""
    if os.environ.get("PIP_NO_INDEX"):
        return None
    package = re.split(r"[=<>!~;\[ ]", requirement, maxsplit=1)[0]
    project = re.sub(r"[-_.]+", "-", package).lower()
    index = os.environ.get("PIP_INDEX_URL", PYPI_SIMPLE).rstrip("/")
    request = urllib.request.Request(
        f"{index}/{project}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            listing = json.load(response)
    except (urllib.error.URLError, OSError, ValueError) as error:
        log.info("asset '%s': the index's JSON API not usable (%s); using pip", name, error)
        return None
    files = {f.get("hashes", {}).get("sha256"): f for f in listing.get("files", [])}
    if sha256 not in files:
        raise AssetError(
            f"asset '{name}': no file of package {project} on {index} has the configured "
            f"container_sha256 {sha256} ({len(files)} files listed); "
            + _missing_release_hint(requirement, listing)
        )
    chosen = files[sha256]
    url = urllib.parse.urljoin(f"{index}/{project}/", chosen["url"])
    target = dest / Path(chosen["filename"]).name
    total = int(chosen.get("size") or 0)
    check_free_space(name, dest, total, f"the container {target.name}")
    log.info("asset '%s': downloading %s (%.1f MB)", name, target.name, total / 1e6)
    started = last = time.perf_counter()
    done = 0
    try:
        with urllib.request.urlopen(url, timeout=60) as r, target.open("wb") as out:
            while block := r.read(CHUNK):
                out.write(block)
                done += len(block)
                now = time.perf_counter()
                if now - last >= HEARTBEAT_SECONDS:
                    last = now
                    rate = done / 1e6 / (now - started)
                    left = (total - done) / 1e6 / rate if rate and total else float("nan")
                    log.info(
                        "asset '%s': %.1f of %.1f MB (%.0f%%), %.1f MB/s, ETA %.0f s",
                        name,
                        done / 1e6,
                        total / 1e6,
                        100 * done / total if total else 0.0,
                        rate,
                        left,
                    )
    except (urllib.error.URLError, OSError) as error:
        target.unlink(missing_ok=True)
        log.info("asset '%s': download from PyPI failed (%s); using pip download", name, error)
        return None
    seconds = time.perf_counter() - started
    log.info(
        "asset '%s': downloaded %s, %.1f MB in %.1f s (%.1f MB/s)",
        name,
        target.name,
        done / 1e6,
        seconds,
        done / 1e6 / seconds if seconds else float("nan"),
    )
    return target


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
    container = _index_download(name, spec["pypi"], expected, download) or _pip_download(
        name, spec["pypi"], download
    )
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
