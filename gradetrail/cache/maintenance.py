"""Maintenance of the response cache: its counts and size, a full check of every entry
(and a repair that deletes the damaged ones), and clearing it (``gradetrail cache``)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from gradetrail.cache.store import (
    CacheCheck,
    CacheStats,
    ResponseCache,
    _parse,
    _sql_text,
    checksum,
)

__all__ = ["CLEAR_BATCH", "ClearedCache", "cache_stats", "check_cache", "clear_cache"]


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


def clear_cache(cache: ResponseCache, model: str | None = None) -> ClearedCache:
    """Delete every entry (or only ``model``'s), then compact the file (``VACUUM``).

    One transaction puts every page it frees in the WAL at once: on a full disk (which a
    clear is meant to relieve) that fails, and the entries are then deleted
    :data:`CLEAR_BATCH` a transaction, the WAL copied back between them (a nearly full
    disk checkpoints often, see ``ResponseCache._wal_pages``). Compacting needs room for
    a copy of what is left; when it fails the freed pages are still reused by later
    entries, and the failure is reported, not raised.

    Raises:
        CacheError: the database cannot be written (entries deleted before the failure
            stay deleted).
    """
    where, args = ("", ()) if model is None else (" WHERE model = ?", (_sql_text(model),))
    try:
        try:
            with cache._write():
                deleted = cache._db.execute(f"DELETE FROM responses{where}", args).rowcount
        except sqlite3.OperationalError as exc:
            if "full" not in str(exc):
                raise
            deleted = _clear_in_batches(cache, where, args)
    except sqlite3.Error as exc:
        raise cache._failed("write", exc) from None
    try:
        cache._db.execute("VACUUM")
    except sqlite3.Error as exc:
        return ClearedCache(deleted, str(exc))
    return ClearedCache(deleted)


def _clear_in_batches(cache: ResponseCache, where: str, args: tuple[str, ...]) -> int:
    """Delete the entries ``where`` selects, :data:`CLEAR_BATCH` a transaction; return
    how many.

    Raises:
        sqlite3.Error: a batch could not be written.
    """
    deleted = 0
    while True:
        with cache._write():
            n = cache._db.execute(
                "DELETE FROM responses WHERE key IN "
                f"(SELECT key FROM responses{where} LIMIT {CLEAR_BATCH})",
                args,
            ).rowcount
        deleted += n
        if n < CLEAR_BATCH:
            return deleted


#: entries deleted in one transaction by :func:`clear_cache` on a full disk
CLEAR_BATCH = 20


@dataclass(frozen=True, slots=True)
class ClearedCache:
    """What :func:`clear_cache` did.

    Attributes:
        deleted: entries deleted.
        not_compacted: why the file could not be compacted afterwards (its disk is full,
            say), or None when it was.
    """

    deleted: int
    not_compacted: str | None = None
