"""Responses that arrived when the cache could not store them, kept until it can.

When a write to the cache fails mid-run (its disk is full, say), every response that has
arrived, and those still in flight, are paid for. The run stops starting new samples and
appends each such response to ``pending-cache.jsonl`` in its run directory (one JSON
object a line: key, provider, model, the stored text, its checksum and a MAC). The next
run of the same spec (the same run directory) stores them in the cache before anything
else and deletes the file once all are in, so nothing paid for is asked for again. If the
results disk is full too, a response that fits nowhere is counted in
``manifest.cache.lost``.

**Only this cache's own runs feed it.** A results directory is shared: cloned from a
colleague, or committed to a repository that any pull request can edit (``docs/ci.md``).
So every line carries an HMAC-SHA256 under a secret key that lives beside the cache, in
``<cache>-key`` (32 random bytes, mode 0600, created on the first run that uses the cache,
never under a results directory unless the cache itself is). A line is imported only when
its MAC verifies under that key: a planted or edited line, or one a run on another cache
(a colleague's) wrote, is ignored and counted (``manifest.cache.rejected``), and its
request is made again. Whoever can read the key file can sign lines, and whoever can
write the cache can change it directly: the key protects the cache from the results
directory, not from someone who already holds the cache's directory. Losing the key (or
the cache's directory) makes pending lines unverifiable: they are requested again.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from gradetrail.cache.store import ResponseCache, checksum, retry_advice
from gradetrail.errors import CacheError, CacheRefused, RunError
from gradetrail.rundir.layout import RunDir
from gradetrail.rundir.results import PENDING_FILE

__all__ = ["KEY_SUFFIX", "PendingResponses", "Restored", "cache_key", "restore_pending"]

#: the key file's name is the cache file's name plus this
KEY_SUFFIX = "-key"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_KEY_HEX = 64


def _key_path(cache_path: Path) -> Path:
    return Path(f"{cache_path}{KEY_SUFFIX}")


def _read_key(path: Path) -> bytes:
    """The key in ``path`` (opened without following a link).

    Raises:
        FileNotFoundError: there is none.
        CacheRefused: it is a link, not a regular file, shared by a hard link, not this
            user's, open to others, or not a key.
    """

    def refuse(what: str) -> CacheRefused:
        return CacheRefused(f"cache key {path}: {what}; delete it (a new one is made)")

    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise refuse(f"cannot be read ({exc.strerror}); it is never followed as a link") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            raise refuse("is not a regular file with one link")
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            raise refuse(f"belongs to user id {st.st_uid}, not to this user")
        if st.st_mode & 0o077:
            raise refuse(f"others may read or write it (mode {stat.S_IMODE(st.st_mode):o})")
        data = f.read(_KEY_HEX + 1).strip()
    if len(data) != _KEY_HEX:
        raise refuse("is not a gradetrail key")
    try:
        return bytes.fromhex(data.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise refuse("is not a gradetrail key") from None


def cache_key(cache_path: Path, *, create: bool = True) -> bytes | None:
    """The secret key (32 bytes) that signs ``cache_path``'s pending lines, read from
    ``<cache_path>-key``; made (atomically, mode 0600) when missing and ``create``.

    Returns:
        The key, or None when there is none and ``create`` is False.

    Raises:
        CacheRefused: the key file cannot be used (see :func:`_read_key`) or made.
    """
    path = _key_path(cache_path)
    try:
        return _read_key(path)
    except FileNotFoundError:
        if not create:
            return None
    _keep_key_file(path, secrets.token_bytes(_KEY_HEX // 2))
    return _read_key(path)


def _keep_key_file(path: Path, key: bytes) -> None:
    """Write ``key`` to ``path`` unless a key file is there already (atomically: written
    to a temporary name, then linked, so no reader sees half a key).

    Raises:
        CacheRefused: it cannot be written.
    """
    if os.path.lexists(path):
        return
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600)
        try:
            os.write(fd, key.hex().encode("ascii") + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        with contextlib.suppress(FileExistsError):  # another process made it first: use it
            os.link(tmp, path)
    except OSError as exc:
        raise CacheRefused(
            f"cache key {path}: cannot be made ({exc.strerror}); the cache's directory "
            "must be writable"
        ) from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _mac(key: bytes, fields: list[str]) -> str:
    data = json.dumps(fields, ensure_ascii=True).encode("ascii")
    return hmac.new(key, data, hashlib.sha256).hexdigest()


class PendingResponses:
    """The run directory's ``pending-cache.jsonl``, opened on the first response kept.

    Args:
        run_dir: the open run directory.
        key: the cache's key (:func:`cache_key`), which signs each line.
        cache_path: the cache file: when its key file was deleted meanwhile (with the
            cache, say), it is written again before the first line, so the next run can
            verify the lines; a line is not kept (counted lost) when it cannot be.

    Attributes:
        kept: responses written to the file.
    """

    def __init__(self, run_dir: RunDir, key: bytes, cache_path: Path | None = None) -> None:
        self.run_dir = run_dir
        self.kept = 0
        self._key = key
        self._cache_path = cache_path
        self._file: IO[str] | None = None

    def keep(self, key: str, provider: str, model: str, text: str, check: str) -> bool:
        """Append one response, signed (flushed and fsynced); False when it cannot be
        written."""
        mac = _mac(self._key, [key, provider, model, text, check])
        line = json.dumps(
            {
                "key": key,
                "provider": provider,
                "model": model,
                "text": text,
                "checksum": check,
                "mac": mac,
            }
        )
        try:
            if self._file is None:
                if self._cache_path is not None:  # the key file may have been deleted
                    _keep_key_file(_key_path(self._cache_path), self._key)
                self._file = self.run_dir.open_text(PENDING_FILE, append=True)
            self._file.write(line + "\n")
            self._file.flush()
            os.fsync(self._file.fileno())
        except (OSError, RunError, CacheRefused):
            return False
        self.kept += 1
        return True

    def close(self) -> None:
        """Close the file (idempotent; a failed flush has already been reported)."""
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Restored:
    """What :func:`restore_pending` did.

    Attributes:
        stored: responses stored in the cache.
        rejected: lines ignored because their MAC does not verify under the cache's key
            (planted, edited, or written by a run on another cache).
        torn: lines ignored because they are not whole (a run killed mid-write).
    """

    stored: int = 0
    rejected: int = 0
    torn: int = 0


def restore_pending(run_dir: RunDir, cache: ResponseCache, key: bytes) -> Restored:
    """Store the responses an earlier run on this cache kept in this run directory's
    ``pending-cache.jsonl``. Only lines whose MAC verifies under ``key`` are stored; the
    others are counted and left in the file (a run on the cache that wrote them, another
    ``--cache``, imports them; planted ones stay until deleted), never imported. The file
    is deleted once nothing is left in it.

    Raises:
        CacheError: the cache still cannot be written (the file is kept for next time).
    """
    try:
        fd = run_dir.open_fd(PENDING_FILE, os.O_RDONLY)
    except RunError:
        return Restored()
    with os.fdopen(fd, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    stored = rejected = torn = 0
    unsigned: list[str] = []  # another cache's responses (paid for): kept for it
    for line in lines:
        try:
            entry = json.loads(line)
            fields = [entry[name] for name in ("key", "provider", "model", "text", "checksum")]
            mac = entry.get("mac")
        except (ValueError, KeyError, TypeError, AttributeError):
            torn += 1
            continue
        if not all(isinstance(value, str) for value in fields) or not isinstance(mac, str):
            rejected += 1
            unsigned.append(line)
            continue
        if not hmac.compare_digest(mac, _mac(key, fields)):
            rejected += 1
            unsigned.append(line)
            continue
        entry_key, provider, model, text, check = fields
        if check != checksum(entry_key, text):
            torn += 1
            continue
        try:
            cache.store(entry_key, provider, model, text, check)
        except CacheError as exc:
            raise CacheError(
                f"{exc}; {len(lines)} responses an earlier run paid for wait in "
                f"{run_dir.path / PENDING_FILE}: {retry_advice(exc)}"
            ) from None
        stored += 1
    if unsigned:
        run_dir.write_atomic(PENDING_FILE, "".join(f"{line}\n" for line in unsigned))
    else:
        run_dir.remove(PENDING_FILE)
    return Restored(stored, rejected, torn)
