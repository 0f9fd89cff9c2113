"""``gradetrail view``: serve the read-only web viewer of a results root."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add ``view`` to ``app``."""
    app.command("view")(view)


def view(
    results_root: Annotated[
        Path, typer.Argument(help="The directory holding run directories.")
    ] = Path("results"),
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="Port to listen on (0: any free port).")
    ] = 8765,
    host: Annotated[
        str, typer.Option(help="Address to listen on; other than loopback only on purpose.")
    ] = "127.0.0.1",
) -> None:
    """Serve a read-only viewer of the runs under RESULTS_ROOT and print its URL."""
    from gradetrail.cli import fail
    from gradetrail.errors import GradetrailError, UsageError

    try:
        from gradetrail.view.server import serve
    except ImportError as exc:
        raise fail(
            UsageError(
                f"the viewer needs its extra ({exc.name} is missing): "
                "pip install 'gradetrail[view]'"
            )
        ) from None
    try:
        serve(results_root, host=host, port=port)
    except GradetrailError as exc:
        raise fail(exc) from None
