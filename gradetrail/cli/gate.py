"""``gradetrail gate`` (the regression gate) and ``gradetrail power`` (planning n)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from gradetrail import stats
from gradetrail.errors import GradetrailError, UsageError
from gradetrail.gate import GateResult, regression_gate

__all__ = ["register"]

_SHOWN_IDS = 10
_METHOD_NAMES = {
    "tango": "Tango score interval (paired binary)",
    "t": "paired t",
    "z": "paired z",
}


class MethodChoice(StrEnum):
    """--method values."""

    auto = "auto"
    tango = "tango"
    t = "t"
    z = "z"


class ErrorsChoice(StrEnum):
    """--errors values."""

    refuse = "refuse"
    as_fail = "as-fail"
    exclude = "exclude"


def register(app: typer.Typer) -> None:
    """Add ``gate`` and ``power`` to ``app``."""
    app.command("gate")(gate)
    app.command("power")(power)


def gate(
    baseline: Annotated[Path, typer.Argument(help="The baseline run directory.")],
    candidate: Annotated[Path, typer.Argument(help="The candidate run directory.")],
    margin: Annotated[
        float, typer.Option(min=0, help="Non-inferiority margin: pass iff lower bound >= -margin.")
    ] = 0.02,
    confidence: Annotated[
        float, typer.Option(min=0, max=1, help="Two-sided confidence of the interval.")
    ] = 0.95,
    method: Annotated[
        MethodChoice, typer.Option(help="auto: tango for binary, one epoch, no clusters; else t.")
    ] = MethodChoice.auto,
    errors: Annotated[
        ErrorsChoice,
        typer.Option(help="Rows in an error state: refuse, score as-fail (0), or exclude."),
    ] = ErrorsChoice.refuse,
    allow_different_data: Annotated[
        bool, typer.Option("--allow-different-data", help="Pair runs of different datasets.")
    ] = False,
    allow_partial: Annotated[
        bool,
        typer.Option(
            "--allow-partial",
            help="Gate runs that did not complete or whose samples differ, on the shared ones.",
        ),
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    junit: Annotated[
        Path | None, typer.Option(help="Also write the verdict as JUnit XML to this file.")
    ] = None,
    markdown: Annotated[
        Path | None, typer.Option(help="Also write a Markdown report to this file.")
    ] = None,
    github: Annotated[
        bool,
        typer.Option(
            "--github",
            help="Print GitHub annotations; append the report to $GITHUB_STEP_SUMMARY.",
        ),
    ] = False,
) -> None:
    """Gate a candidate run against a baseline: exit 0 pass, 1 fail, 2 cannot compare."""
    from gradetrail.cli import fail

    reports = _Reports(junit, markdown, github)
    try:
        result = regression_gate(
            baseline,
            candidate,
            margin=margin,
            confidence=confidence,
            method=method.value,
            errors=errors.value,
            allow_different_data=allow_different_data,
            allow_partial=allow_partial,
        )
    except GradetrailError as exc:
        reports.cannot_compare(str(exc))
        raise fail(exc) from None
    if json_out:
        print(json.dumps(result.to_dict()))
    else:
        print_gate(result)
    reports.verdict(result)
    raise typer.Exit(0 if result.passed else 1)


class _Reports:
    """The CI outputs the gate was asked for: --junit, --markdown, --github."""

    def __init__(self, junit: Path | None, markdown: Path | None, github: bool) -> None:
        self.junit, self.markdown, self.github = junit, markdown, github

    def verdict(self, result: GateResult) -> None:
        from gradetrail.ci import github, junit, markdown
        from gradetrail.ci.runs import gate_run_warnings

        warnings = gate_run_warnings(result) if self.markdown or self.github else {}
        self._write(
            junit.gate_junit(result) if self.junit else None,
            markdown.gate_markdown(result, warnings) if self.markdown or self.github else "",
            github.gate_annotations(result, warnings) if self.github else [],
        )

    def cannot_compare(self, message: str) -> None:
        from gradetrail.ci import github, junit, markdown

        self._write(
            junit.cannot_compare_junit(message) if self.junit else None,
            markdown.cannot_compare_markdown(message),
            [github.cannot_compare_annotation(message)] if self.github else [],
        )

    def _write(self, document: Any, report: str, annotations: list[str]) -> None:
        from gradetrail.ci.github import append_step_summary
        from gradetrail.ci.junit import write_junit
        from gradetrail.cli import fail

        try:
            if self.junit is not None:
                write_junit(document, self.junit)
            if self.markdown is not None:
                self.markdown.write_text(report, encoding="utf-8")
            if self.github:
                append_step_summary(report)
        except OSError as exc:
            raise fail(UsageError(f"cannot write the gate report: {exc}")) from None
        for line in annotations:
            print(line)


def _num(x: float | None, digits: int = 4) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{x:+.{digits}f}"


def _ids(ids: tuple[str, ...]) -> str:
    shown = ", ".join(ids[:_SHOWN_IDS])
    more = f", … {len(ids) - _SHOWN_IDS} more (--json lists all)" if len(ids) > _SHOWN_IDS else ""
    return f"{len(ids)}: {shown}{more}"


def print_gate(result: GateResult, console: Console | None = None) -> None:
    """The gate's table: n, clusters, epochs, means, discordant counts, the interval, verdict."""
    console = console or Console(highlight=False)
    r = result
    table = Table(title="regression gate (non-inferiority)", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("baseline", r.baseline)
    table.add_row("candidate", r.candidate)
    table.add_row("samples (n)", str(r.n))
    table.add_row("clusters", "none" if r.n_clusters is None else str(r.n_clusters))
    table.add_row("epochs", f"{r.epochs[0]} baseline, {r.epochs[1]} candidate")
    table.add_row("baseline mean", f"{r.baseline_mean:.4f}")
    table.add_row("candidate mean", f"{r.candidate_mean:.4f}")
    if r.only_baseline is not None:
        table.add_row("only baseline passed", str(r.only_baseline))
        table.add_row("only candidate passed", str(r.only_candidate))
    table.add_row("mean difference", f"{_num(r.delta)} (candidate - baseline)")
    table.add_row("standard error", f"{_num(r.se).lstrip('+')} (of the paired difference)")
    table.add_row(f"{r.confidence:.0%} interval", f"[{_num(r.lo)}, {_num(r.hi)}]")
    table.add_row("correlation", _num(r.correlation, 3))
    table.add_row("margin", f"{r.margin:g} (pass iff lower bound >= {-r.margin:g})")
    clustered = ", clustered" if r.n_clusters is not None else ""
    table.add_row("method", f"{_METHOD_NAMES[r.method]}{clustered}")
    if r.mcnemar_p is not None:
        table.add_row("McNemar exact p", f"{r.mcnemar_p:.3g}")
    for label, ids in (
        ("only in baseline", r.missing_in_candidate),
        ("only in candidate", r.missing_in_baseline),
    ):
        if ids:
            table.add_row(label, f"{_ids(ids)} (not paired)")
    if r.n_errors_handled:
        how = "scored 0" if r.errors == "as-fail" else "excluded from both runs"
        table.add_row("error samples", f"{_ids(r.errored_samples)} ({how})")
    table.add_row("verdict", "[green]PASS[/green]" if r.passed else "[red]FAIL[/red]")
    console.print(table)
    for warning in r.warnings:
        console.print(f"warning: {warning}")


def power(
    delta: Annotated[
        float | None, typer.Option(help="Difference to detect: print the samples needed.")
    ] = None,
    n: Annotated[
        int | None, typer.Option("--n", help="Samples: print the minimum detectable effect.")
    ] = None,
    half_width: Annotated[
        float | None, typer.Option(help="Interval half-width to reach: print the samples needed.")
    ] = None,
    omega2: Annotated[
        float | None,
        typer.Option(help="Variance of the per-sample score difference (Miller's omega^2)."),
    ] = None,
    variance: Annotated[
        float | None,
        typer.Option(help="Each model's per-sample score variance (p(1-p) for pass rate p)."),
    ] = None,
    correlation: Annotated[
        float, typer.Option(min=-1, max=1, help="Correlation of the two models' scores.")
    ] = 0.0,
    epochs: Annotated[int, typer.Option(min=1, help="Epochs per sample.")] = 1,
    within_variance: Annotated[
        float, typer.Option(min=0, help="Variance of one epoch's score around its sample mean.")
    ] = 0.0,
    cluster_size: Annotated[float, typer.Option(min=1, help="Mean samples per cluster.")] = 1.0,
    icc: Annotated[float, typer.Option(min=-1, max=1, help="Intra-cluster correlation.")] = 0.0,
    alpha: Annotated[float, typer.Option(help="Two-sided significance level.")] = 0.05,
    power_: Annotated[float, typer.Option("--power", help="Power (1 - beta).")] = 0.8,
    json_out: Annotated[bool, typer.Option("--json", help="Print the answer as JSON.")] = False,
) -> None:
    """Plan an eval's size: samples needed to detect --delta, or the effect --n can detect.

    Miller (arXiv 2411.00640) eq. 9-10. Give --omega2, or --variance with --correlation.
    """
    given = (delta, half_width, omega2, variance, correlation, within_variance, alpha, power_)
    if any(v is not None and not math.isfinite(v) for v in given):
        raise typer.BadParameter("every number must be finite (not nan or inf)")
    if sum(v is not None for v in (delta, n, half_width)) != 1:
        raise typer.BadParameter("give exactly one of --delta, --n, --half-width")
    if (omega2 is None) == (variance is None):
        raise typer.BadParameter("give --omega2, or --variance (with --correlation)")
    try:
        if omega2 is None:
            omega2 = stats.difference_variance(variance, correlation)  # type: ignore[arg-type]
        plan = stats.plan_power(
            omega2,
            delta=delta,
            n=n,
            half_width=half_width,
            within_variance=within_variance,
            epochs=epochs,
            design_effect=stats.design_effect(cluster_size, icc),
            alpha=alpha,
            power=power_,
        )
    except (ValueError, ArithmeticError) as exc:
        raise typer.BadParameter(f"no answer for these numbers ({exc})") from None
    if json_out:
        print(json.dumps(asdict(plan)))
    else:
        print_power(plan)


def print_power(plan: stats.PowerPlan) -> None:
    """The planning answer in one line, then the assumptions it rests on."""
    if plan.solved_for == "delta":
        print(f"minimum detectable effect with n = {plan.n}: {plan.delta:.4f}")
    elif plan.half_width is not None:
        level = f"{1 - plan.alpha:.0%}"
        print(f"n = {plan.n} samples for a {level} interval half-width of {plan.half_width:g}")
    else:
        print(f"n = {plan.n} samples to detect a difference of {plan.delta:g}")
    notes = [f"omega^2 = {plan.omega2:.4g}", f"alpha = {plan.alpha:g}"]
    if plan.power is not None:
        notes.append(f"power = {plan.power:g}")
    if plan.epochs > 1 or plan.within_variance:
        notes.append(f"{plan.epochs} epochs, within-sample variance {plan.within_variance:g}")
    if plan.design_effect != 1:
        notes.append(f"design effect {plan.design_effect:g}")
    print(f"({', '.join(notes)}; Miller eq. 9-10)")
