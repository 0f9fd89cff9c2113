"""Requests in flight: each cache key is asked for once, in this process and across the
processes that share one cache.

- **In this process**, identical requests (same cache key) that are in flight at once
  wait for the first one's call: at concurrency 16 two samples with the same rendered
  request make one call and one cache hit, as they do at concurrency 1. If that call
  fails (errors are never cached), the next one waiting makes its own, again as at
  concurrency 1.
- **Across processes**, the first process to miss a key writes a claim into the cache
  (:meth:`ResponseCache.claim`) before calling; another process that misses the same key
  meanwhile waits for the response to appear instead of paying for it, polling the cache.
  A process's claims are renewed together (one statement a beat) while its calls run,
  and each lapses when its process dies (at once on the
  same host, else once its heartbeat has stood still for
  :data:`~gradetrail.cache.store.CLAIM_TTL_S` on the waiter's own monotonic clock: wall clocks
  that disagree across processes or hosts never decide it), and the waiting process then
  makes the call itself.

Only a run with a cache de-duplicates: ``--no-cache`` asks for every request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from gradetrail.cache.claims import CLAIM_TTL_S, Claim
from gradetrail.cache.store import ResponseCache
from gradetrail.providers.base import Response

__all__ = ["InFlight", "Shared"]

T = TypeVar("T")
#: where a response that this caller did not pay for came from
Source = Literal["cache", "twin", "other_process"]
_POLL_FIRST_S = 0.02
_POLL_MAX_S = 0.5


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Shared:
    """A response another caller paid for.

    Attributes:
        response: the response.
        source: ``cache`` (it was cached by the time the claim was written: the caller's
            earlier read missed it), ``twin`` (an identical request in flight in this
            process) or ``other_process`` (another process sharing the cache, whose
            claim was waited on).
    """

    response: Response
    source: Source


@dataclass(eq=False, repr=False)
class InFlight:
    """The calls in flight on one cache (see the module docstring).

    Attributes:
        cache: the cache the calls go through.
        twins: requests answered by an identical request's call in this process.
        waited: requests answered by another process's call that was waited on (the
            case that used to be paid twice).
        holders: ``host:pid`` of every other process whose claim was waited on.
        beat_s: seconds between two renewals of this process's claims while it holds
            any (a third of :data:`~gradetrail.cache.claims.CLAIM_TTL_S`).
    """

    cache: ResponseCache
    twins: int = 0
    waited: int = 0
    holders: set[str] = field(default_factory=set)
    beat_s: float = CLAIM_TTL_S / 3
    #: key -> the future its twins wait on (None until a twin comes: most calls have none)
    _calls: dict[str, asyncio.Future[Response | None] | None] = field(default_factory=dict)
    _held: int = 0
    _beat: asyncio.TimerHandle | None = None
    _beat_loop: asyncio.AbstractEventLoop | None = None

    async def once(
        self,
        key: str,
        call: Callable[[], Awaitable[T]],
        answer: Callable[[T], Response | None],
    ) -> T | Shared:
        """Make ``call`` for ``key`` unless another caller is making it.

        Args:
            key: the request's cache key (already a miss in the cache).
            call: makes the call (and caches a success); awaited at most once.
            answer: the response in ``call``'s result, or None when it failed.

        Returns:
            ``call``'s result when this caller made it, else the :class:`Shared` response.

        Raises:
            CacheError: the claim cannot be written (a full or read-only cache): no call
                is made.
        """
        calls = self._calls
        while True:
            if key in calls:
                twin = calls[key]
                if twin is None:  # the first twin of this call makes the future to wait on
                    twin = calls[key] = asyncio.get_running_loop().create_future()
                response = await asyncio.shield(twin)
                if response is not None:
                    self.twins += 1
                    return Shared(response, "twin")
                continue  # its call failed: this caller tries, as it would after it
            calls[key] = None
            response: Response | None = None
            try:
                found = await self.cache.group.claim(key)
                if isinstance(found, Response):  # it landed since the caller's read
                    response = found
                    return Shared(found, "cache")
                if isinstance(found, Claim):
                    response = await self._wait(key, found)
                    if response is not None:
                        self.waited += 1
                        return Shared(response, "other_process")
                    continue  # the claim is gone without a response: claim it again
                self._hold()
                try:
                    result = await call()
                finally:
                    self._held -= 1
                response = answer(result)
                if response is None:
                    self.cache.release(key)
                return result
            except BaseException:
                self.cache.release(key)
                raise
            finally:
                mine = calls.pop(key)
                if mine is not None:
                    mine.set_result(response)

    async def _wait(self, key: str, claim: Claim) -> Response | None:
        """Poll the cache until another process's response for ``key`` is there (returned)
        or its claim is gone without one (None)."""
        self.holders.add(f"{claim.host}:{claim.pid}")
        delay = _POLL_FIRST_S
        while True:
            await asyncio.sleep(delay)
            delay = min(delay * 2, _POLL_MAX_S)
            response = self.cache.get(key)
            if response is not None:
                return response
            if self.cache.holder(key) is None:
                return self.cache.get(key)  # it may have landed just before the release

    def _hold(self) -> None:
        """Count one more claim held by a call in flight, and make sure a renewal of all
        of them is due within :attr:`beat_s`."""
        self._held += 1
        loop = asyncio.get_running_loop()
        if self._beat is None or self._beat_loop is not loop:  # none due on this loop
            self._beat, self._beat_loop = loop.call_later(self.beat_s, self._renew), loop

    def _renew(self) -> None:
        """Beat every claim this process holds (while it holds any), then again in
        :attr:`beat_s`."""
        self._beat = None
        if self._held:
            self.cache.claims.renew_all()
            self._beat = asyncio.get_running_loop().call_later(self.beat_s, self._renew)
