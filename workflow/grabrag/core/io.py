"""Atomic JSON/JSONL reading and writing.

Every writer goes through a temporary file in the same folder and ``os.replace``,
so a killed job never leaves a half-written output that looks finished.
"""

from __future__ import annotations

import csv
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
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


def read_checkpoint_rows(
    path: str | os.PathLike[str],
    key: Sequence[str] = ("qid",),
    keep: Callable[[dict[str, Any]], bool] | None = None,
) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Finished rows of a job's checkpoint, keyed by the ``key`` columns, and the file
    rewritten with only those rows.

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
