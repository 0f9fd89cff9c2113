"""``gradetrail sweep``: run every cell of a sweep (models x prompts x ...) and print one
table with each candidate's paired, multiplicity-corrected verdict against the baseline."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gradetrail.cli.options import (
    CacheOption,
    ExecutorOption,
    NoCacheOption,
    check_report_paths,
)
from gradetrail.errors import GradetrailError, UsageError

if TYPE_CHECKING:
    from gradetrail.spec.sweep import SweepSpec

__all__ = ["check_max_cost", "register", "run_loaded"]


def register(app: typer.Typer) -> None:
    """Add ``sweep`` to ``app``."""
    app.command("sweep")(sweep)


def sweep(
    sweep_file: Annotated[Path, typer.Argument(help="The sweep file (YAML).")],
    baseline: Annotated[
        str | None,
        typer.Option(help="The baseline cell (its name, or a label only one cell has)."),
    ] = None,
    candidate: Annotated[
        str | None,
        typer.Option(help="Exit 0 only if this cell passes (default: if any candidate does)."),
    ] = None,
    correction: Annotated[
        str | None,
        typer.Option(help="holm, bonferroni or none (default: the sweep file's, else holm)."),
    ] = None,
    cache: CacheOption = None,
    no_cache: NoCacheOption = False,
    results_root: Annotated[
        Path, typer.Option("--results-root", help="Where run directories are written.")
    ] = Path("results"),
    executor: ExecutorOption = "local",
    address: Annotated[
        str | None,
        typer.Option(help="With --executor ray: auto, or HOST:PORT of the head node."),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(help="With --executor ray: Ray workers making each cell's calls."),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="List what would be called, and its estimated cost."),
    ] = False,
    allow_partial: Annotated[
        bool,
        typer.Option(
            "--allow-partial", help="Gate cells that did not complete, on shared samples."
        ),
    ] = False,
    max_cost: Annotated[
        float | None,
        typer.Option(
            "--max-cost",
            help="A hard ceiling on what the whole sweep spends, USD (the sweep file's "
            "max_cost_usd): no call starts that could pass it.",
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the table as JSON.")] = False,
    markdown: Annotated[
        Path | None, typer.Option(help="Also write the table as Markdown to this file.")
    ] = None,
    junit: Annotated[
        Path | None, typer.Option(help="Also write every comparison as JUnit XML to this file.")
    ] = None,
    github: Annotated[
        bool,
        typer.Option("--github", help="Append the table to $GITHUB_STEP_SUMMARY; annotate."),
    ] = False,
) -> None:
    """Run a sweep's cells (complete ones are not run again) and gate them against the
    baseline: exit 0 a candidate passed (or --candidate did), 1 none, 2 bad input, a cell
    that failed or cells that cannot be compared, 3 stopped at run.max_cost_usd, the
    sweep's --max-cost or a provider's stop, 130 / 143 interrupted."""
    from gradetrail.cli import fail
    from gradetrail.spec.sweep import load_sweep

    try:
        loaded = load_sweep(sweep_file)
    except GradetrailError as exc:
        raise fail(exc) from None
    if max_cost is not None:
        loaded = loaded.with_max_cost(check_max_cost(max_cost))
    run_loaded(
        loaded,
        baseline=baseline,
        candidate=candidate,
        correction=correction,
        cache=cache,
        no_cache=no_cache,
        results_root=results_root,
        executor=executor,
        address=address,
        workers=workers,
        dry_run=dry_run,
        allow_partial=allow_partial,
        json_out=json_out,
        markdown=markdown,
        junit=junit,
        github=github,
    )


def run_loaded(
    loaded: SweepSpec,
    *,
    baseline: str | None = None,
    candidate: str | None = None,
    correction: str | None = None,
    cache: Path | None = None,
    no_cache: bool = False,
    results_root: Path = Path("results"),
    executor: str = "local",
    address: str | None = None,
    workers: int | None = None,
    dry_run: bool = False,
    allow_partial: bool = False,
    json_out: bool = False,
    markdown: Path | None = None,
    junit: Path | None = None,
    github: bool = False,
) -> None:
    """Run a loaded sweep and print its table (``gradetrail sweep`` and ``gradetrail run
    --models``); raises typer.Exit with the exit code."""
    from gradetrail._util.terminal import clean
    from gradetrail.analysis.sweep import sweep_table
    from gradetrail.cli import fail
    from gradetrail.engine.sweep import dry_run as plan_dry_run
    from gradetrail.engine.sweep import run_sweep
    from gradetrail.report.sweep import dry_run_lines, sweep_lines, sweep_markdown

    if executor not in ("local", "ray"):
        raise typer.BadParameter(
            f"unknown executor {executor!r}; use local or ray", param_hint="--executor"
        )
    if executor == "local" and (address is not None or workers is not None):
        raise typer.BadParameter(
            "--address and --workers are for --executor ray", param_hint="--executor"
        )
    if correction not in (None, "holm", "bonferroni", "none"):
        raise typer.BadParameter("use holm, bonferroni or none", param_hint="--correction")
    try:
        check_report_paths({"--junit": junit, "--markdown": markdown})
        if baseline is not None:
            loaded.find(baseline, "--baseline")
        if candidate is not None:
            loaded.candidate_cell(candidate, "--candidate", baseline)
        if dry_run:
            cells = plan_dry_run(
                loaded, results_root=results_root, cache_path=cache, allow_partial=allow_partial
            )
            if json_out:
                from dataclasses import asdict

                print(json.dumps([asdict(c) for c in cells], indent=2))
            else:
                for line in dry_run_lines(cells):
                    print(line)
            raise typer.Exit(0)
        chosen = None
        if executor == "ray":
            from gradetrail.executors.ray import RayOptions

            chosen = RayOptions(address=address, workers=workers)

        from gradetrail.cli.userstdout import guarded_stdout

        progress = _CellProgress()
        try:
            with guarded_stdout(to_stderr=json_out):  # the user's prints: never in the JSON
                done = run_sweep(
                    loaded,
                    results_root=results_root,
                    cache_path=cache,
                    use_cache=not no_cache,
                    executor_options=chosen,
                    allow_partial=allow_partial,
                    on_cell=progress.cell_done,
                    on_start=progress.start,
                    on_row=progress.row,
                    on_interrupt=progress.interrupt,
                )
        except GradetrailError as exc:
            raise _stopped(exc, loaded, results_root, json_out) from None
        finally:
            progress.close()
        # the budget or a provider quota that ran out, as `run` says it
        if done.interrupted and done.stop_reason is not None:
            if json_out:
                _print_stop(done.record, done.directory, "interrupted", None, done.stop_reason)
            cells = done.record.cells
            stopped = next((c.name for c in cells if c.outcome == "interrupted"), "?")
            print(f"error: cell {stopped}: {clean(done.stop_reason)}", file=sys.stderr)
            raise typer.Exit(3)
        if done.interrupted:
            if json_out:
                _print_stop(done.record, done.directory, "interrupted", done.stop_signal, None)
            print(
                "error: the sweep was interrupted; run the same command again to finish it "
                "(nothing answered is paid twice)",
                file=sys.stderr,
            )
            raise typer.Exit(143 if done.stop_signal == "SIGTERM" else 130)
        table = sweep_table(
            done.directory,
            baseline=baseline,
            correction=correction,
            allow_partial=allow_partial,
        )
        passed = table.passed(candidate)
    except GradetrailError as exc:
        raise fail(exc) from None
    except ValueError as exc:
        raise fail(UsageError(str(exc))) from None
    if json_out:
        print(json.dumps({"passed": passed, "status": "complete", **table.to_dict()}, indent=2))
    else:
        for line in sweep_lines(table):
            print(line)
    report = sweep_markdown(table) if (markdown is not None or github) else ""
    try:
        if markdown is not None:  # never through a link planted at the name, as the gate's
            from gradetrail._util.outfiles import write_file

            write_file(markdown, report.encode("utf-8", "backslashreplace"))
        if junit is not None:
            from gradetrail.ci.junit import gate_junit, write_junit

            write_junit(gate_junit(table.family()), junit)
        if github:
            from gradetrail.ci.github import append_step_summary

            append_step_summary(report)
            what = f"cell {candidate}" if candidate else "any candidate"
            verdict = "passed" if passed else "did not pass"
            kind = "notice" if passed else "error"
            annotation = f"::{kind} title=gradetrail sweep {table.name}::{what} {verdict}"
            print(annotation, file=sys.stderr if json_out else sys.stdout)  # --json: JSON only
    except OSError as exc:
        raise fail(UsageError(f"cannot write the sweep report: {exc}")) from None
    raise typer.Exit(0 if passed else 1)


def _stopped(
    exc: GradetrailError, loaded: SweepSpec, results_root: Path, json_out: bool
) -> typer.Exit:
    """The exit for a sweep a cell's error ended (fail-fast, a run directory that cannot
    be written, the cache): its line, with ``--json`` the cells as its record has them,
    and the error's exit code, but 2 where that is 1: with a cell missing, the sweep
    reached no verdict, and 1 says no candidate passed (before, a CI step read a broken
    cell as a failed migration)."""
    from gradetrail.cli import fail
    from gradetrail.rundir.sweep import read_sweep_record, sweep_dir

    if json_out:
        directory = sweep_dir(results_root, loaded.name)
        try:
            record = read_sweep_record(directory)
        except GradetrailError:  # stopped before its record was written: nothing was done
            record = None
        if record is not None:
            from gradetrail._util.terminal import one_line

            _print_stop(record, directory, "failed", None, one_line(str(exc)))
    fail(exc)
    return typer.Exit(2 if exc.exit_code == 1 else exc.exit_code)


def _print_stop(
    record: Any, directory: Path, status: str, signal: str | None, reason: str | None
) -> None:
    """``--json`` for a sweep that stopped before its table: no verdict (``passed`` null),
    ``status`` (``interrupted``: a signal or a ceiling, resumable; ``failed``: a cell's
    error), ``stop_signal`` and ``stop_reason`` as a run's manifest names them, and each
    cell's name, model, run directory and outcome (``existing``, ``ran``, ``interrupted``,
    ``failed``, ``pending``: not started)."""
    out = {
        "passed": None,
        "status": status,
        "stop_signal": signal,
        "stop_reason": reason,
        "name": record.name,
        "directory": str(directory),
        "axes": list(record.axes),
        "baseline": record.baseline,
        "cells": [
            {
                "name": c.name,
                "labels": list(c.labels),
                "model": c.model,
                "run_dir": c.run_dir,
                "identity_hash": c.identity_hash,
                "outcome": c.outcome,
            }
            for c in record.cells
        ],
    }
    print(json.dumps(out, indent=2))


def check_max_cost(value: float) -> float:
    """``--max-cost``: a positive finite number of USD, or a usage error (exit 2)."""
    import math

    if not math.isfinite(value) or value <= 0:
        raise typer.BadParameter("must be a positive number of USD", param_hint="--max-cost")
    return value


class _CellProgress:
    """The running cell's progress bar (as ``gradetrail run``'s), and a line a cell done."""

    def __init__(self) -> None:
        self.bar: Any = None

    def start(self, plan: Any, run_dir: Path) -> None:
        """A cell's run begins: a bar over its rows."""
        from gradetrail.cli.progress import RunProgress

        self.close()
        self.bar = RunProgress(len(plan.prepared)).__enter__()

    def row(self, row: Any, tally: Any) -> None:
        """A row landed."""
        if self.bar is not None:
            self.bar.update(row, tally)

    def interrupt(self, kind: str, signal_name: str, in_flight: int) -> None:
        """Ctrl-C or SIGTERM: say what happens to the requests in flight."""
        if self.bar is None:
            return
        if kind == "drain":
            self.bar.note(
                f"{signal_name}: starting no new samples or cells; waiting for {in_flight} "
                "in flight (Ctrl-C again to stop now)"
            )
        else:
            self.bar.note(f"{signal_name}: stopping now; cancelling {in_flight} in flight")

    def cell_done(self, cell: Any, outcome: str, result: Any) -> None:
        """A cell ended (or was complete already): one line on stderr."""
        self.close()
        print(f"cell {cell.cell.name}: {outcome}", file=sys.stderr)

    def close(self) -> None:
        """Take the bar down."""
        if self.bar is not None:
            bar, self.bar = self.bar, None
            bar.__exit__(None, None, None)
