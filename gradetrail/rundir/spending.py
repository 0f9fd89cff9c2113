"""The run directory's spending record, ``spending.jsonl``: what every process of a run
paid, so ``run.max_cost_usd`` holds across re-runs of the run (a ``kill -9`` included).

One line a paid call or collected batch, ``{"usd": USD}``, appended as it is settled
(written through to the operating system at once: a killed process loses none). A torn
last line is ignored, and so is a value that is not a finite positive number (a line
planted to lift the ceiling: ``-1000`` or ``NaN`` would have). The file is read without
following a symlink, and one that is not a regular file of one link is refused.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from pathlib import Path

from gradetrail._util.outfiles import append_file
from gradetrail.errors import RunError

#: never follow a symlink planted in the run directory, nor wait on a FIFO planted there
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)

__all__ = ["SPENDING_FILE", "SpendingLog"]

SPENDING_FILE = "spending.jsonl"


class SpendingLog:
    """``spending.jsonl`` of the run directory ``path`` (which may not exist yet)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path) / SPENDING_FILE

    def total(self) -> float:
        """USD recorded so far (0 when there is no record); lines whose ``usd`` is not a
        finite positive number count as nothing.

        Raises:
            RunError: the record is a symlink, not a regular file (a FIFO would block the
                read for good), has another hard link, or cannot be read.
        """
        fix = "remove it, or pass --results-root with another directory"
        try:
            fd = os.open(self.path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK)
        except FileNotFoundError:
            return 0.0
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
        total = 0.0
        for line in raw.splitlines():
            try:
                usd = json.loads(line)["usd"]
            except (ValueError, KeyError, TypeError):
                continue  # a torn last line
            if type(usd) in (int, float) and math.isfinite(usd) and usd > 0:
                total += usd
        return total

    def add(self, usd: float) -> None:
        """Record ``usd`` paid (nothing for 0).

        Raises:
            OSError: it cannot be written (the disk full; a symlink, FIFO, directory or
                hard link put at the name since the run began: see
                :func:`~gradetrail._util.outfiles.append_file`).
        """
        if usd <= 0:
            return
        append_file(self.path, json.dumps({"usd": round(usd, 12)}).encode() + b"\n")
