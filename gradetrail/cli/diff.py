"""``gradetrail diff``: two runs joined on sample id, in the terminal or as JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gradetrail.diff import KINDS, RunDiff, SampleDiff, diff_runs
from gradetrail.errors import GradetrailError

__all__ = ["print_diff", "register"]

_SNIPPET = 60
_KIND_NAMES = {
    "improved": "improved",
    "regressed": "regressed",
    "changed": "changed response (same score)",
    "error": "error or missing epoch",
    "only_baseline": "only in baseline",
    "only_candidate": "only in candidate",
    "same": "same",
}
_METHOD_NAMES = {"tango": "Tango score interval", "t": "paired t", "z": "paired z"}


def register(app: typer.Typer) -> None:
    """Add ``diff`` to ``app``."""
    app.command("diff")(diff)


def diff(
    run_a: Annotated[Path, typer.Argument(help="The baseline run directory.")],
    run_b: Annotated[Path, typer.Argument(help="The candidate run directory.")],
    show_all: Annotated[
        bool, typer.Option("--all", help="List every sample, not only the disagreements.")
    ] = False,
    kind: Annotated[
        list[str] | None,
        typer.Option(help=f"List only samples of this kind ({', '.join(KINDS)}); repeatable."),
    ] = None,
    margin: Annotated[float, typer.Option(min=0, help="The gate's non-inferiority margin.")] = 0.02,
    errors: Annotated[
        str, typer.Option(help="The gate's error rows: refuse, as-fail (score 0) or exclude.")
    ] = "refuse",
    allow_partial: Annotated[
        bool, typer.Option("--allow-partial", help="Gate incomplete runs on shared samples.")
    ] = False,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print the comparison as JSON (whole responses).")
    ] = False,
    metric: Annotated[
        str | None,
        typer.Option(help="Runs with several scorers: compare this metric, not the primary."),
    ] = None,
) -> None:
    """Compare two runs sample by sample: improved, regressed, changed; the gate's verdict;
    where their identities differ. Lists disagreements unless --all."""
    from gradetrail.cli import fail

    unknown = sorted(set(kind or ()) - set(KINDS))
    if unknown:
        raise typer.BadParameter(
            f"unknown kind {unknown[0]!r}: use one of {', '.join(KINDS)}", param_hint="--kind"
        )
    if errors not in ("refuse", "as-fail", "exclude"):
        raise typer.BadParameter(
            f"{errors!r}: use refuse, as-fail or exclude", param_hint="--errors"
        )
    try:
        result = diff_runs(
            run_a,
            run_b,
            margin=margin,
            errors=errors,  # type: ignore[arg-type]
            allow_partial=allow_partial,
            responses=json_out,
            metric=metric,
        )
    except GradetrailError as exc:
        raise fail(exc) from None
    kinds = frozenset(kind) if kind else None
    if json_out:
        out = result.to_dict(show_all)
        if kinds is not None:
            out["samples"] = [s.to_dict() for s in result.shown(kinds=kinds)]
        print(json.dumps(out))
    else:
        print_diff(result, result.shown(show_all, kinds))


def _score(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _snippet(sample: SampleDiff, side: str) -> str:
    from gradetrail.terminal import clean

    for pair in sample.epochs:
        brief = getattr(pair, side)
        if brief is not None:
            if brief.response is None:
                return f"({brief.state})"
            text = " ".join(clean(brief.response).split())
            return text if len(text) <= _SNIPPET else text[: _SNIPPET - 1] + "…"
    return "(no row)"


def header_lines(result: RunDiff) -> list[tuple[str, str]]:
    """``(label, text)`` pairs: the two runs, where their identities differ, the paired
    counts and the gate's verdict with its interval (or why it cannot compare)."""
    r = result
    lines = [
        ("baseline", f"{r.baseline} ({r.baseline_model})"),
        ("candidate", f"{r.candidate} ({r.candidate_model})"),
    ]
    ident = r.identity
    if ident.same:
        lines.append(("identity", f"same ({str(ident.baseline_hash)[:12]})"))
    else:
        a, b = (str(h)[:12] for h in (ident.baseline_hash, ident.candidate_hash))
        lines.append(("identity", f"differs ({a} vs {b})"))
        lines += [("", line) for line in ident.differences]
    counts = ", ".join(f"{r.counts[k]} {_KIND_NAMES[k]}" for k in KINDS if r.counts[k])
    if r.metric is not None:
        lines.append(("metric", f"{r.metric} (--metric; not the primary score)"))
    for name, means in r.metrics.items():
        a, b = means["baseline"], means["candidate"]
        change = f" ({b - a:+.4f})" if a is not None and b is not None else ""
        lines.append(("metric", f"{name}: {_score(a)} -> {_score(b)}{change}"))
    lines.append(("samples", f"{r.paired} paired: {counts or 'none'}"))
    lines.append(("gate", _gate_line(r)))
    return lines


def _gate_line(r: RunDiff) -> str:
    if r.gate is None:
        return f"cannot compare: {r.gate_error}"
    g = r.gate
    verdict = "PASS" if g.passed else "FAIL"
    method = _METHOD_NAMES.get(g.method, g.method)
    return (
        f"{verdict}: mean difference {g.delta:+.4f} (candidate - baseline), "
        f"{g.confidence:.0%} interval [{g.lo:+.4f}, {g.hi:+.4f}] ({method}), "
        f"pass iff lower bound >= {-g.margin:g}, n = {g.n}"
    )


def print_diff(result: RunDiff, samples: list[SampleDiff], console: Console | None = None) -> None:
    """The header (runs, identity, counts, gate), then one table row per listed sample:
    sample id, kind, both mean scores and the start of both responses."""
    from gradetrail.terminal import clean

    console = console or Console(highlight=False, soft_wrap=True)
    for label, text in header_lines(result):
        console.print(f"{label:<12} {clean(text)}", markup=False)
    if not samples:
        console.print("no sample to list (--all lists every sample)", markup=False)
        return
    ids = min(max(9, *(len(clean(s.sample_id)) for s in samples)), 24)
    kinds = max(4, *(len(s.kind) for s in samples))
    table = Table(show_lines=False)
    table.add_column("sample id", overflow="fold", min_width=ids)
    table.add_column("kind", no_wrap=True, min_width=kinds)
    table.add_column("baseline", justify="right", no_wrap=True, min_width=8)
    table.add_column("candidate", justify="right", no_wrap=True, min_width=9)
    room = console.width - ids - kinds - 8 - 9 - 19  # the other columns and borders
    snippets = room // 2 >= 10  # too narrow a terminal: the ids and scores, no responses
    if snippets:
        for column in ("baseline response", "candidate response"):  # one line a sample
            table.add_column(column, overflow="ellipsis", no_wrap=True, width=room // 2)
    for s in samples:
        cells = [escape(clean(s.sample_id)), s.kind.replace("_", " ")]
        cells += [_score(s.baseline_score), _score(s.candidate_score)]
        if snippets:
            cells += [escape(_snippet(s, "baseline")), escape(_snippet(s, "candidate"))]
        table.add_row(*cells)
    console.print(table)
