"""The run directory's spending record, ``spending.jsonl``: what every process of a run
paid, so ``run.max_cost_usd`` holds across re-runs of the run (a ``kill -9`` included).

One line a paid call or collected batch, ``{"usd": USD}``, appended as it is settled
(written through to the operating system at once: a killed process loses none). A torn
last line is ignored.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

#: never follow a symlink planted in the run directory
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

__all__ = ["SPENDING_FILE", "SpendingLog"]

SPENDING_FILE = "spending.jsonl"


class SpendingLog:
    """``spending.jsonl`` of the run directory ``path`` (which may not exist yet)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path) / SPENDING_FILE

    def total(self) -> float:
        """USD recorded so far (0 when there is no record)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return 0.0
        total = 0.0
        for line in raw.splitlines():
            try:
                total += float(json.loads(line)["usd"])
            except (ValueError, KeyError, TypeError):
                continue  # a torn last line
        return total

    def add(self, usd: float) -> None:
        """Record ``usd`` paid (nothing for 0)."""
        if usd <= 0:
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW, 0o644)
        try:
            os.write(fd, json.dumps({"usd": round(usd, 12)}).encode() + b"\n")
        finally:
            os.close(fd)
