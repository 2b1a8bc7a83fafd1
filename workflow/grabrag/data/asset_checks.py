"""The checks every asset source shares: a file's sha256 against the config's, and the
free disk space before a download, with sizes in the units the hub shows.

They sit below the registry (``assets.py``) and the transports (``asset_pypi.py``,
``asset_hub.py``), which all call them.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from grabrag.core.errors import AssetError


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def _check_sha(name: str, path: Path, expected: str | None, what: str) -> str:
    actual = sha256_file(path)
    if expected is not None and actual != expected:
        raise AssetError(
            f"asset '{name}': sha256 mismatch for {what} {path.name}: expected {expected}, "
            f"got {actual}. The source changed or the download is corrupt; check the "
            f"asset's checksum in the config"
        )
    return actual


def human_bytes(n: float | None) -> str:
    """1.2 GB, 340.0 MB, 12.0 kB (decimal units, as the hub shows sizes)."""
    if n is None:
        return "unknown"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


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
