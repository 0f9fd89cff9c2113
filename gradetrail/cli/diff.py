"""``gradetrail diff``: two runs joined on sample id, in the terminal or as JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gradetrail.analysis.diff_kinds import KINDS
from gradetrail.cli.gate import ReducerChoice
from gradetrail.cli.options import AllowDifferentScorersOption
from gradetrail.errors import GradetrailError

if TYPE_CHECKING:  # imported where used: `gradetrail --help` lists the command, no more
    from rich.console import Console

    from gradetrail.analysis.diff import RunDiff, SampleDiff

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
_METHOD_NAMES = {
    "tango": "Tango score interval",
    "t": "paired t",
    "z": "paired z",
    "zero-failure": "zero-failure bound",
}


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
        str,
        typer.Option(
            help="The gate's error rows: refuse, as-fail (the candidate's score 0) or exclude."
        ),
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
    allow_different_data: Annotated[
        bool,
        typer.Option(
            "--allow-different-data",
            help="Pair the samples of runs on different dataset content by id anyway.",
        ),
    ] = False,
    allow_different_scorers: AllowDifferentScorersOption = False,
    reducer: Annotated[
        ReducerChoice | None,
        typer.Option(help="Reduce both runs' epochs with this reducer, not their run.reducer."),
    ] = None,
    pass_k: Annotated[int | None, typer.Option(min=1, help="The k of --reducer pass_at_k.")] = None,
) -> None:
    """Compare two runs sample by sample: improved, regressed, changed; the gate's verdict;
    where their identities differ. Lists disagreements unless --all."""
    from gradetrail.analysis.diff import diff_runs
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
            allow_different_data=allow_different_data,
            allow_different_scorers=allow_different_scorers,
            reducer=reducer.value if reducer else None,
            pass_k=pass_k,
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


def _snippet(sample: SampleDiff, side: str, answer: bool = False) -> str:
    """The start of the first epoch's response on ``side`` (with ``answer``, the answer
    its scorer extracted), its state when it has none, or ``(no row)``."""
    from gradetrail._util.terminal import clean

    for pair in sample.epochs:
        brief = getattr(pair, side)
        if brief is not None:
            if answer:
                if brief.extracted is None:
                    return f"({brief.state})" if brief.state != "scored" else "∅"
                text = " ".join(clean(brief.extracted).split())
                return text if len(text) <= _SNIPPET else text[: _SNIPPET - 1] + "…"
            if brief.response is None:
                return f"({brief.state})"
            text = " ".join(clean(brief.response).split())
            return text if len(text) <= _SNIPPET else text[: _SNIPPET - 1] + "…"
    return "(no row)"


def header_lines(result: RunDiff) -> list[tuple[str, str]]:
    """``(label, text)`` pairs: the two runs, where their identities differ, the paired
    counts and the gate's verdict with its interval (or why it cannot compare), and the
    gate's warnings (a copy of the baseline, epochs that differ, a directory named for
    another run), one ``warning`` line each."""
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
    lines += [("warning", w) for w in (r.gate.warnings if r.gate is not None else ())]
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
    """The header (runs, identity, counts, gate), then one table row per listed sample
    (regressions first: :meth:`RunDiff.shown`): sample id, kind, both scores, both
    extracted answers when the scorer records them, and the start of both responses
    where the terminal has room."""
    from rich.console import Console

    from gradetrail._util.terminal import clean

    console = console or Console(highlight=False, soft_wrap=True)
    for label, text in header_lines(result):
        console.print(f"{label:<12} {clean(text)}", markup=False)
    if not samples:
        console.print("no sample to list (--all lists every sample)", markup=False)
        return
    ids = min(max(9, *(len(clean(s.sample_id)) for s in samples)), 24)
    kinds = max(4, *(len(s.kind) for s in samples))
    answers = any(
        side is not None and side.extracted is not None
        for s in samples
        for p in s.epochs
        for side in (p.baseline, p.candidate)
    )
    room = console.width - ids - kinds - 8 - 9 - 19  # the other columns and borders
    answers = answers and room >= 18  # a narrower terminal: the ids and scores alone
    answer_width = max(6, min(16, room // 4)) if answers else 0
    columns: list[tuple[str, int, str]] = [("sample id", ids, "fold"), ("kind", kinds, "")]
    for side, width in (("baseline", 8), ("candidate", 9)):
        columns.append((side, width, "right"))
        if answers:  # the answer its scorer extracted, beside its score
            columns.append(("answer", answer_width, ""))
    room -= 2 * (answer_width + 3) if answers else 0
    snippets = room // 2 >= 10  # too narrow a terminal: no responses
    if snippets:
        for column in ("baseline response", "candidate response"):  # one line a sample
            columns.append((column, room // 2, ""))
    rows = []
    for s in samples:
        cells = [clean(s.sample_id), s.kind.replace("_", " ")]
        for side, score in (("baseline", s.baseline_score), ("candidate", s.candidate_score)):
            cells.append(_score(score))
            if answers:
                cells.append(_snippet(s, side, answer=True))
        if snippets:
            cells += [_snippet(s, "baseline"), _snippet(s, "candidate")]
        rows.append(cells)
    console.print(
        "\n".join(_table_lines(columns, rows)),
        markup=False,
        highlight=False,
        emoji=False,
        soft_wrap=True,
    )


def _table_lines(columns: list[tuple[str, int, str]], rows: list[list[str]]) -> list[str]:
    """A table as text lines, boxed as rich draws one (``┏``, ``│``), each column at most
    its width in terminal cells: the one marked ``fold`` wraps onto further lines, the
    others end in an ellipsis, ``right`` aligns right. Drawn by hand because rich's Table
    measures every cell of every row (5 s for the 1,318 rows of a GSM8K diff)."""
    from rich.cells import cell_len, set_cell_size

    widths = [
        min(width, max([cell_len(header), *(cell_len(r[i]) for r in rows)]))
        if mode != "right"
        else max(width, cell_len(header))
        for i, (header, width, mode) in enumerate(columns)
    ]
    widths = [
        max(w, cell_len(h) if mode == "fold" else min(cell_len(h), w), 1)
        for w, (h, _, mode) in zip(widths, columns, strict=True)
    ]

    def fit(text: str, width: int, mode: str) -> str:
        if cell_len(text) > width:
            return set_cell_size(text, width - 1) + "…"
        return text.rjust(width) if mode == "right" else set_cell_size(text, width)

    def fold(text: str, width: int) -> list[str]:
        parts, line = [], ""
        for ch in text:
            if cell_len(line + ch) > width:
                parts.append(line)
                line = ""
            line += ch
        return [*parts, line]

    def rule(left: str, mid: str, right: str, fill: str) -> str:
        return left + mid.join(fill * (w + 2) for w in widths) + right

    header = (
        "┃"
        + "┃".join(f" {fit(h, w, '')} " for (h, _, _), w in zip(columns, widths, strict=True))
        + "┃"
    )
    lines = [rule("┏", "┳", "┓", "━"), header, rule("┡", "╇", "┩", "━")]
    for cells in rows:
        stacked = [
            fold(cell, w) if mode == "fold" else [fit(cell, w, mode)]
            for cell, w, (_, _, mode) in zip(cells, widths, columns, strict=True)
        ]
        for k in range(max(len(part) for part in stacked)):
            lines.append(
                "│"
                + "│".join(
                    f" {set_cell_size(part[k] if k < len(part) else '', w)} "
                    for part, w in zip(stacked, widths, strict=True)
                )
                + "│"
            )
    lines.append(rule("└", "┴", "┘", "─"))
    return lines
