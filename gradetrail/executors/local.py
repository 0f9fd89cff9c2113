"""The local executor: provider calls on this process's asyncio loop."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable

from gradetrail.executors.base import Executor
from gradetrail.providers.base import Provider, Request
from gradetrail.retry import CallOutcome, RetryPolicy, call_with_retry

__all__ = ["LocalExecutor"]


class LocalExecutor(Executor):
    """Calls the provider in-process, at most ``concurrency`` requests in flight.

    Args:
        provider: the run's provider.
        policy: the retry policy.
        concurrency: requests in flight at most.
        sleep, clock, rand: injected for tests (defaults: asyncio.sleep, time.monotonic,
            random.random).
    """

    def __init__(
        self,
        provider: Provider,
        policy: RetryPolicy,
        concurrency: int,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.provider = provider
        self.policy = policy
        self.concurrency = concurrency
        self._sleep, self._clock, self._rand = sleep, clock, rand
        self._slots: asyncio.Semaphore | None = None

    async def complete(self, request: Request) -> CallOutcome:
        """Call the provider with retries, holding one of ``concurrency`` slots."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.concurrency)
        async with self._slots:
            return await call_with_retry(
                lambda: self.provider.complete(request),
                self.policy,
                sleep=self._sleep,
                clock=self._clock,
                rand=self._rand,
            )

    def for_provider(self, provider: Provider) -> LocalExecutor:
        """A local executor for ``provider`` with this one's policy, concurrency bound and
        injected sleep, clock and randomness."""
        return LocalExecutor(
            provider,
            self.policy,
            self.concurrency,
            sleep=self._sleep,
            clock=self._clock,
            rand=self._rand,
        )

    async def aclose(self) -> None:
        """Close the provider."""
        await self.provider.aclose()
