"""Synchronous code of the run's own choosing (a scorer, a user's Python scorer or tool),
run on the event loop's thread with a time bound and within reach of signals.

Why not a worker thread: CPython's ``re`` engine (and other C code) runs without
releasing the GIL, so while a thread sits in a catastrophic backtrack (``^(a+)+$`` on a
long response) the loop's thread cannot run either, and neither can the SIGINT/SIGTERM
handling asyncio does there. A process pool would cost a pickle and a round trip per
sample. Instead the call stays on the loop's thread, where Python runs signal handlers
between bytecodes and the ``re`` engine checks for them as it matches (every few
thousand steps), and :class:`BoundedCalls` installs, for the run:

- a ``SIGALRM`` timer (``setitimer``): a call still running after ``timeout_s`` is
  interrupted with :class:`CallTimedOut`. The timer is armed by a call and left running
  after it, not re-armed for every call (two system calls a score, most of a fast
  scorer's bound): each call records its own deadline, and an alarm that comes before the
  running call's deadline (it was armed by an earlier call) re-arms the timer for the rest
  of it; one that comes between calls disarms it;
- Python-level SIGINT/SIGTERM handlers (next to asyncio's own, which still see every
  signal through the loop's wakeup file descriptor) that, while a call runs, interrupt
  it with :class:`CallAborted` when the signal means *abort* (SIGTERM, or a second Ctrl-C):
  the loop then cancels the run as it would have, and the process exits 130/143. A first
  Ctrl-C (*drain*) lets the call finish or time out.

The run's :class:`BoundedCalls` is also :data:`CURRENT` while it is entered, for
synchronous code that runs deep inside a sample rather than as its scorer (a judge's
verdict parser, whose spec ``parse.pattern`` may backtrack), so it is bounded the same
way.

Only the main thread can receive signals, so outside it (``run_eval`` called from a
thread) calls run unbounded. Code in a C extension that never checks for signals is not
interrupted either; Python code and the standard library's ``re`` are.
"""

from __future__ import annotations

import contextlib
import contextvars
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["CURRENT", "BoundedCalls", "CallAborted", "CallTimedOut"]

T = TypeVar("T")


class CallTimedOut(Exception):
    """A bounded call ran past its time bound (raised inside it by SIGALRM)."""


class CallAborted(BaseException):
    """A bounded call was interrupted by SIGTERM or a second Ctrl-C. A BaseException, so
    a scorer's ``except Exception`` cannot swallow it."""


class BoundedCalls:
    """Time-bounded, signal-interruptible synchronous calls on the loop's thread, for one run.

    Args:
        timeout_s: seconds one call may take (None: no time bound, signals still reach).
        stopping: returns True once the run is stopping (a first Ctrl-C was handled), so
            that any further SIGINT aborts.
        clock: monotonic seconds, for the calls' deadlines (injected for tests).

    Use as a context manager around the run (it installs and restores the handlers), and
    :meth:`call` for each call.
    """

    def __init__(
        self,
        timeout_s: float | None,
        stopping: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.timeout_s = timeout_s
        self._stopping = stopping
        self._clock = clock
        self._armed = False  # the SIGALRM timer is running
        self._deadline = 0.0  # the running call's, on the clock
        self._active = False
        self._sigints = 0
        self._saved: dict[int, Any] = {}
        #: the signal that aborted a call (``"SIGTERM"``, ``"SIGINT"``), or None
        self.aborted_by: str | None = None
        self.enabled = threading.current_thread() is threading.main_thread()

    def __enter__(self) -> BoundedCalls:
        self._token = CURRENT.set(self)
        if not self.enabled:
            return self
        for sig in (signal.SIGALRM, signal.SIGINT, signal.SIGTERM):
            previous = signal.getsignal(sig)
            if sig != signal.SIGALRM and previous in (
                signal.SIG_DFL,
                signal.SIG_IGN,
                signal.default_int_handler,
                None,
            ):
                continue  # nobody routes this signal to the run: leave it alone
            self._saved[sig] = previous
            signal.signal(sig, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(ValueError):  # exited in another context: nothing to undo
            CURRENT.reset(self._token)
        self._armed = False
        with contextlib.suppress(ValueError, OSError):
            signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, previous in self._saved.items():
            # asyncio may have restored its own defaults meanwhile: only undo our handler
            if signal.getsignal(sig) == self._handler:
                signal.signal(sig, previous)
        self._saved.clear()

    def _handler(self, sig: int, frame: Any) -> None:
        if sig == signal.SIGALRM:
            self._armed = False
            if not self._active:
                return  # armed by a call that has ended: left disarmed until the next
            left = self._deadline - self._clock()
            if left > 0:  # armed by an earlier call: this one's bound ends later
                self._arm(max(left, 0.001))
                return
            raise CallTimedOut
        self._interrupt(sig, frame)

    def _arm(self, seconds: float) -> None:
        self._armed = True
        signal.setitimer(signal.ITIMER_REAL, seconds)

    def _interrupt(self, sig: int, frame: Any) -> None:
        """SIGINT or SIGTERM: the previous handler, then abort the call if it means to."""
        previous = self._saved.get(sig)
        if callable(previous):  # asyncio's no-op, or an application's own handler
            previous(sig, frame)
        if not self._active:
            return
        if sig == signal.SIGINT:
            self._sigints += 1
        if sig == signal.SIGTERM or self._stopping() or self._sigints >= 2:
            self.aborted_by = signal.Signals(sig).name
            raise CallAborted(self.aborted_by)

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``, interrupted after :attr:`timeout_s` or by an abort signal.

        Raises:
            CallTimedOut: the call took longer than the bound.
            CallAborted: SIGTERM or a second Ctrl-C arrived during the call.
        """
        if not self._saved:
            return fn(*args)
        timeout = self.timeout_s
        bounded = timeout is not None and signal.SIGALRM in self._saved
        self._sigints = 0
        if bounded:
            self._deadline = self._clock() + timeout  # type: ignore[operator]
        self._active = True  # before the check: an alarm now re-arms for this call
        try:
            if bounded and not self._armed:
                self._arm(timeout)  # type: ignore[arg-type]
            return fn(*args)
        finally:
            self._active = False


#: the run's :class:`BoundedCalls` while it is entered (None outside a run)
CURRENT: contextvars.ContextVar[BoundedCalls | None] = contextvars.ContextVar(
    "gradetrail_bounded", default=None
)
