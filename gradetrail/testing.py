"""Fakes for testing evals and gradetrail itself without waiting.

:class:`FakeClock` is an injectable clock and sleep pair: ``sleep`` records each delay,
advances the clock by it and returns at once, so backoff, Retry-After pauses and
per-sample ceilings can be checked exactly::

    clock = FakeClock()
    executor = LocalExecutor(provider, policy, 4, sleep=clock.sleep, clock=clock.now)
    ...
    assert clock.slept == [3.0, 3.0]   # two 429s with Retry-After: 3
"""

from __future__ import annotations

import asyncio

__all__ = ["FakeClock"]


class FakeClock:
    """A monotonic clock that only moves when something sleeps on it.

    Args:
        start: the initial time, seconds.

    Attributes:
        slept: every delay passed to :meth:`sleep`, in order, seconds.
    """

    def __init__(self, start: float = 1000.0) -> None:
        self.time = start
        self.slept: list[float] = []

    def now(self) -> float:
        """The current fake time, seconds (use as ``clock=``)."""
        return self.time

    async def sleep(self, seconds: float) -> None:
        """Record ``seconds``, advance the clock by it, and yield to the event loop once
        (use as ``sleep=``)."""
        self.slept.append(seconds)
        self.time += max(seconds, 0.0)
        await asyncio.sleep(0)
