"""Live progress of a run: a rich bar on a terminal, a plain line every few seconds
elsewhere (CI logs)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from gradetrail.results import SampleResult
from gradetrail.summary import Tally

__all__ = ["RunProgress"]


def _cost(tally: Tally) -> str:
    return "n/a" if tally.cost_usd is None else f"${tally.cost_usd:.4f}"


class RunProgress:
    """Shows done/total, rate, ETA, cache hits, errors and cost so far.

    Args:
        total: rows the run will produce.
        stream: where to write (stderr by default).
        interval_s: seconds between plain lines off a terminal.
    """

    def __init__(self, total: int, stream: TextIO | None = None, interval_s: float = 5.0) -> None:
        self.total = total
        self.stream = stream or sys.stderr
        self.interval_s = interval_s
        self.tty = self.stream.isatty()
        self._start = time.monotonic()
        self._last = self._start
        self._bar = None
        self._task = None

    def __enter__(self) -> RunProgress:
        if self.tty:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                TextColumn("[bold]run"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]}/s"),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                TextColumn("{task.fields[info]}"),
                console=Console(file=self.stream),
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task("run", total=self.total, rate="0", info="")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def update(self, row: SampleResult, tally: Tally) -> None:
        """Count one finished row."""
        now = time.monotonic()
        elapsed = max(now - self._start, 1e-9)
        if self._bar is not None:
            if now - self._last < 0.1 and tally.rows < self.total:
                return
            self._last = now
            info = f"cache {tally.cache_hits}  errors {tally.errors}  cost {_cost(tally)}"
            self._bar.update(
                self._task, completed=tally.rows, rate=f"{tally.rows / elapsed:.1f}", info=info
            )
        elif now - self._last >= self.interval_s:
            self._last = now
            rate = tally.rows / elapsed
            eta = (self.total - tally.rows) / rate if rate > 0 else float("inf")
            print(
                f"progress {tally.rows}/{self.total} ({rate:.1f}/s, eta {eta:.0f}s) "
                f"cache hits {tally.cache_hits} errors {tally.errors} cost {_cost(tally)}",
                file=self.stream,
                flush=True,
            )
