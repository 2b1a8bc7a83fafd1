"""The on-disk cache of a served model's responses (:mod:`grabrag.generation.endpoint`),
and the error every served-model fault is named by."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from grabrag.core.errors import GrabragError

# Where the response cache lives when the caller names none (relative to the working
# directory: the workflow's, for rule jobs).
DEFAULT_CACHE = Path("results/endpoint-cache/responses.sqlite")


class EndpointError(GrabragError):
    """A served model cannot answer: the message names the server, the model or the key
    variable, and what to do."""


class ResponseCache:
    """Finished responses by request hash, with the seconds each call took, in one SQLite
    file shared by the jobs of a run (WAL mode and a busy timeout let parallel jobs write
    it)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(path, timeout=60, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS calls "
                "(key TEXT PRIMARY KEY, body TEXT NOT NULL, seconds REAL NOT NULL)"
            )
            self._db.commit()
        except sqlite3.DatabaseError as error:
            raise EndpointError(
                f"the endpoint response cache {path} cannot be opened ({error}); delete it "
                "to start an empty one (finished rows are kept in the results)"
            ) from None

    def get(self, key: str) -> tuple[dict[str, Any], float] | None:
        """The response and the seconds its call took, or None."""
        with self._lock:
            row = self._db.execute(
                "SELECT body, seconds FROM calls WHERE key = ?", (key,)
            ).fetchone()
        if row is None:
            return None
        try:
            return json.loads(row[0]), float(row[1])
        except json.JSONDecodeError:
            return None

    def put(self, key: str, body: Mapping[str, Any], seconds: float) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO calls (key, body, seconds) VALUES (?, ?, ?)",
                (key, json.dumps(body, sort_keys=True), seconds),
            )
            self._db.commit()


def request_key(body: Mapping[str, Any], identity: str = "") -> str:
    """The cache key of a request: the hash of its canonical JSON (model, messages,
    decoding settings, constraint; not the server's address or the key) and of the
    server's identity (:func:`grabrag.generation.served_proof.identity_hash`), so that
    other weights behind the same served name never answer from the cache."""
    text = json.dumps({"request": body, "server": identity}, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
