"""The local executor: provider calls on this process's asyncio loop."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from functools import partial

from gradetrail.executors.base import Executor
from gradetrail.executors.limits import Throttle, ThrottleStats
from gradetrail.providers.base import Provider, Request
from gradetrail.retry import CallOutcome, RetryPolicy, call_with_retry

__all__ = ["LocalExecutor"]


class LocalExecutor(Executor):
    """Calls the provider in-process, at most ``concurrency`` attempts in flight, through a
    :class:`~gradetrail.executors.limits.Throttle` (AIMD in-flight limit on 429s, optional
    rate caps, the server's Retry-After pause). Backoff sleeps hold no slot.

    Args:
        provider: the run's provider (its connection pools are sized to ``concurrency``).
        policy: the retry policy.
        concurrency: attempts in flight at most.
        requests_per_minute, tokens_per_minute: optional rate caps.
        adaptive: lower the in-flight limit on 429s and raise it again as calls succeed.
        sleep, clock, rand: injected for tests (defaults: asyncio.sleep, time.monotonic,
            random.random).
    """

    def __init__(
        self,
        provider: Provider,
        policy: RetryPolicy,
        concurrency: int,
        *,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        adaptive: bool = True,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.provider = provider
        self.policy = policy
        self.concurrency = concurrency
        self.requests_per_minute = requests_per_minute
        self.tokens_per_minute = tokens_per_minute
        self.adaptive = adaptive
        self._sleep, self._clock, self._rand = sleep, clock, rand
        self._throttle: Throttle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        provider.size_pool(concurrency)

    @property
    def throttle(self) -> Throttle:
        """The admission control of this executor on the running event loop."""
        loop = asyncio.get_running_loop()
        if self._throttle is None or self._loop is not loop:
            self._loop = loop
            self._throttle = Throttle(
                self.concurrency,
                adaptive=self.adaptive,
                requests_per_minute=self.requests_per_minute,
                tokens_per_minute=self.tokens_per_minute,
                clock=self._clock,
                sleep=self._sleep,
            )
        return self._throttle

    def throttle_stats(self) -> ThrottleStats | None:
        """How admission went in the last run (in-flight limit, 429s, pauses), or None
        before any call."""
        return self._throttle.stats() if self._throttle is not None else None

    async def complete(self, request: Request) -> CallOutcome:
        """Call the provider with retries; each attempt passes the throttle."""
        provider = self.provider
        return await call_with_retry(
            partial(provider.complete, request),
            self.policy,
            sleep=self._sleep,
            clock=self._clock,
            rand=self._rand,
            gate=self.throttle.gate(request),
        )

    def for_provider(self, provider: Provider) -> LocalExecutor:
        """A local executor for ``provider`` with this one's policy, concurrency bound, rate
        caps and injected sleep, clock and randomness (its own throttle: another model has
        its own limits)."""
        return LocalExecutor(
            provider,
            self.policy,
            self.concurrency,
            requests_per_minute=self.requests_per_minute,
            tokens_per_minute=self.tokens_per_minute,
            adaptive=self.adaptive,
            sleep=self._sleep,
            clock=self._clock,
            rand=self._rand,
        )

    async def aclose(self) -> None:
        """Close the provider."""
        await self.provider.aclose()
