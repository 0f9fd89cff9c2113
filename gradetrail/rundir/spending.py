"""The run directory's spending record, ``spending.jsonl``: what every process of a run
paid, so ``run.max_cost_usd`` holds across re-runs of the run (a ``kill -9`` included).

One line a paid call or collected batch, ``{"usd": USD}``, appended as it is settled
(written through to the operating system at once: a killed process loses none). An online
call is recorded before it starts as well, ``{"call": ID, "reserved_usd": USD}`` (its worst
case), and its settling line names it (``{"usd": USD, "call": ID}``, 0 for an error); a
collected batch's line names it (``{"usd": USD, "call": "batch:SUBMISSION"}``) and counts
once however often it is written (collected again after a kill before the batch ledger
said so: its largest line); a
call reserved and never settled (its process was killed, or stopped while the call was in
flight: the provider may have billed it) counts at its worst case, so spend in flight at a
kill is not lost to the ceiling. A torn last line is ignored, and so is a value that is
not a finite positive number (a line planted to lift the ceiling: ``-1000`` or ``NaN``
would have). The file is read without following a symlink, and one that is not a regular
file of one link is refused.
"""

from __future__ import annotations

import errno
import itertools
import json
import math
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from gradetrail._util.outfiles import append_file
from gradetrail.errors import RunError

#: never follow a symlink planted in the run directory, nor wait on a FIFO planted there
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)

__all__ = ["SPENDING_FILE", "Spending", "SpendingLog"]

SPENDING_FILE = "spending.jsonl"


@dataclass(frozen=True)
class Spending:
    """What a run's ``spending.jsonl`` records.

    Attributes:
        paid_usd: USD settled: paid calls and collected batches.
        in_flight_usd: USD of the worst cases of online calls reserved and never settled
            (in flight when their process was killed or stopped: they may have been
            billed).
        calls_in_flight: how many such calls.
    """

    paid_usd: float = 0.0
    in_flight_usd: float = 0.0
    calls_in_flight: int = 0

    @property
    def total_usd(self) -> float:
        """What counts against the ceiling: paid, plus the worst case of calls never
        settled."""
        return self.paid_usd + self.in_flight_usd


def _usd(value: object) -> float:
    """``value`` as USD when it is a finite positive number, else 0 (a planted ``NaN`` or
    ``-1000`` counts as nothing)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0.0
    return float(value) if math.isfinite(value) and value > 0 else 0.0


class SpendingLog:
    """``spending.jsonl`` of the run directory ``path`` (which may not exist yet)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path) / SPENDING_FILE
        #: names this process's reservations apart from other processes' of the same run
        self._process = f"{os.getpid()}-{secrets.token_hex(4)}"
        self._calls = itertools.count(1)

    def total(self) -> float:
        """USD counted against the ceiling so far, :attr:`Spending.total_usd` of
        :meth:`read` (0 when there is no record).

        Raises:
            RunError: as :meth:`read`.
        """
        return self.read().total_usd

    def read(self) -> Spending:
        """What the record holds (nothing when there is no record); amounts that are not
        finite positive numbers count as nothing.

        Raises:
            RunError: the record is a symlink, not a regular file (a FIFO would block the
                read for good), has another hard link, or cannot be read.
        """
        fix = "remove it, or pass --results-root with another directory"
        try:
            fd = os.open(self.path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK)
        except FileNotFoundError:
            return Spending()
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise RunError(f"{self.path}: is a symlink; refusing to read it ({fix})") from None
            raise RunError(f"{self.path}: cannot read ({exc.strerror})") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            os.close(fd)
            what = "has another hard link" if stat.S_ISREG(st.st_mode) else "is not a regular file"
            raise RunError(f"{self.path}: {what}; refusing to read it ({fix})")
        with os.fdopen(fd, "rb") as f:
            raw = f.read()
        paid = 0.0
        batches: dict[str, float] = {}  # a batch collected twice (a kill between) once
        reserved: dict[str, float] = {}  # open reservations only: a call's settling line
        for line in raw.splitlines():  # comes after its reservation's (both appended)
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a torn last line
            if not isinstance(entry, dict):
                continue
            call = entry.get("call")
            if "reserved_usd" in entry:
                if isinstance(call, str):
                    reserved[call] = _usd(entry["reserved_usd"])
                continue
            if "usd" in entry:
                if isinstance(call, str) and call.startswith("batch:"):
                    usd = _usd(entry["usd"])  # its largest line: a planted 0 lowers nothing
                    batches[call] = max(batches.get(call, 0.0), usd)
                    continue
                paid += _usd(entry["usd"])
                if isinstance(call, str):
                    reserved.pop(call, None)
        paid += math.fsum(batches.values())
        return Spending(paid, math.fsum(reserved.values()), len(reserved))

    def reserve(self, usd: float) -> str:
        """Record an online call about to start, reserving ``usd`` (its worst case); return
        the call's id, for :meth:`add` when it settles.

        Raises:
            OSError: as :meth:`add`.
        """
        call = f"{self._process}-{next(self._calls)}"
        entry = {"call": call, "reserved_usd": round(usd, 12)}
        append_file(self.path, json.dumps(entry).encode() + b"\n")
        return call

    def add(self, usd: float, call: str | None = None) -> None:
        """Record ``usd`` paid (nothing for 0, unless it settles the reserved ``call``:
        then the line closes the reservation).

        Raises:
            OSError: it cannot be written (the disk full; a symlink, FIFO, directory or
                hard link put at the name since the run began: see
                :func:`~gradetrail._util.outfiles.append_file`).
        """
        if usd <= 0 and call is None:
            return
        entry: dict[str, object] = {"usd": round(max(usd, 0.0), 12)}
        if call is not None:
            entry["call"] = call
        append_file(self.path, json.dumps(entry).encode() + b"\n")
