"""An event loop on virtual time, for tests of code that reads the loop's own clock.

:class:`gradetrail.testing.FakeClock` covers code that takes ``clock=`` and ``sleep=``;
what reads ``loop.time()`` instead (``asyncio.timeout``, ``asyncio.sleep``,
``loop.call_later``: the attempt timeouts of :class:`gradetrail.executors.retry.Cutoffs`)
needs the loop itself on a fake clock. :class:`FakeTimeLoop` is that loop: its time
starts at 0.0 and moves only when nothing is ready to run, straight to the next timer
due, so timers fire in deadline order, at once, and at exactly the time they were set
for::

    async def main() -> float:
        await asyncio.sleep(3600)
        return asyncio.get_running_loop().time()

    assert run_on_fake_time(main()) == 3600.0   # in well under a millisecond

Real I/O still works (it is polled without waiting before time moves on), but time does
not wait for it: a test whose timers race a socket or a thread gets the timers first.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _FastForwardSelector(selectors.DefaultSelector):
    """The loop's selector: a wait for I/O with a timeout (the loop has nothing ready
    and a timer due in ``timeout`` seconds) polls instead, and when nothing is ready
    moves the loop's time on to that timer."""

    def __init__(self, loop: FakeTimeLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None or timeout <= 0:  # nothing scheduled (wait for I/O), or a poll
            return super().select(timeout)
        events = super().select(0)
        if not events:
            self._loop._fast_forward()
        return events


class FakeTimeLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose :meth:`time` is virtual: it stands still while
    callbacks run and, when none is ready and no I/O is, jumps to the earliest timer
    instead of sleeping until it.

    Args:
        start: the loop's time at the start, seconds.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        super().__init__(_FastForwardSelector(self))

    def time(self) -> float:
        """The loop's virtual time, seconds."""
        return self._now

    def _fast_forward(self) -> None:
        # set to the timer's own deadline (not now + the select timeout, which rounds),
        # so a timer set for t fires at exactly t; _run_once has just read it off the heap
        if self._scheduled:
            self._now = max(self._now, self._scheduled[0].when())


def run_on_fake_time(main: Coroutine[Any, Any, T], start: float = 0.0) -> T:
    """Run ``main`` to its end on a new :class:`FakeTimeLoop` (as :func:`asyncio.run`
    does on a real one) and return its result.

    Args:
        main: the coroutine to run.
        start: the loop's time at the start, seconds.
    """
    with asyncio.Runner(loop_factory=lambda: FakeTimeLoop(start)) as runner:
        return runner.run(main)
