"""Standard output while a run calls the user's code (a python provider's function, a
python scorer, an agent's tools): their ``print`` must neither corrupt what the command
prints for machines (``--json``, ``--print-run-dir``) nor, by closing ``sys.stdout``,
break the summary printed after the run."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

__all__ = ["guarded_stdout"]


class _Unclosable(io.TextIOBase):
    """``sys.stdout`` during the run: writes go to ``target``; ``close()`` only flushes,
    so the user's ``sys.stdout.close()`` cannot take the command's stdout with it."""

    def __init__(self, target: TextIO) -> None:
        super().__init__()
        self._target = target

    def write(self, text: str) -> int:
        return self._target.write(text)

    def flush(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._target.flush()

    def close(self) -> None:
        self.flush()

    @property
    def closed(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._target.fileno()

    def isatty(self) -> bool:
        return self._target.isatty()

    def writable(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:  # encoding, errors, buffer...
        return getattr(self._target, name)


@contextlib.contextmanager
def guarded_stdout(to_stderr: bool) -> Iterator[None]:
    """Within: ``sys.stdout`` is a stream whose ``close()`` does nothing, writing to the
    command's stdout, or to stderr when ``to_stderr`` (the command prints JSON or a path
    on stdout after the run). With ``to_stderr``, file descriptor 1 also points at stderr
    within, so a subprocess or C extension the user's code runs cannot write there
    either. Restored on the way out, whatever happened."""
    real = sys.stdout
    target = sys.stderr if to_stderr else real
    saved: int | None = None
    fd = -1
    if to_stderr:
        with contextlib.suppress(AttributeError, OSError, ValueError):
            real.flush()
            fd = real.fileno()
            saved = os.dup(fd)
            os.dup2(sys.stderr.fileno(), fd)
    sys.stdout = _Unclosable(target)
    try:
        yield
    finally:
        with contextlib.suppress(OSError, ValueError):
            sys.stdout.flush()
        sys.stdout = real
        if saved is not None:
            os.dup2(saved, fd)
            os.close(saved)
