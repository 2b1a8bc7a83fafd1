"""Atomic JSON/JSONL reading and writing.

Every writer goes through a temporary file in the same folder and ``os.replace``,
so a killed job never leaves a half-written output that looks finished.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from grabrag.core.errors import DataError

_UMASK = os.umask(0)
os.umask(_UMASK)


@contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "w") -> Iterator[IO[Any]]:
    """Open a temporary sibling of ``path``; rename it onto ``path`` only on success."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        encoding = None if "b" in mode else "utf-8"
        with os.fdopen(fd, mode, encoding=encoding) as handle:
            yield handle
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; outputs follow the umask
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_jsonl(path: str | os.PathLike[str], rows: Iterable[dict[str, Any]]) -> int:
    """Write rows as JSON lines atomically; return how many were written."""
    count = 0
    with atomic_write(path) as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False, sort_keys=False))
            handle.write("\n")
            count += 1
    return count


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    with atomic_write(path) as handle:
        json.dump(obj, handle, ensure_ascii=False, indent=2)
        handle.write("\n")


def write_csv(
    path: str | os.PathLike[str], columns: Sequence[str], rows: Iterable[dict[str, Any]]
) -> None:
    """Write rows as CSV (a spreadsheet opens it) atomically."""
    with atomic_write(path) as handle:
        writer = csv.DictWriter(handle, fieldnames=list(columns), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read a JSONL file; a bad line is a DataError naming file and line number."""
    rows: list[dict[str, Any]] = []
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: file not found")
    with path.open(encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(
                    f"{path}, line {lineno}: not valid JSON ({exc.msg}); "
                    "fix or remove that line, or delete the file so the rule that makes it reruns"
                ) from None
            if not isinstance(row, dict):
                raise DataError(
                    f"{path}, line {lineno}: expected a JSON object, got {type(row).__name__}"
                )
            rows.append(row)
    return rows


def read_json(path: str | os.PathLike[str]) -> Any:
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: file not found")
    try:
        with path.open(encoding="utf-8") as handle:
            return json.load(handle)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not valid JSON at line {exc.lineno} ({exc.msg})") from None


SETTINGS = "_checkpoint_settings"
"""The key of a checkpoint's first line: the settings its rows were made under."""


def file_digest(path: str | os.PathLike[str]) -> str:
    """The sha256 of a file's bytes ("missing" for no file, "folder" for a folder)."""
    path = Path(path)
    if path.is_dir():
        return "folder"
    if not path.is_file():
        return "missing"
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def job_settings(
    params: Iterable[tuple[str, Any]], inputs: Iterable[str | os.PathLike[str]]
) -> dict[str, Any]:
    """Everything a model job's rows depend on, for its checkpoint: its params (the model
    entry with its batch, every decoding setting, the code hash that covers the prompts
    and grammars, the stage's own settings) and the sha256 of each input file (the
    context rows; a model's asset manifest, which pins the weights' sha256)."""
    settings = json.loads(json.dumps(dict(params), sort_keys=True, default=str))
    return {"params": settings, "inputs": {str(p): file_digest(p) for p in inputs}}


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flat(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def settings_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """What differs between two :func:`job_settings`, as "key: old -> new" lines (an input
    file by its path only: its bytes changed)."""
    old, new = _flat(dict(before)), _flat(dict(after))
    changes = []
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            if key.startswith("inputs."):
                changes.append(f"{key[len('inputs.') :]} changed")
            else:
                changes.append(f"{key[len('params.') :]}: {old.get(key)!r} -> {new.get(key)!r}")
    return changes


def stamp_checkpoint(
    path: str | os.PathLike[str],
    settings: Mapping[str, Any],
    log: Callable[[str], None] | None = None,
) -> int:
    """Make ``path`` a checkpoint of rows made under ``settings`` before a job resumes
    from it: when it holds rows made under other settings (or by a version that recorded
    none), they are dropped, with a log line saying how many and what changed, since
    Snakemake records the job's output as made under the new settings and no later run
    would repair a kept row. Returns the number of rows dropped."""
    path = Path(path)
    header = json.dumps({SETTINGS: settings}, sort_keys=True) + "\n"
    lines: list[str] = []
    if path.exists():
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    recorded = None
    if lines:
        try:
            first = json.loads(lines[0])
        except json.JSONDecodeError:
            first = None
        if isinstance(first, dict) and SETTINGS in first:
            recorded = first[SETTINGS]
            lines = lines[1:]
    dropped = 0
    if recorded != dict(settings):
        dropped = sum(1 for line in lines if line.endswith("\n"))
        if dropped and log:
            why = (
                "; ".join(settings_changes(recorded, settings)[:6])
                if recorded is not None
                else "it records no settings (an older version wrote it)"
            )
            log(f"{path}: {dropped} rows made under other settings dropped and redone ({why})")
        lines = []
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".tmp")
    partial.write_text(header + "".join(lines), encoding="utf-8")
    os.replace(partial, path)
    return dropped


def read_checkpoint_rows(
    path: str | os.PathLike[str],
    key: Sequence[str] = ("qid",),
    keep: Callable[[dict[str, Any]], bool] | None = None,
) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Finished rows of a job's checkpoint, keyed by the ``key`` columns, and the file
    rewritten with only those rows (and its settings line, :func:`stamp_checkpoint`).

    Reading stops at a torn line (a job killed mid-write: not JSON, or no final newline),
    so the rows from there on are redone; rows ``keep`` rejects (e.g. written under other
    settings) are dropped. The rewrite matters: appending after a torn tail would glue the
    next row onto it.
    """
    done: dict[tuple[Any, ...], dict[str, Any]] = {}
    path = Path(path)
    if not path.exists():
        return done
    kept: list[str] = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                break
            if not line.endswith("\n"):
                break
            if SETTINGS in row:
                kept.append(line)
                continue
            if keep is not None and not keep(row):
                continue
            done[tuple(row[k] for k in key)] = row
            kept.append(line)
    partial = path.with_name(path.name + ".tmp")
    partial.write_text("".join(kept), encoding="utf-8")
    os.replace(partial, path)
    return done


def append_checkpoint_row(handle: IO[str], row: dict[str, Any]) -> None:
    """One finished row, on disk before the next call starts (flushed and fsynced)."""
    handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    handle.flush()
    os.fsync(handle.fileno())
