"""Options several commands share, defined once (their names, types and help)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = [
    "AllowDifferentScorersOption",
    "CacheOption",
    "ExecutorOption",
    "NoCacheOption",
    "check_report_paths",
]

#: ``--cache FILE``: the response cache to use
CacheOption = Annotated[
    Path | None,
    typer.Option(help="Cache file (default: $GRADETRAIL_CACHE or ~/.cache/gradetrail)."),
]
#: ``--no-cache``: neither read nor write the cache
NoCacheOption = Annotated[
    bool, typer.Option("--no-cache", help="Neither read nor write the cache.")
]
#: ``--executor local|ray``: where provider calls run
ExecutorOption = Annotated[
    str, typer.Option(help="Where provider calls run: local, or ray (Ray workers).")
]
#: ``--allow-different-scorers``: compare runs scored differently (``gate``, ``diff``)
AllowDifferentScorersOption = Annotated[
    bool,
    typer.Option(
        "--allow-different-scorers",
        help="Compare runs scored differently (target, scorer settings, judge file).",
    ),
]


def check_report_paths(paths: dict[str, Path | None]) -> None:
    """Refuse, before any work (a gate, a sweep's paid cells), a report path (``--junit``,
    ``--markdown``: flag -> path, None when not given) no file can be written at. Before,
    the gate printed its verdict and the sweep ran every cell, then exited 2 on the write.

    Raises:
        UsageError: one line naming the flag, the path and what is wrong (exit 2).
    """
    from gradetrail._util.outfiles import check_writable
    from gradetrail.errors import UsageError

    for flag, path in paths.items():
        if path is None:
            continue
        try:
            check_writable(path)
        except OSError as exc:
            raise UsageError(f"{flag} {path}: cannot write ({exc.strerror or exc})") from None
