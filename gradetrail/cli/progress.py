"""Live progress of a run: a rich bar on a terminal, a plain line every few seconds
elsewhere (CI logs).

Both show done/total, the rate over the last 30 seconds (so a resume that starts with a
burst of cache hits does not promise a wrong ETA), the ETA, cache hits, errors so far and
the cost so far. Output problems (a closed pipe, ``gradetrail run 2>&1 | head``) switch
the progress off; they never stop the run.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable
from typing import TextIO

from gradetrail._util.terminal import one_line
from gradetrail.rundir.manifest import paid_usd
from gradetrail.rundir.results import Row
from gradetrail.rundir.summary import Tally

__all__ = ["RunProgress", "format_duration"]


def _cost(tally: Tally) -> str:
    """USD paid so far, the judge's calls included (:func:`paid_usd`): ``unknown`` once a
    paid row has no known price, n/a while nothing is priced."""
    judge = tally.judge
    paid = paid_usd(
        {
            "cost_usd": tally.cost_usd,
            "unpriced_rows": tally.unpriced_rows,
            "judge": {"cost_usd": judge.cost_usd, "unpriced_rows": judge.totals["unpriced_rows"]},
        }
    )
    if paid is None:
        return "unknown" if tally.unpriced_rows or judge.totals["unpriced_rows"] else "n/a"
    return f"${paid:.4f}"


def format_duration(seconds: float | None) -> str:
    """``"42s"``, ``"3m05s"``, ``"2h07m"``; ``"?"`` when unknown (None or infinite)."""
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "?"
    s = max(int(round(seconds)), 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class _Rate:
    """Rows per second over a sliding window of (time, rows done) points, from the first
    finished row on: the time before it (a Ray cluster starting, the first connection,
    the plan) is not a rate, so no ETA is promised from it."""

    def __init__(self, start: float, window_s: float) -> None:
        self.window_s = window_s
        self.start = start
        self.points: deque[tuple[float, int]] = deque()

    def add(self, now: float, done: int) -> None:
        if not self.points:  # the first finished rows: where the rate is measured from
            self.points.append((now, done))
            return
        if now - self.points[-1][0] >= 0.25:
            self.points.append((now, done))
        while len(self.points) > 2 and now - self.points[1][0] >= self.window_s:
            self.points.popleft()

    def per_s(self, now: float, done: int) -> float:
        if not self.points:
            return 0.0
        t0, d0 = self.points[0]
        span = now - t0
        return (done - d0) / span if span > 0 else 0.0


class RunProgress:
    """Shows done/total, rate, ETA, cache hits, errors and cost so far.

    Args:
        total: rows the run will produce.
        stream: where to write (stderr by default).
        interval_s: seconds between plain lines off a terminal.
        clock: monotonic seconds (injected for tests).
        window_s: seconds of history the rate and ETA are computed over.
    """

    def __init__(
        self,
        total: int,
        stream: TextIO | None = None,
        interval_s: float = 5.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        window_s: float = 30.0,
    ) -> None:
        self.total = total
        self.stream = stream or sys.stderr
        self.interval_s = interval_s
        self.clock = clock
        self.tty = _isatty(self.stream)
        self._start = clock()
        self._last = self._start
        self._rate = _Rate(self._start, window_s)
        self._tally: Tally | None = None
        self._bar = None
        self._task = None
        self._broken = False
        self._printed = 0  # rows shown by the last plain line

    def __enter__(self) -> RunProgress:
        if self.tty:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._bar = Progress(
                TextColumn("[bold]run"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]}/s"),
                TimeElapsedColumn(),
                TextColumn("eta {task.fields[eta]}"),
                TextColumn("{task.fields[info]}"),
                console=Console(file=self.stream),
                transient=True,
            )
            self._guard(self._bar.start)
            self._task = self._bar.add_task("run", total=self.total, rate="0.0", eta="?", info="")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._guard(self._bar.stop)
        elif self._printed and self._tally is not None and self._tally.rows != self._printed:
            # a run long enough to have shown progress also shows where it ended
            self._write(self.line(self._tally, self.clock()))

    def line(self, tally: Tally, now: float) -> str:
        """The plain progress line, e.g. ``progress 120/1319 (9%, 40.1/s, eta 30s) cache
        hits 100 errors 2 cost $0.0123``."""
        rate = self._rate.per_s(now, tally.rows)
        # floor, so 199 of 200 reads 99%, never a premature 100%
        pct = 100 * tally.rows // self.total if self.total else 100
        return (
            f"progress {tally.rows}/{self.total} ({pct:.0f}%, {rate:.1f}/s, "
            f"eta {format_duration(self._eta(tally, rate))}) cache hits {tally.cache_hits} "
            f"errors {tally.errors} cost {_cost(tally)}"
        )

    def _eta(self, tally: Tally, rate: float) -> float | None:
        remaining = self.total - tally.rows
        if remaining <= 0:
            return 0.0
        return remaining / rate if rate > 0 else None

    def update(self, row: Row, tally: Tally) -> None:
        """Count one finished row (cheap: redraws at most 10 times a second)."""
        now = self.clock()
        self._tally = tally
        self._rate.add(now, tally.rows)
        if self._broken:
            return
        if self._bar is not None:
            if now - self._last < 0.1 and tally.rows < self.total:
                return
            self._last = now
            rate = self._rate.per_s(now, tally.rows)
            info = f"cache hits {tally.cache_hits}  errors {tally.errors}  cost {_cost(tally)}"
            self._guard(
                self._bar.update,
                self._task,
                completed=tally.rows,
                rate=f"{rate:.1f}",
                eta=format_duration(self._eta(tally, rate)),
                info=info,
            )
        elif now - self._last >= self.interval_s:
            self._last = now
            self._write(self.line(tally, now))
            self._printed = tally.rows

    def note(self, text: str) -> None:
        """Print a message as one line (above the bar on a terminal); escape sequences are
        stripped and line breaks folded."""
        if self._bar is not None:
            self._guard(self._bar.console.print, one_line(text), markup=False, highlight=False)
        else:
            self._write(one_line(text))

    def _write(self, text: str) -> None:
        if self._broken:
            return
        try:
            print(text, file=self.stream, flush=True)
        except (OSError, ValueError):  # closed pipe or stream: stop showing progress
            self._broken = True

    def _guard(self, fn: Callable[..., object], *args: object, **kwargs: object) -> None:
        if self._broken:
            return
        try:
            fn(*args, **kwargs)
        except (OSError, ValueError):
            self._broken = True


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
