"""The command line: thin wiring of the public API; no business logic here.

Exit codes: 0 success (at least one sample scored; gate passed), 1 failure (no sample
scored; gate failed; a provider or cache error that stops a run), 2 bad spec or usage
(and gate: cannot compare), 130 interrupted (Ctrl-C), 143 stopped by SIGTERM.
"""

from __future__ import annotations

import sys

import typer

from gradetrail.errors import GradetrailError

app = typer.Typer(
    name="gradetrail",
    help="LLM evals that behave like tests: declarative, cached, reproducible.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def fail(error: GradetrailError) -> typer.Exit:
    """Print a gradetrail error as one line (per problem) on stderr, terminal escape
    sequences stripped (messages can quote dataset rows and provider replies); return the
    Exit to raise with its exit code."""
    from gradetrail.terminal import clean

    for line in clean(str(error)).splitlines() or [type(error).__name__]:
        print(f"error: {line}", file=sys.stderr)
    return typer.Exit(error.exit_code)


def _register() -> None:
    from gradetrail.cli import cache, run, runs

    run.register(app)
    runs.register(app)
    cache.register(app)
    try:
        from gradetrail.cli import gate
    except ImportError:  # pragma: no cover - during development only
        return
    gate.register(app)


_register()


def main() -> None:
    """Entry point of the ``gradetrail`` command."""
    app()
