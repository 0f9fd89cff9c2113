"""Maintenance of the response cache: its counts and size, a full check of every entry
(and a repair that deletes the damaged ones), and clearing it (``gradetrail cache``)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from gradetrail.cache.store import (
    CacheCheck,
    CacheStats,
    ResponseCache,
    _parse,
    _sql_text,
    checksum,
)

__all__ = ["cache_stats", "check_cache", "clear_cache"]


def cache_stats(cache: ResponseCache) -> CacheStats:
    """Counts per (provider, model) and the file size.

    Raises:
        CacheError: the database cannot be read.
    """
    try:
        rows = cache._db.execute(
            "SELECT provider, model, COUNT(*) FROM responses GROUP BY provider, model "
            "ORDER BY 3 DESC"
        ).fetchall()
    except sqlite3.Error as exc:
        raise cache._failed("read", exc) from None
    size = sum(p.stat().st_size for p in (cache.path, Path(f"{cache.path}-wal")) if p.exists())
    return CacheStats(cache.path, sum(r[2] for r in rows), size, [tuple(r) for r in rows])


def check_cache(cache: ResponseCache, *, repair: bool = False) -> CacheCheck:
    """Verify every entry's checksum and shape, and the file's structure.

    Args:
        repair: delete the damaged entries (their keys miss and are requested again).

    Raises:
        CacheError: the database cannot be read (or, with ``repair``, written).
    """
    damaged: list[tuple[str, str]] = []
    entries = 0
    try:
        integrity = [r[0] for r in cache._db.execute("PRAGMA integrity_check")]
        for key, text, stored in cache.entries():
            entries += 1
            if stored is None:
                damaged.append((str(key), "no checksum (not a well-formed response)"))
            elif not isinstance(text, str) or stored != checksum(str(key), text):
                damaged.append((str(key), "checksum mismatch"))
            elif _parse(text) is None:
                damaged.append((str(key), "not a well-formed response"))
    except sqlite3.Error as exc:
        raise cache._failed("read", exc) from None
    repaired = 0
    if repair and damaged:
        try:
            with cache._write():
                for key, _ in damaged:
                    repaired += cache._db.execute(
                        "DELETE FROM responses WHERE key = ?", (key,)
                    ).rowcount
        except sqlite3.Error as exc:
            raise cache._failed("write", exc) from None
    return CacheCheck(cache.path, entries, damaged, integrity, repaired)


def clear_cache(cache: ResponseCache, model: str | None = None) -> int:
    """Delete every entry (or only ``model``'s); returns how many were deleted.

    Raises:
        CacheError: the database cannot be written.
    """
    try:
        if model is None:
            cur = cache._db.execute("DELETE FROM responses")
        else:
            cur = cache._db.execute("DELETE FROM responses WHERE model = ?", (_sql_text(model),))
        cache._db.execute("VACUUM")
    except sqlite3.Error as exc:
        raise cache._failed("write", exc) from None
    return cur.rowcount
