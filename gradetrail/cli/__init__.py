"""The command line: thin wiring of the public API; no business logic here.

Exit codes, one table for every command (docs/troubleshooting.md#exit-codes, kept in
:data:`EXIT_CODES`): 0 success, 1 the verdict failed (no sample scored or --min-score
missed; the gate or the sweep did not pass; damage left in the cache), 2 bad usage or
input, or no verdict reached (the gate or a sweep cannot compare; an internal error), 3
stopped resumably (a spending ceiling, a quota, an error every request would repeat),
130 / 143 interrupted by SIGINT / SIGTERM, 141 standard output closed by its reader (a
broken pipe).
"""

from __future__ import annotations

import gc
import importlib
import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from gradetrail._util import gcpause

if TYPE_CHECKING:
    from gradetrail.errors import GradetrailError

#: the exit codes every command keeps to (docs/troubleshooting.md#exit-codes): code -> meaning
EXIT_CODES: dict[int, str] = {
    0: "success",
    1: "the verdict failed",
    2: "bad usage or input, or no verdict reached",
    3: "stopped resumably",
    130: "interrupted by SIGINT (Ctrl-C)",
    141: "standard output closed by its reader (a broken pipe)",
    143: "stopped by SIGTERM",
}

#: command -> the module under gradetrail.cli whose ``register(app)`` adds it, in the
#: order ``--help`` lists them. A command's module is imported only when that command
#: runs (or ``--help`` lists every command), so ``gradetrail run`` never imports the gate,
#: the diff or the viewer.
COMMANDS = {
    "run": "run",
    "schema": "run",
    "runs": "runs",
    "diff": "diff",
    "view": "view",
    "export": "export",
    "gate": "gate",
    "sweep": "sweep",
    "power": "gate",
    "cache": "cache",
    "batches": "batches",
    "split": "split",
    "approve": "approve",
}


class _LazyCommands(TyperGroup):
    """The root command group: builds a command from its module on first use."""

    def list_commands(self, ctx: Any) -> list[str]:
        """Every command's name (importing none)."""
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """The click command ``cmd_name`` (None if there is none), its module imported and
        registered on first use."""
        module = COMMANDS.get(cmd_name)
        if cmd_name not in self.commands and module is not None:
            self.load(module)
        return self.commands.get(cmd_name)

    def load(self, module: str) -> None:
        """Import ``gradetrail.cli.<module>`` and add the commands it registers."""
        sub = typer.Typer(pretty_exceptions_enable=False, rich_markup_mode=None)
        sub.callback()(lambda: None)  # a callback makes typer build a group, even of one
        importlib.import_module(f"gradetrail.cli.{module}").register(sub)
        for name, command in typer.main.get_command(sub).commands.items():  # type: ignore[attr-defined]
            self.commands.setdefault(name, command)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        """As click's, but an unknown name first loads every command, so the "Did you
        mean" suggestion can name any of them."""
        if args and args[0] not in COMMANDS:
            for module in dict.fromkeys(COMMANDS.values()):
                self.load(module)
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: Any) -> Any:
        """As click's, but a broken pipe on standard output (``gradetrail runs | head -1``)
        exits 141 (128 + SIGPIPE, as a command killed by it) with nothing on stderr, where
        click exits 1, the code of a failed verdict; Ctrl-C outside a run exits 130 with one
        line; a gradetrail error no command caught is its one line and exit code; any
        other exception (a bug) its traceback, then one line, exit 2 (no verdict), never 1."""
        from gradetrail.errors import GradetrailError

        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            _silence_stdout()
            raise typer.Exit(141) from None
        except SystemExit as exc:  # rich exits 1 on a broken pipe: from within its except
            if isinstance(exc.__context__, BrokenPipeError):
                _silence_stdout()
                raise typer.Exit(141) from None
            raise
        except KeyboardInterrupt:
            print("error: interrupted", file=sys.stderr)
            raise typer.Exit(130) from None
        except GradetrailError as exc:
            raise fail(exc) from None
        except Exception as exc:
            if _click_error(exc):
                raise
            import traceback

            from gradetrail._util.terminal import one_line

            traceback.print_exc()
            print(
                f"error: internal error: {type(exc).__name__}: {one_line(str(exc))} (a gradetrail "
                "bug: please report it with the traceback above)",
                file=sys.stderr,
            )
            raise typer.Exit(2) from None


def _click_error(exc: BaseException) -> bool:
    """``exc`` is click's own (a usage error, an abort, an exit): click handles it."""
    try:
        from typer._click import exceptions as click_errors
    except ImportError:  # pragma: no cover - older typer
        from click import exceptions as click_errors
    return isinstance(exc, click_errors.ClickException | typer.Abort | typer.Exit)


def _silence_stdout() -> None:
    """Point file descriptor 1 at /dev/null: the reader of the pipe has gone, and what
    is still buffered must not raise again when the interpreter flushes it at exit."""
    import os

    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (AttributeError, OSError, ValueError):
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives until the process ends


app = typer.Typer(
    name="gradetrail",
    cls=_LazyCommands,
    help="LLM evals that behave like tests: declarative, cached, reproducible.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # click's own help: flags without a `<bool>`, brackets as written (`[parquet]`), each
    # paragraph wrapped to the terminal's width
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},  # every command inherits it
)


def _print_version(value: bool) -> None:
    if value:
        from gradetrail._version import __version__

        print(f"gradetrail {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            callback=_print_version,
            is_eager=True,
            help="Print gradetrail's version and exit.",
        ),
    ] = False,
) -> None:
    """LLM evals that behave like tests: declarative, cached, reproducible."""


def fail(error: GradetrailError) -> typer.Exit:
    """Print a gradetrail error as one line per problem on stderr (a spec with three bad
    fields gives three lines; every other error one), each with its line breaks folded and
    terminal escape sequences stripped (messages can quote dataset rows and provider
    replies, which must not print lines of their own); return the Exit to raise with its
    exit code."""
    from gradetrail._util.terminal import one_line

    problems = getattr(error, "problems", None) or [str(error)]
    for problem in problems:
        print(f"error: {one_line(str(problem)) or type(error).__name__}", file=sys.stderr)
    return typer.Exit(error.exit_code)


def main() -> None:
    """Entry point of the ``gradetrail`` command: a usage error is one ``error:`` line on
    stderr naming the fix, with exit code 2 (click's framed box is for terminals of people
    reading help, not for CI logs). Standard output and error write a character their
    encoding cannot (a lone surrogate from a response or a sample id) as its escape
    (``\\ud800``), never crash on it."""
    _reopen_closed_stdio()
    _escape_unencodable()
    gcpause.pause_for(sys.argv)  # `gradetrail run`: until the run starts (see gcpause)
    try:
        _main()
    finally:
        _flush_stdout()
        gcpause.resume()
        # the process ends here, and every object it made with it: spare the interpreter
        # its final full garbage collections (about 0.1 s of CPU after a run of 1,319
        # samples). Files, the cache and the run log are closed by then; atexit still runs.
        gc.freeze()


def _reopen_closed_stdio() -> None:
    """Open /dev/null on standard input, output or error when the process started with it
    closed (``gradetrail run spec.yaml >&-``): else the first file the command opens (a
    result file, the cache) would take that descriptor, and what is written to standard
    output (by a subprocess of the user's code) would land in it; and ``sys.stdout`` is
    None, on which a run's output guard crashed (exit 120, a traceback). What the command
    prints is then discarded and its exit code is its own."""
    import os

    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        null = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        setattr(sys, name, open(fd, "r" if fd == 0 else "w", closefd=False))  # noqa: SIM115


def _flush_stdout() -> None:
    """Flush what the command printed; a reader that has gone (a broken pipe) exits 141,
    as one that goes while the command prints, never "Exception ignored" and code 120."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
        sys.exit(141)
    except (AttributeError, OSError, ValueError):
        pass


def _escape_unencodable() -> None:
    """Make ``sys.stdout`` and ``sys.stderr`` write what they cannot encode as backslash
    escapes where they would raise (``errors="strict"``); a stream that is not a text
    file (a test's capture) is left as it is."""
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")


def _main() -> None:
    try:  # typer vendors click since 0.2x; older releases raise click's own classes
        from typer._click import exceptions as click_errors
    except ImportError:  # pragma: no cover - older typer
        from click import exceptions as click_errors

    try:
        code = app(standalone_mode=False)
    except click_errors.NoArgsIsHelpError as exc:
        help_text = exc.format_message()  # typer's rich help has printed itself already
        if help_text.strip():
            print(help_text)
        sys.exit(2)
    except click_errors.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx else "gradetrail"
        print(f"error: {exc.format_message()} (see {command} --help)", file=sys.stderr)
        sys.exit(2)
    except typer.Abort:
        print("error: aborted", file=sys.stderr)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
