"""``progress.json``: how far a run is, in one small JSON object an orchestrator (or an
agent driving an optimisation loop) reads in one go while the run is going.

The runner rewrites it when the run starts, every :data:`EVERY_S` seconds while it goes
and when it ends, in the run directory and, with ``run.progress_file``, at that path too.
Each write is atomic (a temporary file renamed over it: a reader sees the old object or
the new one, never half of one) and never follows a symlink (see
:class:`~gradetrail.rundir.layout.RunDir`). The object::

    {"status": "running", "done": 120, "total": 400, "ok": 117, "failed": 3,
     "cache_hits": 40, "truncated": 2, "cost_usd": 0.0123, "cost_usd_unscored": 0.0004,
     "elapsed_s": 12.5, "eta_s": 29.2, "run_dir": "...", "pid": 4242,
     "updated_at": "2026-01-01T00:00:00.000+00:00"}

``done``/``total`` count rows (samples x epochs); ``ok`` rows scored, ``failed`` rows in
an error state; ``elapsed_s`` and ``eta_s`` are seconds (``eta_s`` is null until a row
is done, and estimated from the rate so far: a resumed run's cache hits make it
optimistic at first); costs are USD; ``status`` is the manifest's at the end.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gradetrail._util.outfiles import written_in_place
from gradetrail.errors import RunError
from gradetrail.rundir.layout import RunDir
from gradetrail.rundir.manifest import now_iso

if TYPE_CHECKING:
    from gradetrail.rundir.summary import Tally

__all__ = ["EVERY_S", "PROGRESS_FILE", "ProgressFile", "read_progress"]

PROGRESS_FILE = "progress.json"
#: seconds between two writes while a run goes
EVERY_S = 2.0


class ProgressFile:
    """Writes a run's progress object (see the module docstring).

    Args:
        run_dir: the open run directory (``progress.json`` is written there).
        total: the run's rows (samples x epochs).
        also: another path to write the same object to (``run.progress_file``), or None;
            its directory is created if missing, and neither it nor the file may be a
            symlink.
        clock: seconds, monotonic (for ``elapsed_s``).
    """

    def __init__(
        self,
        run_dir: RunDir,
        total: int,
        also: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.run_dir = run_dir
        self.total = total
        self.also = also
        self._clock = clock
        self._started = clock()
        self._also_dir: RunDir | None = None

    def snapshot(self, tally: Tally, status: str = "running") -> dict[str, Any]:
        """The progress object for ``tally`` now."""
        elapsed = self._clock() - self._started
        done = tally.rows
        eta = None
        if done > 0 and elapsed > 0:
            eta = round(max(self.total - done, 0) / (done / elapsed), 3)
        return {
            "status": status,
            "done": done,
            "total": self.total,
            "ok": tally.counts["scored"],
            "failed": tally.errors,
            "cache_hits": tally.cache_hits,
            "truncated": tally.truncated,
            "cost_usd": tally.cost_usd,
            "cost_usd_unscored": tally.cost_usd_unscored,
            "elapsed_s": round(elapsed, 3),
            "eta_s": eta if status == "running" else 0.0,
            "run_dir": str(self.run_dir.path),
            "pid": os.getpid(),
            "updated_at": now_iso(),
        }

    def write(self, tally: Tally, status: str = "running", *, strict: bool = False) -> None:
        """Rewrite the file(s) with the progress now. A write that fails (a full disk) is
        skipped unless ``strict`` (progress is advice; the run goes on). A symlink planted
        at a progress file is replaced by the rename, its target never written; with
        ``strict`` (the run's first write) it refuses the run instead.

        Raises:
            RunError: with ``strict``: a symlink in the way, or the file cannot be written.
        """
        text = json.dumps(self.snapshot(tally, status), ensure_ascii=False) + "\n"
        try:
            if strict and self.also is not None and self.also.is_symlink():
                raise RunError(f"{self.also}: refusing to write: is a symlink")
            self.run_dir.write_atomic(PROGRESS_FILE, text)
            if self.also is not None:
                self._check_also()
                if self._also_dir is None:
                    self._also_dir = RunDir.create(self.also.parent)
                self._also_dir.write_atomic(self.also.name, text)
        except RunError:
            if strict:
                raise

    def _check_also(self) -> None:
        """Refuse a character device, a FIFO, a directory, a block device or a socket at
        ``run.progress_file``: the rename would put a regular file in place of
        ``/dev/null`` (as root) or of a named pipe, and a file polled for progress is
        rewritten whole, never streamed into one.

        Raises:
            RunError: naming the path and what is there.
        """
        try:
            special = written_in_place(self.also)  # type: ignore[arg-type]
        except OSError as exc:
            raise RunError(f"{self.also}: refusing to write: {exc.strerror}") from None
        if special:
            raise RunError(
                f"{self.also}: refusing to write: a device or a FIFO, not a file; name a "
                "file for run.progress_file"
            )

    def close(self) -> None:
        """Close the other path's directory."""
        if self._also_dir is not None:
            self._also_dir.close()
            self._also_dir = None


def read_progress(path: Path | str) -> dict[str, Any]:
    """A progress file's object (``path`` is the file, or a run directory holding one).

    Raises:
        RunError: it does not exist or is not a progress object.
    """
    path = Path(path)
    if path.is_dir():
        path = path / PROGRESS_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise RunError(f"{path}: cannot read the progress file ({exc})") from None
    if not isinstance(data, dict) or "done" not in data:
        raise RunError(f"{path} is not a progress file")
    return data
