"""``gradetrail cache stats`` and ``gradetrail cache clear``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gradetrail.cache import ResponseCache, default_cache_path
from gradetrail.errors import GradetrailError

CacheOpt = Annotated[
    Path | None,
    typer.Option("--cache", help="Cache file (default: $GRADETRAIL_CACHE or ~/.cache/gradetrail)."),
]


def register(app: typer.Typer) -> None:
    """Add the ``cache`` command group to ``app``."""
    group = typer.Typer(help="Inspect or clear the response cache.", no_args_is_help=True)

    @group.command("stats")
    def stats(cache: CacheOpt = None) -> None:
        """Entries, size and a count per (provider, model)."""
        from rich.console import Console
        from rich.table import Table

        from gradetrail.cli import fail

        try:
            c = ResponseCache(cache or default_cache_path())
            s = c.stats()
            c.close()
        except GradetrailError as exc:
            raise fail(exc) from None
        console = Console(soft_wrap=True, highlight=False)
        console.print(f"cache {s.path}: {s.entries} entries, {s.size_bytes / 1e6:.2f} MB")
        if s.by_model:
            table = Table("provider", "model", "entries")
            for provider, model, n in s.by_model:
                table.add_row(provider, model, str(n))
            console.print(table)

    @group.command("clear")
    def clear(
        cache: CacheOpt = None,
        model: Annotated[str | None, typer.Option(help="Only this model's entries.")] = None,
        yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    ) -> None:
        """Delete cached responses (all, or one model's)."""
        from gradetrail.cli import fail

        path = cache or default_cache_path()
        what = f"{model}'s entries" if model else "every entry"
        if not yes and not typer.confirm(f"Delete {what} from {path}?"):
            raise typer.Exit(1)
        try:
            c = ResponseCache(path)
            n = c.clear(model)
            c.close()
        except GradetrailError as exc:
            raise fail(exc) from None
        print(f"deleted {n} entries from {path}")

    app.add_typer(group, name="cache")
