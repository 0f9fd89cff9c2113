"""Responses that arrived when the cache could not store them, kept until it can.

When a write to the cache fails mid-run (its disk is full, say), every response that has
arrived, and those still in flight, are paid for. The run stops starting new samples and
appends each such response to ``pending-cache.jsonl`` in its run directory (one JSON
object a line: key, provider, model, the stored text and its checksum). The next run of
the same spec (the same run directory) stores them in the cache before anything else,
checksums verified, and deletes the file once all are in, so nothing paid for is asked
for again. If the results disk is full too, a response that fits nowhere is counted in
``manifest.cache.lost``.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import IO

from gradetrail.cache.store import ResponseCache, checksum
from gradetrail.errors import CacheError, RunError
from gradetrail.rundir.layout import RunDir
from gradetrail.rundir.results import PENDING_FILE

__all__ = ["PendingResponses", "restore_pending"]


class PendingResponses:
    """The run directory's ``pending-cache.jsonl``, opened on the first response kept.

    Args:
        run_dir: the open run directory.

    Attributes:
        kept: responses written to the file.
    """

    def __init__(self, run_dir: RunDir) -> None:
        self.run_dir = run_dir
        self.kept = 0
        self._file: IO[str] | None = None

    def keep(self, key: str, provider: str, model: str, text: str, check: str) -> bool:
        """Append one response (flushed and fsynced); False when it cannot be written."""
        line = json.dumps(
            {"key": key, "provider": provider, "model": model, "text": text, "checksum": check}
        )
        try:
            if self._file is None:
                self._file = self.run_dir.open_text(PENDING_FILE, append=True)
            self._file.write(line + "\n")
            self._file.flush()
            os.fsync(self._file.fileno())
        except (OSError, RunError):
            return False
        self.kept += 1
        return True

    def close(self) -> None:
        """Close the file (idempotent; a failed flush has already been reported)."""
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None


def restore_pending(run_dir: RunDir, cache: ResponseCache) -> int:
    """Store the responses an earlier run of this run directory kept in
    ``pending-cache.jsonl``, then delete the file. A line that is torn or fails its
    checksum is skipped (its request is made again).

    Returns:
        How many responses were stored.

    Raises:
        CacheError: the cache still cannot be written (the file is kept for next time).
    """
    try:
        fd = run_dir.open_fd(PENDING_FILE, os.O_RDONLY)
    except RunError:
        return 0
    with os.fdopen(fd, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    stored = 0
    for line in lines:
        try:
            entry = json.loads(line)
            key, text, check = entry["key"], entry["text"], entry["checksum"]
            provider, model = entry["provider"], entry["model"]
        except (ValueError, KeyError, TypeError):
            continue
        if not isinstance(text, str) or check != checksum(str(key), text):
            continue
        try:
            cache.store(str(key), str(provider), str(model), text, check)
        except CacheError as exc:
            raise CacheError(
                f"{exc}; {len(lines)} responses an earlier run paid for wait in "
                f"{run_dir.path / PENDING_FILE}: free space and run the same command again"
            ) from None
        stored += 1
    run_dir.remove(PENDING_FILE)
    return stored
