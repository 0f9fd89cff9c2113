"""Options several commands share, defined once (their names, types and help)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["CacheOption", "ExecutorOption", "NoCacheOption"]

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
