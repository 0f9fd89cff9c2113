"""The local executor: provider calls on this process's asyncio loop."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from gradetrail.executors.retry import RetryPolicy
from gradetrail.executors.retrying import RetryingExecutor
from gradetrail.providers.base import Provider, Request, Response

__all__ = ["LocalExecutor"]


class LocalExecutor(RetryingExecutor):
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
        self, provider: Provider, policy: RetryPolicy, concurrency: int, **settings: Any
    ) -> None:
        super().__init__(provider, policy, concurrency, **settings)
        provider.size_pool(concurrency)

    def attempt(self, request: Request) -> Awaitable[Response]:
        """The provider's own call, on this event loop."""
        return self.provider.complete(request)

    def for_provider(self, provider: Provider) -> LocalExecutor:
        """A local executor for ``provider`` with this one's policy, concurrency bound, rate
        caps and injected sleep, clock and randomness (its own throttle: another model has
        its own limits)."""
        return LocalExecutor(provider, self.policy, self.concurrency, **self.settings())

    async def aclose(self) -> None:
        """Close the provider."""
        await self.provider.aclose()
