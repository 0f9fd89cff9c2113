"""Group commit: the claims and the responses that the tasks of one event-loop pass hand
to the cache are written in one SQLite transaction, at the start of the next pass.

Filling a cache used to take two transactions a response (a claim before the call, the
response after it) and about ten statements; at 64 to 256 calls in flight on a fast
server those transactions were most of a run's time. Here each pass's claims and
responses share one ``BEGIN IMMEDIATE`` ... ``COMMIT`` and a handful of statements.

What it keeps:

- **A response is durable before its row is written.** :meth:`GroupCommit.put` returns
  only once the transaction holding the response has committed, and the caller writes
  the row after it.
- **What a kill can lose.** A response waits at most until the start of the next pass of
  the event loop (before any new network data is read), and never behind more than
  :data:`MAX_WAITING` others: the ``kill -9`` that used to lose the responses that had
  arrived and whose tasks had not run yet (at most the calls in flight) can lose at most
  :data:`MAX_WAITING` - 1 more (``bench/bench_kill.py`` measures both).
- **Errors and fallbacks as one at a time.** When a grouped write fails, each claim and
  response is written again on its own through the single-key paths
  (:meth:`~gradetrail.cache.claims.Claims.claim`, :meth:`ResponseCache.write_one`), so
  which call is refused, what goes to the run's fallback file and what is counted are
  what they would have been without grouping.

Outside a running event loop, or on another loop than the one that started a group,
each write is made at once.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from gradetrail.errors import CacheError

if TYPE_CHECKING:
    from gradetrail.cache.claims import Claim
    from gradetrail.cache.store import Entry, ResponseCache
    from gradetrail.providers.base import Request, Response

__all__ = ["GroupCommit"]

#: responses that may wait for one grouped transaction: the one that makes it this many
#: is written at once, with every claim and response waiting (bounds what a kill can
#: lose beyond the responses it always could, and the size of one transaction)
MAX_WAITING = 32


class GroupCommit:
    """The claims and responses waiting for one cache's next grouped transaction.

    Args:
        cache: the cache they are written to (its connection, fallback and counters).
    """

    def __init__(self, cache: ResponseCache) -> None:
        self.cache = cache
        self._claims: list[tuple[str, asyncio.Future[Response | Claim | None]]] = []
        self._entries: list[tuple[Entry, asyncio.Future[None]]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        #: the loop on which a pass's flush is scheduled and has not run yet (None when
        #: none is): a group that the MAX_WAITING-th response wrote at once leaves that
        #: flush in place for the items that follow, rather than scheduling a second one
        #: that would commit a transaction of one item
        self._pending: asyncio.AbstractEventLoop | None = None
        #: grouped transactions committed (for benchmarks and tests)
        self.commits = 0

    async def claim(self, key: str) -> Response | Claim | None:
        """Claim ``key`` as :meth:`ResponseCache.claim` does, in the next grouped write.

        Raises:
            CacheError: the claim cannot be written (the call must not be made).
        """
        future: asyncio.Future[Response | Claim | None] = self._join().create_future()
        self._claims.append((key, future))
        return await future

    async def put(self, key: str, request: Request, response: Response) -> None:
        """Store ``response`` as :meth:`ResponseCache.put` does, in the next grouped write;
        returns once it is committed (or kept by the fallback). A cancelled caller's
        response is still written.

        Raises:
            CacheError: the write failed and there is no fallback.
        """
        entry = self.cache.prepared(key, request, response)
        future: asyncio.Future[None] = self._join().create_future()
        self._entries.append((entry, future))
        if len(self._entries) >= MAX_WAITING:
            self.flush()  # the loop's own flush then finds nothing to write
        await future

    def _join(self) -> asyncio.AbstractEventLoop:
        """The running loop, with this pass's flush scheduled on it (the first item of a
        group schedules it; items from another loop first flush the old loop's group)."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self.flush()
            self._loop = loop
        if self._pending is not loop:
            self._pending = loop
            loop.call_soon(self._flush_pass)
        return loop

    def _flush_pass(self) -> None:
        """The event loop's flush at the start of the pass after the group's first item."""
        self._pending = None
        self.flush()

    def flush(self) -> None:
        """Write every waiting claim and response in one transaction and settle their
        futures; on a failed write, each one again on its own (see the module
        docstring). Called by the event loop, and by :meth:`ResponseCache.close`."""
        claims, entries = self._claims, self._entries
        if not claims and not entries:
            return
        self._claims, self._entries = [], []
        # a claim whose caller was cancelled meanwhile is not made (nobody would call)
        claims = [(key, future) for key, future in claims if not future.cancelled()]
        cache = self.cache
        if cache.stuck:  # the write lock is held elsewhere: not waited for again
            self._one_by_one(claims, entries)
            return
        took_over = cache.took_over
        try:
            cache.ensure_file()
            with cache._write():
                if entries:
                    cache.write_entries([entry for entry, _ in entries])
                outcomes = cache.claims.claim_many([key for key, _ in claims]) if claims else []
        except (sqlite3.Error, CacheError) as exc:
            cache.took_over = took_over  # rolled back: counted again one by one
            cache.note_busy(exc)  # a lock held elsewhere is waited for once: see cache.stuck
            self._one_by_one(claims, entries)
            return
        self.commits += 1
        _settle((future, outcome) for (_, future), outcome in zip(claims, outcomes, strict=True))
        _settle((future, None) for _, future in entries)

    def _one_by_one(
        self,
        claims: list[tuple[str, asyncio.Future[Response | Claim | None]]],
        entries: list[tuple[Entry, asyncio.Future[None]]],
    ) -> None:
        for entry, future in entries:
            try:
                self.cache.write_one(entry)
            except CacheError as exc:
                _settle([(future, exc)])
            else:
                _settle([(future, None)])
        for key, future in claims:
            try:
                outcome = self.cache.claim(key)
            except CacheError as exc:
                _settle([(future, exc)])
            else:
                _settle([(future, outcome)])


def _settle(settled: Iterable[tuple[asyncio.Future[Any], object]]) -> None:
    """Settle each future with its outcome (an exception is raised in its caller) unless
    its caller is gone (cancelled, or its loop closed: what it waited for was written all
    the same)."""
    for future, outcome in settled:
        if future.done():
            continue
        try:  # not contextlib.suppress: twice a cold row, and it costs 3x
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)
        except RuntimeError:  # its event loop is closed
            pass
