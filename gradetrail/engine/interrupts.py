"""Stopping a run cleanly: Ctrl-C (SIGINT) and SIGTERM on the run's event loop.

- The first Ctrl-C *drains*: no new (sample, epoch) is started, the requests in flight
  finish and their rows land, and the run ends with manifest status ``interrupted``.
- A second Ctrl-C, or SIGTERM (what CI runners and ``timeout`` send before a kill),
  *aborts*: the requests in flight are cancelled at once (a response that already
  arrived is in the cache; its row is not written) and the run ends ``interrupted``.
- A third Ctrl-C meets Python's default handler again (``KeyboardInterrupt``), so a run
  that hangs while closing can still be stopped.

Handlers are installed only in the main thread and only over the default handlers (as
they were when the :class:`Interrupts` was made, before ``asyncio.run`` put its own
SIGINT handler in), so an application that set its own keeps it.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Literal

__all__ = ["Interrupts", "StopKind", "deferred_signals"]

StopKind = Literal["drain", "abort"]


class Interrupts:
    """Signal handling for one run (install on the run's loop, uninstall at its end).

    Make it before ``asyncio.run`` (it notes which handlers are still the defaults), then
    :meth:`install` inside the loop.

    Args:
        on_signal: called with ``("drain" | "abort", signal name)`` when a signal arrives
            (the CLI prints what happens next).

    Attributes:
        stopping: True once a signal asked the run to stop starting new samples.
        on_stop: called (no arguments) when the first signal arrives, before
            ``on_signal``: the run's drain switch (requests not yet sent are not sent).
        signal_name: ``"SIGINT"`` or ``"SIGTERM"``: the last signal received, or None.
    """

    def __init__(self, on_signal: Callable[[StopKind, str], None] | None = None) -> None:
        self.on_signal = on_signal
        self.on_stop: list[Callable[[], None]] = []
        self.stopping = False
        self.signal_name: str | None = None
        self._task: asyncio.Task[object] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._installed: list[signal.Signals] = []
        self._eligible: list[signal.Signals] = []
        if threading.current_thread() is threading.main_thread():
            defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
            self._eligible = [s for s, d in defaults.items() if signal.getsignal(s) is d]

    def install(self, task: asyncio.Task[object]) -> None:
        """Route SIGINT and SIGTERM to this run; ``task`` is cancelled on abort. A no-op
        outside the main thread or where a non-default handler was set."""
        self._task = task
        self._loop = task.get_loop()
        for sig in self._eligible:
            try:
                self._loop.add_signal_handler(sig, self._received, sig)
            except (NotImplementedError, RuntimeError, ValueError):  # Windows: no loop handlers
                signal.signal(sig, lambda s, _f: self._loop.call_soon_threadsafe(self._received, s))
            self._installed.append(sig)

    def uninstall(self) -> None:
        """Restore the default handlers this object replaced (idempotent)."""
        while self._installed:
            sig = self._installed.pop()
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                if self._loop is not None and self._loop.remove_signal_handler(sig):
                    continue
            default = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
            signal.signal(sig, default)

    def _received(self, sig: int) -> None:
        self.signal_name = signal.Signals(sig).name
        kind: StopKind = "abort" if self.stopping or sig == signal.SIGTERM else "drain"
        if not self.stopping:
            for stopped in self.on_stop:
                stopped()
        self.stopping = True
        if kind == "abort":
            self.uninstall()
            if self._task is not None:
                self._task.cancel()
        if self.on_signal is not None:
            self.on_signal(kind, self.signal_name)


@contextlib.contextmanager
def deferred_signals() -> Iterator[list[str]]:
    """Hold SIGINT and SIGTERM back while the block runs (the run's final rewrite of its
    results and manifest, which a signal must not cut in half, leaving ``running`` and
    ``.tmp`` files): while it runs they are only recorded, and the yielded list names
    them afterwards (the run was finishing anyway). The block takes as long as writing
    its files does; ``kill -9`` still ends it. A no-op outside the main thread (only the
    main thread can set handlers, and only it runs them)."""
    arrived: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield arrived
        return

    def record(sig: int, _frame: object) -> None:
        arrived.append(signal.Signals(sig).name)

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in saved:
        signal.signal(sig, record)
    try:
        yield arrived
    finally:
        for sig, previous in saved.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
