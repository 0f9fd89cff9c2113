"""What the local and the Ray executor share: each request under the run's retry policy,
every attempt through one :class:`~gradetrail.executors.limits.Throttle` (AIMD in-flight
limit on 429s, rate caps, the server's Retry-After pause). Only where one attempt runs
differs (:meth:`RetryingExecutor.attempt`).
"""

from __future__ import annotations

import asyncio
import random
import time
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any

from gradetrail.executors.base import Executor
from gradetrail.executors.limits import Throttle, ThrottleStats
from gradetrail.executors.retry import AttemptListener, CallOutcome, RetryPolicy, call_with_retry
from gradetrail.providers.base import Provider, Request, Response

__all__ = ["RetryingExecutor"]


class RetryingExecutor(Executor):
    """Retries and admission control around :meth:`attempt`.

    Args:
        provider: the provider whose calls this executor runs.
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

    def settings(self) -> dict[str, Any]:
        """The keyword arguments that build an executor like this one (rate caps,
        adaptivity, injected time), for :meth:`for_provider`."""
        return {
            "requests_per_minute": self.requests_per_minute,
            "tokens_per_minute": self.tokens_per_minute,
            "adaptive": self.adaptive,
            "sleep": self._sleep,
            "clock": self._clock,
            "rand": self._rand,
        }

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

    @abstractmethod
    def attempt(self, request: Request) -> Awaitable[Response]:
        """One call of the provider for ``request`` (awaitable).

        Raises:
            ProviderError: the classified failure (the retry policy decides what next).
        """

    def complete(  # not async: it hands back the retry loop's coroutine
        self, request: Request, on_attempt: AttemptListener | None = None
    ) -> Coroutine[Any, Any, CallOutcome]:
        """Serve ``request`` with retries; each attempt passes the throttle, and
        ``on_attempt`` hears of each failed one as it ends. Returns the retry loop's own
        coroutine (to await at once, on the running loop): one coroutine a call, not two."""
        return call_with_retry(
            partial(self.attempt, request),
            self.policy,
            sleep=self._sleep,
            clock=self._clock,
            rand=self._rand,
            gate=self.throttle.gate(request),
            on_attempt=on_attempt,
        )
