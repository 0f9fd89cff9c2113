"""``gradetrail cache stats``, ``gradetrail cache check`` and ``gradetrail cache clear``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gradetrail.errors import CacheError, GradetrailError, UsageError

if TYPE_CHECKING:  # the cache is imported by the commands: `gradetrail --help` lists them
    from gradetrail.cache.store import CacheCheck, SetAside

CacheOpt = Annotated[
    Path | None,
    typer.Option("--cache", help="Cache file (default: $GRADETRAIL_CACHE or ~/.cache/gradetrail)."),
]


def _existing(path: Path) -> Path:
    """``path`` if a cache file is there: inspecting or clearing never creates one.

    Raises:
        UsageError: no file at ``path``.
    """
    if not path.is_file():
        raise UsageError(f"no cache at {path}; check --cache or $GRADETRAIL_CACHE")
    return path


def render_check(report: CacheCheck) -> str:
    """The lines ``cache check`` prints: counts, each damaged key (the first 20), the
    structure check and what to do."""
    lines = [f"cache {report.path}: {report.entries} entries, {len(report.damaged)} damaged"]
    for key, reason in report.damaged[:20]:
        lines.append(f"  {key}: {reason}")
    if len(report.damaged) > 20:
        lines.append(f"  ... and {len(report.damaged) - 20} more")
    if report.integrity != ["ok"]:
        lines.append("file structure damaged (SQLite integrity_check):")
        lines += [f"  {line}" for line in report.integrity[:10]]
        lines.append("pass --repair to set the file aside and keep every entry still readable")
    if report.repaired:
        lines.append(f"repaired: deleted {report.repaired} damaged entries; re-runs request them")
    elif report.damaged:
        lines.append("damaged entries are never served; pass --repair to delete them")
    return "\n".join(lines)


def render_set_aside(done: SetAside) -> str:
    """The one line ``cache check --repair`` prints after setting a damaged file aside."""
    lost = "; entries past the damage could not be read" if done.unreadable else ""
    return (
        f"cache {done.path}: the file was damaged; set it aside as {done.aside.name} and "
        f"made a new cache with the {done.kept} entries still readable{lost} (re-runs "
        "request the rest)"
    )


def register(app: typer.Typer) -> None:
    """Add the ``cache`` command group to ``app``."""
    group = typer.Typer(
        help="Inspect or clear the response cache.", no_args_is_help=True, rich_markup_mode=None
    )

    @group.command("stats")
    def stats(cache: CacheOpt = None) -> None:
        """Entries, size and a count per (provider, model)."""
        from rich.console import Console
        from rich.table import Table

        from gradetrail.cache.store import ResponseCache, default_cache_path
        from gradetrail.cli import fail

        try:
            c = ResponseCache(_existing(cache or default_cache_path()), read_only=True)
            s = c.stats()
            c.close()
        except GradetrailError as exc:
            raise fail(exc) from None
        console = Console(soft_wrap=True, highlight=False)
        console.print(f"cache {s.path}: {s.entries} entries, {s.size_bytes / 1e6:.2f} MB")
        if s.by_model:
            table = Table("provider", "model", "entries")
            from rich.markup import escape

            from gradetrail._util.terminal import one_line

            for provider, model, n in s.by_model:
                table.add_row(escape(one_line(provider)), escape(one_line(model)), str(n))
            console.print(table)

    @group.command("check")
    def check(
        cache: CacheOpt = None,
        repair: Annotated[
            bool, typer.Option("--repair", help="Delete damaged entries (they are re-requested).")
        ] = False,
    ) -> None:
        """Verify every entry's checksum and the file's structure; exit 1 on damage left."""
        from gradetrail.cache.store import (
            DAMAGED_FILE,
            ResponseCache,
            default_cache_path,
            set_aside,
        )
        from gradetrail.cli import fail

        path = cache or default_cache_path()
        try:
            try:
                c = ResponseCache(_existing(path))
                try:
                    report = c.check(repair=repair)
                finally:
                    c.close()
            except CacheError as exc:
                if not (repair and DAMAGED_FILE in str(exc)):  # opening or reading it
                    raise
                report = None
            if repair and (report is None or report.integrity != ["ok"]):
                done = set_aside(path)
                print(render_set_aside(done))
                return
        except GradetrailError as exc:
            raise fail(exc) from None
        print(render_check(report))
        if report.integrity != ["ok"] or (report.damaged and not repair):
            raise typer.Exit(1)

    @group.command("clear")
    def clear(
        cache: CacheOpt = None,
        model: Annotated[str | None, typer.Option(help="Only this model's entries.")] = None,
        yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    ) -> None:
        """Delete cached responses (all, or one model's). Exit 1 when the answer to the
        question is no; 2 without --yes when no one can answer (standard input not a
        terminal: CI)."""
        from gradetrail._util.terminal import one_line
        from gradetrail.cache.maintenance import clear_cache
        from gradetrail.cache.store import ResponseCache, default_cache_path
        from gradetrail.cli import fail

        path = cache or default_cache_path()
        what = f"{model}'s entries" if model is not None else "every entry"
        try:
            if model is not None and not model.strip():
                raise UsageError(
                    "cache clear: --model is empty; name a model (`gradetrail cache stats` "
                    "lists them), or leave --model out to delete every entry"
                )
            _existing(path)
            confirmed = yes or typer.confirm(f"Delete {what} from {path}?")
        except GradetrailError as exc:
            raise fail(exc) from None
        except typer.Abort:  # no one to answer (CI, stdin closed): bad usage, as a flag missing
            print(
                "error: nothing deleted: no one to confirm on standard input; pass --yes to "
                "clear without asking",
                file=sys.stderr,
            )
            raise typer.Exit(2) from None
        if not confirmed:  # answered no
            print("error: nothing deleted; pass --yes to clear without asking", file=sys.stderr)
            raise typer.Exit(1)
        try:
            c = ResponseCache(path)
            try:
                done = clear_cache(c, model)
            finally:
                c.close()
        except GradetrailError as exc:
            raise fail(exc) from None
        print(f"deleted {done.deleted} entries from {path}")
        if model is not None and not done.deleted:
            print(
                f"note: no entry is {one_line(model)}'s; `gradetrail cache stats` lists the "
                "models the cache holds",
                file=sys.stderr,
            )
        if done.not_compacted:
            print(
                f"note: the file keeps its size ({done.not_compacted}); new entries reuse the "
                "space freed, and the next `gradetrail cache clear` with room to spare "
                "compacts it",
                file=sys.stderr,
            )

    app.add_typer(group, name="cache")
