"""An outbox of structured events for code that sits below the run's log (a provider).

A provider notices things worth a line in the run's log (a response without usage, a
user function holding its event loop) but cannot import the log, which lives in a higher
layer, and may be built before the run's log exists. It writes them to its own
:class:`Events`, made in its constructor; the run's log, once open, follows that outbox
(:meth:`gradetrail.rundir.runlog.RunLog.follow`): the events kept so far are delivered,
then each new one at once, until the log closes. Nothing is global.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Literal

__all__ = ["EventSink", "Events", "Level"]

Level = Literal["info", "warning"]
#: receives ``(level, event, fields)``
EventSink = Callable[[Level, str, dict[str, Any]], None]


class Events:
    """Events kept until a sink follows them, then forwarded as they come.

    Thread-safe: a provider may emit from a thread of its own (a watchdog).

    Args:
        keep: events kept while no sink follows (the oldest are dropped beyond it).
    """

    def __init__(self, keep: int = 256) -> None:
        self._kept: deque[tuple[Level, str, dict[str, Any]]] = deque(maxlen=keep)
        self._sink: EventSink | None = None
        self._lock = threading.Lock()

    def emit(self, event: str, level: Level = "info", **fields: Any) -> None:
        """Record one event with JSON-ready ``fields``: to the sink, or kept for it."""
        with self._lock:
            sink = self._sink
            if sink is None:
                self._kept.append((level, event, fields))
                return
        sink(level, event, fields)

    def follow(self, sink: EventSink) -> None:
        """Deliver the kept events to ``sink``, then every new one, until :meth:`stop`."""
        with self._lock:
            kept, self._kept = list(self._kept), deque(maxlen=self._kept.maxlen)
            self._sink = sink
        for level, event, fields in kept:
            sink(level, event, fields)

    def stop(self) -> None:
        """Stop forwarding; later events are kept again."""
        with self._lock:
            self._sink = None

    def __reduce__(self) -> tuple[type[Events], tuple[int]]:
        # a provider shipped to another process (a Ray worker) starts an empty outbox
        # there: its sink (the driver's log file) cannot travel
        return (Events, (self._kept.maxlen or 256,))
