"""Claims: each cache key is asked for once across the processes that share one cache.

The first process to miss a key writes a claim into the cache before calling; another
process that misses the same key meanwhile waits for the response to appear (see
:mod:`gradetrail.cache.inflight`). A claim's liveness never rests on wall clocks agreeing:
a holder on this host is gone when its pid (with the host's boot id and the process's
start time) is; elsewhere, when its heartbeat has stood still for :data:`CLAIM_TTL_S` on
the waiter's own monotonic clock.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gradetrail.errors import CacheError

if TYPE_CHECKING:
    from gradetrail.cache.store import ResponseCache
    from gradetrail.providers.base import Response

__all__ = ["CLAIM_TTL_S", "Claim", "Claims"]


#: seconds a claim on a key in flight lives without renewal
CLAIM_TTL_S = 60.0


_HOST = socket.gethostname()


def _boot_id() -> str:
    """This host's boot id (Linux), or "-" where there is none."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()[:8] or "-"
    except OSError:
        return "-"


def _started(pid: int) -> str:
    """The start time of process ``pid`` in clock ticks since boot (Linux), or "-" when
    unknown: with the boot id it tells a live process from another that reused its pid."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[19]
    except (OSError, IndexError):
        return "-"


_BOOT = _boot_id()


def _pid_namespace() -> str:
    """This process's PID namespace (the inode of ``/proc/self/ns/pid``, Linux), or "-"
    where there is none: pids name processes only within one namespace, so a holder in
    another (a container sharing the cache and the host name) cannot be looked up."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "-"


_PID_NS = _pid_namespace()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, owned by someone else
        return True
    return True


@dataclass(frozen=True, slots=True)
class Claim:
    """Another process's claim on a key in flight.

    Attributes:
        host: the claiming process's host name.
        pid: its process id.
        expires_at: the claim's heartbeat: the holder's wall clock plus
            :data:`CLAIM_TTL_S` at its last renewal. Only its changes are read (they show
            the holder renewing); it is never compared with another clock.
        owner: ``host:pid:boot:start:pidns:random`` of the holder ("" when unknown;
            without ``pidns`` from gradetrail versions before it).
    """

    host: str
    pid: int
    expires_at: float
    owner: str = ""

    def gone(self) -> bool:
        """True when the holder is known to be gone: it ran on this host, in this PID
        namespace, and its pid no longer exists, belongs to a process started later, or
        the host rebooted since. False when that cannot be told (another host, or another
        PID namespace: a container with this host name, where its pid means another
        process or none here): then only a heartbeat that stands still shows it gone."""
        if self.host != _HOST:
            return False
        parts = self.owner.split(":")
        if len(parts) == 6 and parts[4] != _PID_NS:
            return False
        if not _pid_alive(self.pid):
            return True
        if len(parts) not in (5, 6):  # an owner from before boot ids: the pid is all there is
            return False
        boot, start = parts[2], parts[3]
        if boot != "-" and _BOOT != "-" and boot != _BOOT:
            return True
        return start != "-" and start != _started(self.pid)


class Claims:
    """This process's claims on the keys of one cache (built by the cache itself, which
    delegates :meth:`claim`, :meth:`holder`, :meth:`renew` and :meth:`release` here).

    Args:
        cache: the cache whose ``claims`` table holds them (its connection, clocks and
            owner id are read through it, so a recreated file is followed).
    """

    def __init__(self, cache: ResponseCache) -> None:
        self.cache = cache
        #: key -> (owner, heartbeat, when this process first saw that heartbeat)
        self._beats: dict[str, tuple[str, float, float]] = {}

    def forget(self, key: str) -> None:
        """Forget the heartbeat seen for ``key`` (its response is cached, or it is ours)."""
        self._beats.pop(key, None)

    def drop_all(self) -> None:
        """Drop every claim this process still holds (it is closing)."""
        self._quietly("DELETE FROM claims WHERE owner = ?", (self.cache.owner,))

    def claim(self, key: str) -> Response | Claim | None:
        """Claim ``key`` for a call by this process, in a transaction of its own.

        Returns:
            None when this process now holds the claim (make the call); the response when
            one was cached meanwhile; another process's live :class:`Claim` otherwise.

        Raises:
            CacheError: the claim cannot be written (the call must not be made).
        """
        if self.cache.stuck:  # see ResponseCache.stuck: not waited for again
            raise self.cache._failed("write", self.cache.write_error)
        try:
            self.cache.ensure_file()
            with self.cache._write():
                return self.claim_many([key])[0]
        except (sqlite3.Error, CacheError) as exc:
            error = self.cache._failed("write", exc)
        if self.cache.fallback is not None:  # a run: it stops starting calls, as on a put
            self.cache.write_error = self.cache.write_error or error
        raise error

    def claim_many(self, keys: Sequence[str]) -> list[Response | Claim | None]:
        """Claim each of ``keys`` (distinct) as :meth:`claim` does, inside a write
        transaction the caller holds (``BEGIN IMMEDIATE``: nothing can change between
        the reads and the writes): two reads a 500 keys and one write for them all.

        Returns:
            One outcome a key, in the order of ``keys`` (see :meth:`claim`).

        Raises:
            sqlite3.Error: a read or the write failed (the caller rolls back).
        """
        cache = self.cache
        found = {
            key: (text, stored) for key, text, stored in cache.select_in(cache.select_entries, keys)
        }
        held = {
            key: Claim(host, pid, expires_at, owner)
            for key, owner, host, pid, expires_at in cache.select_in(
                "SELECT key, owner, host, pid, expires_at FROM claims WHERE key IN", keys
            )
        }
        outcomes: list[Response | Claim | None] = []
        mine: list[tuple[str, str, str, int, float]] = []
        expires_at = cache.wall() + CLAIM_TTL_S
        pid = os.getpid()
        for key in keys:
            row = found.get(key)
            if row is not None:
                response = cache._verified(key, row[0], row[1])
                if response is not None:
                    self._beats.pop(key, None)
                    outcomes.append(response)
                    continue
            other = held.get(key)
            if other is not None and other.owner != cache.owner:
                if not self._lapsed(key, other):
                    outcomes.append(other)
                    continue
                cache.took_over += 1  # its process died or stopped renewing it
            self._beats.pop(key, None)
            mine.append((key, cache.owner, _HOST, pid, expires_at))
            outcomes.append(None)
        cache._db.executemany("INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?, ?)", mine)
        return outcomes

    def _lapsed(self, key: str, other: Claim) -> bool:
        """True when ``other``'s claim on ``key`` no longer holds: its process is gone
        from this host, or its heartbeat has stood still for :data:`CLAIM_TTL_S` on this
        process's monotonic clock since this process first saw it."""
        if other.gone():
            return True
        now = self.cache.monotonic()
        seen = self._beats.get(key)
        if seen is None or seen[:2] != (other.owner, other.expires_at):
            self._beats[key] = (other.owner, other.expires_at, now)
            return False
        return now - seen[2] >= CLAIM_TTL_S

    def holder(self, key: str) -> Claim | None:
        """Another process's live claim on ``key``, or None (none, or it lapsed: see
        :meth:`claim`)."""
        try:
            held = self.cache._db.execute(
                "SELECT owner, host, pid, expires_at FROM claims WHERE key = ?", (key,)
            ).fetchone()
        except sqlite3.Error as exc:
            raise self.cache._failed("read", exc) from None
        if held is None or held[0] == self.cache.owner:
            self._beats.pop(key, None)
            return None
        other = Claim(held[1], held[2], held[3], held[0])
        return None if self._lapsed(key, other) else other

    def renew(self, key: str) -> None:
        """Beat this process's claim on ``key``: its heartbeat moves (to this wall clock
        plus :data:`CLAIM_TTL_S`, and at least a millisecond on from the last one, so it
        moves even when the wall clock stands still or steps back)."""
        self._quietly(
            "UPDATE claims SET expires_at = MAX(?, expires_at + 0.001) WHERE key = ? AND owner = ?",
            (self.cache.wall() + CLAIM_TTL_S, key, self.cache.owner),
        )

    def renew_all(self) -> None:
        """Beat every claim this process holds, as :meth:`renew` beats one: one statement
        however many calls are in flight."""
        self._quietly(
            "UPDATE claims SET expires_at = MAX(?, expires_at + 0.001) WHERE owner = ?",
            (self.cache.wall() + CLAIM_TTL_S, self.cache.owner),
        )

    def release(self, key: str) -> None:
        """Drop this process's claim on ``key`` (its call failed: another may try)."""
        self._quietly("DELETE FROM claims WHERE key = ? AND owner = ?", (key, self.cache.owner))

    def _quietly(self, sql: str, args: tuple[object, ...]) -> None:
        """A claim update that may fail (a full disk): the claim then lapses by itself
        (skipped once the write lock is held elsewhere, see ``ResponseCache.stuck``)."""
        if self.cache.stuck:
            return
        with contextlib.suppress(sqlite3.Error):
            self.cache._db.execute(sql, args)
