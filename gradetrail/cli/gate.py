"""``gradetrail gate`` (the regression gate) and ``gradetrail power`` (planning n)."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gradetrail.cli.options import AllowDifferentScorersOption, check_report_paths
from gradetrail.errors import GradetrailError, UsageError

if TYPE_CHECKING:  # imported where used: `gradetrail --help` lists the command, no more
    from rich.console import Console
    from rich.table import Table

    from gradetrail.analysis.gate import GateFamily, GateResult
    from gradetrail.stats import intervals as stats

__all__ = ["register"]

_SHOWN_IDS = 10
_METHOD_NAMES = {
    "tango": "Tango score interval (paired binary)",
    "t": "paired t",
    "z": "paired z (Miller eq. 7-8)",
    "welch": "unpaired Welch t (Miller eq. 5-6)",
    "newcombe": "unpaired Newcombe score interval (binary)",
    "zero-failure": "zero-failure bound (every paired difference equal; Hanley 1983)",
}
_UNPAIRED_NAMES = {
    "z": "unpaired z (Miller eq. 5-6)",
    "zero-failure": "unpaired, a constant run by the zero-failure bound (Hanley 1983)",
}


class MethodChoice(StrEnum):
    """--method values."""

    auto = "auto"
    tango = "tango"
    t = "t"
    z = "z"
    welch = "welch"
    newcombe = "newcombe"


class ErrorsChoice(StrEnum):
    """--errors values."""

    refuse = "refuse"
    as_fail = "as-fail"
    exclude = "exclude"


class TestChoice(StrEnum):
    """--test values."""

    non_inferiority = "non-inferiority"
    superiority = "superiority"
    equivalence = "equivalence"


class ReducerChoice(StrEnum):
    """--reducer values."""

    mean = "mean"
    max = "max"
    majority = "majority"
    pass_at_k = "pass_at_k"


def register(app: typer.Typer) -> None:
    """Add ``gate`` and ``power`` to ``app``."""
    app.command("gate")(gate)
    app.command("power")(power)


def gate(
    runs: Annotated[
        list[Path],
        typer.Argument(
            help="BASELINE CANDIDATE run directories; more pairs (B1 C1 B2 C2 ...) are gated "
            "as one family with a Holm correction.",
            show_default=False,
        ),
    ],
    margin: Annotated[
        float | None,
        typer.Option(
            min=0,
            help="Margin on the score scale: non-inferiority passes iff lower bound >= "
            "-margin (default 0.02); superiority iff lower bound > margin (default 0); "
            "equivalence iff the interval is inside (-margin, margin) (default 0.02).",
            show_default=False,
        ),
    ] = None,
    confidence: Annotated[
        float, typer.Option(min=0, max=1, help="Two-sided confidence of the interval.")
    ] = 0.95,
    test: Annotated[
        TestChoice,
        typer.Option("--test", help="non-inferiority, superiority, or equivalence (TOST)."),
    ] = TestChoice.non_inferiority,
    unpaired: Annotated[
        bool,
        typer.Option(
            "--unpaired", help="Runs on different samples: compare means (Miller eq. 5-6)."
        ),
    ] = False,
    method: Annotated[
        MethodChoice,
        typer.Option(
            help="auto: tango for binary scores without clusters, else t (paired); "
            "newcombe for binary, else welch (unpaired)."
        ),
    ] = MethodChoice.auto,
    reducer: Annotated[
        ReducerChoice | None,
        typer.Option(help="Gate both runs on this reducer instead of their run.reducer."),
    ] = None,
    pass_k: Annotated[int | None, typer.Option(min=1, help="The k of --reducer pass_at_k.")] = None,
    metric: Annotated[
        str | None,
        typer.Option(help="Runs with several scorers: gate this metric, not the primary."),
    ] = None,
    errors: Annotated[
        ErrorsChoice,
        typer.Option(
            help="Rows in an error state: refuse; as-fail: the candidate's score 0, the "
            "baseline's are left out; or exclude their samples from both runs."
        ),
    ] = ErrorsChoice.refuse,
    allow_different_data: Annotated[
        bool, typer.Option("--allow-different-data", help="Compare runs of different datasets.")
    ] = False,
    allow_partial: Annotated[
        bool,
        typer.Option(
            "--allow-partial",
            help="Gate runs that did not complete or whose samples differ, on the shared ones.",
        ),
    ] = False,
    allow_different_splits: Annotated[
        bool,
        typer.Option("--allow-different-splits", help="Compare runs on different dataset.split s."),
    ] = False,
    allow_different_scorers: AllowDifferentScorersOption = False,
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
    from gradetrail.analysis.gate import gate_family
    from gradetrail.cli import fail

    if len(runs) < 2 or len(runs) % 2:
        raise typer.BadParameter(
            f"Missing argument 'candidate': give run directories in pairs, BASELINE "
            f"CANDIDATE [BASELINE CANDIDATE ...] (got {len(runs)})"
        )
    pairs = list(zip(runs[::2], runs[1::2], strict=True))
    reports = _Reports(junit, markdown, github, to_stderr=json_out)
    try:
        check_report_paths({"--junit": junit, "--markdown": markdown})
    except GradetrailError as exc:
        raise fail(exc) from None
    try:
        family = gate_family(
            pairs,
            margin=margin,
            confidence=confidence,
            method=method.value,
            errors=errors.value,
            allow_different_data=allow_different_data,
            allow_partial=allow_partial,
            test=test.value,
            unpaired=unpaired,
            reducer=reducer.value if reducer else None,
            pass_k=pass_k,
            metric=metric,
            allow_different_splits=allow_different_splits,
            allow_different_scorers=allow_different_scorers,
        )
    except (GradetrailError, ValueError) as exc:  # ValueError: an argument out of range
        reports.cannot_compare(str(exc))
        raise _no_verdict(exc) from None
    except Exception as exc:  # a bug: no verdict was reached, so never the fail code 1
        message = f"the gate reached no verdict: {type(exc).__name__}: {exc} (a gradetrail bug)"
        reports.cannot_compare(message)
        raise fail(UsageError(message)) from exc
    if json_out:
        out = family.results[0].to_dict() if len(pairs) == 1 else family.to_dict()
        print(json.dumps(out))
    else:
        print_family(family)
    reports.verdict(family)
    raise typer.Exit(0 if family.passed else 1)


def _no_verdict(exc: Exception) -> typer.Exit:
    """The exit for a gate that cannot compare: its one line, and exit code 2 whatever
    the error's own code (1 is the gate's fail: a CI step reads it as a regression)."""
    from gradetrail.cli import fail

    error = exc if isinstance(exc, GradetrailError) else UsageError(str(exc))
    fail(error)
    return typer.Exit(2)


class _Reports:
    """The CI outputs the gate was asked for: --junit, --markdown, --github; with
    ``to_stderr`` (``--json``: stdout holds the JSON alone) the annotations go to stderr,
    where the Actions runner reads workflow commands too."""

    def __init__(
        self, junit: Path | None, markdown: Path | None, github: bool, *, to_stderr: bool = False
    ) -> None:
        self.junit, self.markdown, self.github = junit, markdown, github
        self.to_stderr = to_stderr

    def verdict(self, family: GateFamily) -> None:
        from gradetrail.ci import github, junit, markdown
        from gradetrail.ci.runs import gate_run_warnings

        wanted = self.markdown is not None or self.github
        warnings = [gate_run_warnings(r) if wanted else {} for r in family.results]
        self._write(
            junit.gate_junit(family) if self.junit else None,
            markdown.gate_markdown(family, warnings) if wanted else "",
            github.gate_annotations(family, warnings) if self.github else [],
        )

    def cannot_compare(self, message: str) -> None:
        from gradetrail.ci import github, junit, markdown

        self._write(
            junit.cannot_compare_junit(message) if self.junit else None,
            markdown.cannot_compare_markdown(message),
            [github.cannot_compare_annotation(message)] if self.github else [],
        )

    def _write(self, document: Any, report: str, annotations: list[str]) -> None:
        from gradetrail._util.outfiles import write_file
        from gradetrail.ci.github import append_step_summary
        from gradetrail.ci.junit import write_junit
        from gradetrail.cli import fail

        try:
            if self.junit is not None:
                write_junit(document, self.junit)
            if self.markdown is not None:
                write_file(self.markdown, report.encode("utf-8", "backslashreplace"))
            if self.github:
                append_step_summary(report)
        except OSError as exc:
            raise fail(UsageError(f"cannot write the gate report: {exc}")) from None
        for line in annotations:
            print(line, file=sys.stderr if self.to_stderr else sys.stdout)


def _num(x: float | None, digits: int = 4) -> str:
    return "n/a" if x is None or math.isnan(x) else f"{x:+.{digits}f}"


def _ids(ids: tuple[str, ...]) -> str:
    from rich.markup import escape

    from gradetrail._util.terminal import one_line

    shown = escape(one_line(", ".join(ids[:_SHOWN_IDS])))
    more = f", … {len(ids) - _SHOWN_IDS} more (--json lists all)" if len(ids) > _SHOWN_IDS else ""
    return f"{len(ids)}: {shown}{more}"


def print_family(family: GateFamily, console: Console | None = None) -> None:
    """Each comparison's table, then (for several) the family's line and verdict."""
    from rich.console import Console

    console = console or Console(highlight=False)
    for result in family.results:
        print_gate(result, console)
    if len(family.results) > 1:
        passed = sum(r.passed for r in family.results)
        verdict = "[green]PASS[/green]" if family.passed else "[red]FAIL[/red]"
        console.print(
            f"family: {len(family.results)} comparisons, Holm-corrected at family-wise "
            f"one-sided alpha {family.alpha:g}; {passed} passed: {verdict}"
        )


def _verdict_rule(r: GateResult) -> str:
    """What decides: the interval's bound alone; in a family, the adjusted p (the
    interval shown is the comparison's own, unadjusted, and can pass where it fails)."""
    if r.p_adjusted is not None:
        name = (r.family or "Holm").split()[0]
        return f"pass iff {name}-adjusted p <= {r.alpha:g}; the interval is unadjusted"
    if r.test == "non-inferiority":
        return f"pass iff lower bound >= {-r.margin:g}"
    if r.test == "superiority":
        return f"pass iff lower bound > {r.margin:g}"
    return f"pass iff interval inside ({-r.margin:g}, {r.margin:g}), TOST"


def print_gate(result: GateResult, console: Console | None = None) -> None:
    """The gate's table: n, clusters, epochs, means, discordant counts, the interval, the
    test and verdict, and, on a failure, why (half-width, MDE, n needed, flipped samples)."""
    from rich.console import Console
    from rich.table import Table

    from gradetrail._util.terminal import one_line

    console = console or Console(highlight=False)
    r = result
    table = Table(title=f"regression gate ({r.test})", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("baseline", r.baseline)
    table.add_row("candidate", r.candidate)
    if not r.unpaired:
        table.add_row("samples (n)", f"{r.n} paired")
    else:
        unpaired = f"{r.n_baseline} baseline, {r.n_candidate} candidate (unpaired)"
        table.add_row("samples (n)", unpaired)
    table.add_row("clusters", "none" if r.n_clusters is None else str(r.n_clusters))
    reduced = f" (per-sample scores: {r.reducer if r.pass_k is None else f'pass@{r.pass_k}'})"
    table.add_row("epochs", f"{r.epochs[0]} baseline, {r.epochs[1]} candidate{reduced}")
    if r.metric is not None:
        table.add_row("metric", f"{r.metric} (--metric; not the primary score)")
    table.add_row("compared", r.quantity)
    table.add_row("baseline mean", f"{r.baseline_mean:.4f}")
    table.add_row("candidate mean", f"{r.candidate_mean:.4f}")
    if r.only_baseline is not None:
        table.add_row("only baseline passed", str(r.only_baseline))
        table.add_row("only candidate passed", str(r.only_candidate))
    table.add_row("mean difference", f"{_num(r.delta)} (candidate - baseline)")
    se_label = "standard error"
    if r.method in ("tango", "newcombe"):
        se_label = "Wald standard error"
        se_note = " (for reference: the score interval does not use it)"
    elif r.method == "zero-failure" and r.unpaired:
        se_note = " (the run with spread; a constant run has none)"
    elif r.method == "zero-failure":
        se_note = " (every difference equal: the bound does not use it)"
    else:
        se_note = " (of the difference)"
    table.add_row(se_label, f"{_num(r.se).lstrip('+')}{se_note}")
    clipped = ""
    if r.unclipped is not None:
        clipped = f" (clipped to the possible range; unclipped [{_num(r.unclipped[0])}, "
        clipped += f"{_num(r.unclipped[1])}])"
    unadjusted = " (unadjusted)" if r.p_adjusted is not None else ""
    table.add_row(
        f"{r.confidence:.0%} interval{unadjusted}",
        f"[{_num(r.lo)}, {_num(r.hi)}]{clipped}, half-width {_num(r.half_width).lstrip('+')}",
    )
    if not r.unpaired:
        table.add_row("correlation", _num(r.correlation, 3))
    table.add_row("margin", f"{r.margin:g} ({_verdict_rule(r)})")
    method = _METHOD_NAMES[r.method]
    if r.unpaired and r.method in ("z", "zero-failure"):
        method = _UNPAIRED_NAMES[r.method]
    clustered = ", clustered (CR1)" if r.n_clusters is not None else ""
    if r.method in ("tango", "newcombe") and r.n_clusters is not None:
        one = "pair" if r.method == "tango" else "sample"
        clustered = f", one {one} a cluster ({r.n_clusters} clusters)"
    if r.method == "zero-failure" and r.n_clusters is not None:
        clustered = f", one trial a cluster ({r.n_clusters} clusters)"
    table.add_row("method", f"{method}{clustered}")
    if r.p_value is not None:
        table.add_row("p-value", f"{r.p_value:.3g} (one-sided, alpha {r.alpha:g})")
    if r.p_adjusted is not None:
        name = (r.family or "Holm").split()[0]
        table.add_row(f"{name}-adjusted p", f"{r.p_adjusted:.3g} ({r.family}): decides")
    if r.mcnemar_p is not None:
        table.add_row("McNemar exact p", f"{r.mcnemar_p:.3g}")
    for label, ids in (
        ("only in baseline", r.missing_in_candidate),
        ("only in candidate", r.missing_in_baseline),
    ):
        if ids:
            table.add_row(label, f"{_ids(ids)} (not paired)")
    if r.n_errors_handled:
        how = "excluded from both runs"
        if r.errors == "as-fail":
            how = "the candidate's scored 0, the baseline's left out"
        table.add_row("error samples", f"{_ids(r.errored_samples)} ({how})")
    if not r.passed:
        _add_why(table, r)
    table.add_row("verdict", "[green]PASS[/green]" if r.passed else "[red]FAIL[/red]")
    console.print(table)
    console.print(r.reason, markup=False)
    for warning in r.warnings:
        console.print(f"warning: {one_line(warning)}", markup=False)


def _add_why(table: Table, r: GateResult) -> None:
    """The rows that explain a failure."""
    table.add_row("half-width vs margin", f"{r.half_width:.4f} vs {r.margin:g}")
    if r.mde is not None:
        n = min(r.n_baseline, r.n_candidate)
        table.add_row(
            "detectable effect",
            f"{r.mde:.4f} at n = {n} (Miller eq. 10, power 0.8, omega^2 {r.omega2:.4g}"
            + (f", design effect {r.design_effect:.3g})" if r.design_effect else ")"),
        )
    from gradetrail.analysis.gate import needed_line

    needed = needed_line(r)
    if needed is not None:
        table.add_row("n needed", needed)
    if not r.unpaired:
        table.add_row("regressed", _ids(r.regressed) if r.regressed else "0")
        table.add_row("improved", _ids(r.improved) if r.improved else "0")


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
    from gradetrail.stats import intervals as stats

    given = (delta, half_width, omega2, variance, correlation, within_variance, alpha, power_)
    if any(v is not None and not math.isfinite(v) for v in given):
        raise typer.BadParameter("every number must be finite (not nan or inf)")
    if sum(v is not None for v in (delta, n, half_width)) != 1:
        raise typer.BadParameter("give exactly one of --delta, --n, --half-width")
    if (omega2 is None) == (variance is None):
        raise typer.BadParameter("give --omega2, or --variance (with --correlation)")
    # scores are in [0, 1]: a larger difference or variance cannot happen (Popoviciu)
    for flag, value, most in (
        ("--delta", delta, 1.0),
        ("--omega2", omega2, 1.0),
        ("--variance", variance, 0.25),
        ("--within-variance", within_variance, 0.25),
    ):
        if value is not None and abs(value) > most:
            raise typer.BadParameter(
                f"{flag} {value:g} cannot happen: scores are in [0, 1], so it is at most "
                f"{most:g}" + (" (a variance, not a standard deviation)" if most < 1 else "")
            )
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
        past = ""  # eq. 10 knows nothing of the range: at small n it passes 1
        if plan.delta is not None and plan.delta > 1:
            past = " (past 1, the largest difference of [0, 1] scores: none is detectable)"
        print(f"minimum detectable effect with n = {plan.n}: {plan.delta:.4f}{past}")
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
