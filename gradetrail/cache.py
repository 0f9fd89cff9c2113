"""The response cache: one SQLite database (WAL), one row per request key.

Only successful responses are stored, and each is committed the moment it arrives, so a
killed run loses nothing it paid for. The key is :meth:`Request.key` (never the scorer).

Location: ``--cache PATH``, else ``$GRADETRAIL_CACHE``, else
``$XDG_CACHE_HOME/gradetrail/cache.sqlite`` (``~/.cache/gradetrail/cache.sqlite``).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gradetrail.errors import CacheError
from gradetrail.providers.base import Request, Response

__all__ = ["CacheStats", "ResponseCache", "default_cache_path"]

_COLUMNS = ("key", "provider", "model", "response", "created_at")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    response TEXT NOT NULL,
    created_at REAL NOT NULL
) WITHOUT ROWID;
"""


def default_cache_path() -> Path:
    """The cache file used when no ``--cache`` is given: ``$GRADETRAIL_CACHE`` or the XDG
    cache directory."""
    env = os.environ.get("GRADETRAIL_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gradetrail" / "cache.sqlite"


@dataclass(frozen=True, slots=True)
class CacheStats:
    """What a cache holds.

    Attributes:
        path: the database file.
        entries: number of cached responses.
        size_bytes: size of the database file (plus its WAL).
        by_model: ``(provider, model, entries)`` triples, most entries first.
    """

    path: Path
    entries: int
    size_bytes: int
    by_model: list[tuple[str, str, int]]


class ResponseCache:
    """A SQLite response cache; safe to share across runs and processes.

    Args:
        path: the database file; its directory is created if missing.

    Raises:
        CacheError: the file cannot be opened or is not a gradetrail cache.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
            self._check_schema()  # before any write: never alter another program's database
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        except (sqlite3.Error, OSError) as exc:
            raise CacheError(
                f"cache {self.path}: cannot open ({exc}); pass --cache PATH or --no-cache"
            ) from None

    def _check_schema(self) -> None:
        """Refuse a database that holds anything but a gradetrail ``responses`` table."""
        tables = {
            name
            for (name,) in self._db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        }
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(responses)")}
        if tables - {"responses"} or (columns and columns != set(_COLUMNS)):
            self._db.close()
            raise CacheError(
                f"cache {self.path}: not a gradetrail cache (it holds other tables or "
                "columns); pass another --cache PATH"
            )

    def get(self, key: str) -> Response | None:
        """The cached response for ``key``, or None."""
        try:
            row = self._db.execute(
                "SELECT response FROM responses WHERE key = ?", (key,)
            ).fetchone()
        except sqlite3.Error as exc:
            raise CacheError(f"cache {self.path}: read failed ({exc})") from None
        return Response.from_json(row[0]) if row else None

    def any_missing(self, keys: Sequence[str]) -> bool:
        """True when at least one of ``keys`` has no cached response (500 keys a query)."""
        try:
            for start in range(0, len(keys), 500):
                chunk = keys[start : start + 500]
                marks = ",".join("?" * len(chunk))
                (found,) = self._db.execute(
                    f"SELECT COUNT(*) FROM responses WHERE key IN ({marks})", chunk
                ).fetchone()
                if found < len(set(chunk)):
                    return True
        except sqlite3.Error as exc:
            raise CacheError(f"cache {self.path}: read failed ({exc})") from None
        return False

    def put(self, key: str, request: Request, response: Response) -> None:
        """Store a successful response (committed at once)."""
        try:
            self._db.execute(
                "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?)",
                (key, request.provider, request.model, response.to_json(), time.time()),
            )
        except sqlite3.Error as exc:
            raise CacheError(f"cache {self.path}: write failed ({exc})") from None

    def stats(self) -> CacheStats:
        """Counts per (provider, model) and the file size.

        Raises:
            CacheError: the database cannot be read.
        """
        try:
            rows = self._db.execute(
                "SELECT provider, model, COUNT(*) FROM responses GROUP BY provider, model "
                "ORDER BY 3 DESC"
            ).fetchall()
        except sqlite3.Error as exc:
            raise CacheError(f"cache {self.path}: read failed ({exc})") from None
        size = sum(p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists())
        return CacheStats(self.path, sum(r[2] for r in rows), size, [tuple(r) for r in rows])

    def clear(self, model: str | None = None) -> int:
        """Delete every entry (or only ``model``'s); returns how many were deleted.

        Raises:
            CacheError: the database cannot be written.
        """
        try:
            if model is None:
                cur = self._db.execute("DELETE FROM responses")
            else:
                cur = self._db.execute("DELETE FROM responses WHERE model = ?", (model,))
            self._db.execute("VACUUM")
        except sqlite3.Error as exc:
            raise CacheError(f"cache {self.path}: write failed ({exc})") from None
        return cur.rowcount

    def close(self) -> None:
        """Close the connection."""
        self._db.close()
