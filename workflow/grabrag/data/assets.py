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
"""

from __future__ import annotations

import contextlib
import hashlib
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
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from grabrag.core.errors import AssetError
from grabrag.core.io import read_json, write_json

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


HUB_TIMEOUT_SECONDS = 10.0


def human_bytes(n: float | None) -> str:
    """1.2 GB, 340.0 MB, 12.0 kB (decimal units, as the hub shows sizes)."""
    if n is None:
        return "unknown"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


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


# Free space asked for beyond an asset's own size: the hub clients' bookkeeping, the
# filesystem's blocks, and what other jobs write meanwhile.
DISK_MARGIN = 1.1


def check_free_space(name: str, where: Path, needed: int | None, what: str) -> None:
    """Fail before a download of about ``needed`` bytes into ``where`` when the disk
    holding it has less free, with both numbers, instead of leaving a half-written file.
    ``needed`` None (a size nobody knows) checks nothing."""
    if not needed:
        return
    probe = where
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < needed * DISK_MARGIN:
        raise AssetError(
            f"asset '{name}': {what} needs about {human_bytes(needed)} in {where}, but only "
            f"{human_bytes(free)} are free there; free some space (or move "
            "'resources_dir' or $GRABRAG_CACHE to a larger disk) and rerun"
        )


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
            f"container_sha256 {sha256} ({len(files)} files listed); check the asset's "
            "'pypi' requirement and checksum"
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
    try:
        commit = entry["commit"] if entry else _hub_commit(repo, revision, repo_type)
        if repo_type == "dataset":
            import datasets

            split = spec.get("split")
            if split is None:
                raise AssetError(f"asset '{name}': a hub dataset needs 'split' (e.g. validation)")
            ds = datasets.load_dataset(repo, spec.get("hub_config"), split=split, revision=commit)
            target = export_split(ds, content / f"{split}.jsonl")
            info.update(hub_config=spec.get("hub_config"), split=split)
        else:
            import huggingface_hub

            if spec.get("filename"):
                downloaded = huggingface_hub.hf_hub_download(
                    repo, spec["filename"], revision=commit, local_dir=content
                )
                target = Path(downloaded)
                info["filename"] = spec["filename"]
            else:
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
    shutil.rmtree(
        target / HUB_BOOKKEEPING if target.is_dir() else content / HUB_BOOKKEEPING,
        ignore_errors=True,
    )
    if target.is_file():
        info["sha256"] = _check_sha(name, target, spec.get("sha256"), "file")
    hashes = file_hashes(target)
    info.update(commit=commit, files=hashes)
    if lock is not None:
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
            log.info(
                "asset '%s': pinned commit %s and %d files in %s", name, commit, len(hashes), lock
            )
    return target, info


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
    ``.incomplete`` part), not just our marker and the client's empty bookkeeping."""
    return any(
        path.is_file()
        and path.stat().st_size > 0
        and path.name not in (_PARTIAL_SPEC, ".gitignore")
        and not path.name.endswith(".lock")
        for path in work.rglob("*")
    )
