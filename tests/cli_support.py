"""Run the ``gradetrail`` command in this process (its real entry point, ``main()``),
capturing what it prints and its exit code: a hundred refusals cost milliseconds each
instead of a Python start-up each."""

from __future__ import annotations

import contextlib
import io
import sys
from dataclasses import dataclass

from gradetrail.cli import main


@dataclass(frozen=True)
class CliOutcome:
    """Exit code, stdout and stderr of one command."""

    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        """stderr's non-empty lines."""
        return [line for line in self.err.splitlines() if line.strip()]


def run_cli(*args: str) -> CliOutcome:
    """``gradetrail ARGS...`` through :func:`gradetrail.cli.main`."""
    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = ["gradetrail", *args]
    code: int | str | None = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as exc:
        code = exc.code
    finally:
        sys.argv = argv
    return CliOutcome(
        code if isinstance(code, int) else (0 if code is None else 1),
        out.getvalue(),
        err.getvalue(),
    )
