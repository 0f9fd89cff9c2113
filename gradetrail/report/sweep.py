"""What ``gradetrail sweep`` prints: the sweep's table as aligned text, as Markdown (for
``--markdown`` and ``--github``) and the dry run's plan. Shared by the CLI, CI and the
viewer, so each shows the same figures."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gradetrail.analysis.gate import GateResult
    from gradetrail.analysis.sweep import CellRow, SweepTable
    from gradetrail.engine.sweep import DryRunCell

__all__ = ["dry_run_lines", "family_line", "sweep_lines", "sweep_markdown", "table_rows"]

HEADERS = (
    "cell",
    "model",
    "run",
    "n",
    "score [95% CI]",
    "diff vs baseline [CI, unadjusted]",
    "adj. p",
    "verdict",
    "cost USD",
    "tokens in/out",
    "latency p50/p90/p99 s",
    "errors",
)


def _num(x: float | None, digits: int = 4, sign: bool = False) -> str:
    if x is None or x != x:  # None or NaN
        return "n/a"
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def _p(g: GateResult) -> float | None:
    """The p-value that decided: the family's adjusted one, else the comparison's own."""
    return g.p_adjusted if g.p_adjusted is not None else g.p_value


def _score(c: CellRow) -> str:
    if c.mean is None:
        return "n/a"
    return f"{c.mean:.4f} [{_num(c.ci_low)}, {_num(c.ci_high)}]"


def _diff(c: CellRow) -> str:
    if c.gate is None:
        return "(baseline)"
    g = c.gate
    return f"{g.delta:+.4f} [{g.lo:+.4f}, {g.hi:+.4f}]"


def verdict_text(c: CellRow) -> str:
    """The cell's verdict, with PASS/FAIL and the must-not-regress slices it fails."""
    if c.gate is None:
        return "baseline"
    text = f"{'PASS' if c.passed else 'FAIL'} {c.verdict}"
    if c.failed_slices:  # passes or not overall, a must-not-regress slice fails it
        text = f"FAIL: {c.verdict} overall, fails slice {', '.join(c.failed_slices)}"
    hidden = [s.name for s in c.slices if s.hidden_regression and s.name not in c.failed_slices]
    if hidden:
        text += f"; regresses on {', '.join(hidden)}"
    return text


def _run(c: CellRow) -> str:
    if c.outcome == "existing":
        return "cached (complete)"
    if c.outcome == "ran" and c.rows and c.cache_hits == c.rows:
        return "ran (all cached)"
    return c.outcome if c.status == "complete" else f"{c.outcome} ({c.status})"


def table_rows(table: SweepTable) -> list[tuple[str, ...]]:
    """One tuple of cell texts per cell, in :data:`HEADERS` order."""
    out = []
    for c in table.cells:
        latency = "/".join(_num(x, 2) for x in (c.latency_p50, c.latency_p90, c.latency_p99))
        errors = ", ".join(f"{n} {state}" for state, n in c.errors.items()) or "0"
        out.append(
            (
                c.name,
                c.model,
                _run(c),
                str(c.n),
                _score(c),
                _diff(c),
                "" if c.gate is None else _num(_p(c.gate), 3),
                verdict_text(c),
                _num(c.cost_usd, 4),
                f"{c.input_tokens}/{c.output_tokens}",
                latency,
                errors,
            )
        )
    return out


def _aligned(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def family_line(table: SweepTable) -> str:
    """The family and its correction, and how the labels were decided: the intervals shown
    are each comparison's own, the verdicts and labels the corrected tests'."""
    how = {"holm": "Holm-corrected", "bonferroni": "Bonferroni-corrected", "none": "uncorrected"}
    line = (
        f"{table.test} at margin {table.margin:g}; {table.family_size} comparisons "
        f"{how[table.correction]} at family-wise one-sided alpha {table.alpha:g}, decided by "
        f"the adjusted p (intervals shown are each comparison's own {table.confidence:.0%}, "
        "unadjusted)"
    )
    return f"{line}; {table.labels}" if table.labels else line


def _slice_rows(table: SweepTable) -> list[tuple[str, ...]]:
    out = []
    for c in table.cells:
        for s in c.slices:
            diff = "(baseline)" if c.is_baseline else "n/a"
            verdict = "" if c.is_baseline else (s.note or "")
            if s.gate is not None:
                g = s.gate
                diff = f"{g.delta:+.4f} [{g.lo:+.4f}, {g.hi:+.4f}]"
                verdict = ("PASS" if g.passed else "FAIL") if s.must_not_regress else ""
                if s.must_not_regress:
                    verdict += f" (adj. p {_num(_p(g), 3)})"
            if s.hidden_regression:
                p = _num(_p(s.regression), 3) if s.regression else "n/a"
                hidden = f"REGRESSION hidden by the mean (adj. p {p})"
                verdict = (verdict + " " if verdict else "") + hidden
            mark = " *" if s.must_not_regress else ""
            score = f"{_num(s.mean)} [{_num(s.ci_low)}, {_num(s.ci_high)}]"
            out.append((c.name, f"{s.name}{mark}", str(s.n), score, diff, verdict))
    return out


def sweep_lines(table: SweepTable) -> list[str]:
    """The table as aligned text lines: the cells, then per-slice rows (``*`` marks a
    must-not-regress slice), then the family, the best passing cell and the total cost."""
    lines = [f"sweep {table.name}: {len(table.cells)} cells, baseline {table.baseline}"]
    lines += _aligned([HEADERS, *table_rows(table)])
    slices = _slice_rows(table)
    if slices:
        lines.append("")
        lines.append(f"slices by {table.slice_field} (* must not regress):")
        head = ("cell", "slice", "n", "score [95% CI]", "diff [CI, unadjusted]", "")
        lines += _aligned([head, *slices])
    lines.append("")
    lines.append(family_line(table))
    passed = [c.name for c in table.candidates if c.passed]
    lines.append(f"passed: {', '.join(passed) if passed else 'none'}")
    lines.append(f"best passing cell: {table.best or 'none'}")
    total = (
        "unknown (a cell's cost is unknown: no price known for its model or judge)"
        if table.total_cost_usd is None
        else f"{table.total_cost_usd:.4f} (models and judges)"
    )
    lines.append(f"total cost USD: {total}")
    for w in table.warnings:
        lines.append(f"warning: {w}")
    return lines


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def sweep_markdown(table: SweepTable) -> str:
    """The table as a GitHub-flavoured Markdown report."""
    verdict = "passed" if table.passed() else "no candidate passed"
    out = [f"## gradetrail sweep `{_md(table.name)}`: {verdict}", ""]
    out.append(f"Baseline `{_md(table.baseline)}`; {family_line(table)}.")
    out.append("")
    out.append("| " + " | ".join(HEADERS) + " |")
    out.append("|" + "---|" * len(HEADERS))
    for row in table_rows(table):
        out.append("| " + " | ".join(_md(v) for v in row) + " |")
    slices = _slice_rows(table)
    if slices:
        out += ["", f"Slices by `{_md(table.slice_field or '')}` (* must not regress):", ""]
        out.append("| cell | slice | n | score [95% CI] | diff [CI, unadjusted] | |")
        out.append("|---|---|---|---|---|---|")
        for row in slices:
            out.append("| " + " | ".join(_md(v) for v in row) + " |")
    out.append("")
    out.append(f"Best passing cell: {f'`{_md(table.best)}`' if table.best else 'none'}.")
    if table.total_cost_usd is not None:
        out.append(f"Total cost: ${table.total_cost_usd:.4f}.")
    return "\n".join(out) + "\n"


def dry_run_lines(cells: Sequence[DryRunCell]) -> list[str]:
    """What a sweep would call: one line a cell, then the totals."""
    rows = [("cell", "model", "requests", "to call", "est. tokens in/out", "est. USD")]
    for c in cells:
        out_tokens = "?" if c.est_output_tokens is None else str(c.est_output_tokens)
        cost = "n/a" if c.est_cost_usd is None else f"{c.est_cost_usd:.4f}"
        rows.append(
            (
                c.name,
                c.model,
                str(c.requests),
                "0 (complete)" if c.complete else str(c.to_call),
                f"{c.est_input_tokens}/{out_tokens}",
                cost,
            )
        )
    lines = _aligned(rows)
    costs = [c.est_cost_usd for c in cells if c.est_cost_usd is not None]
    total = sum(c.to_call for c in cells)
    known = f", est. USD {sum(costs):.4f}" if costs else ""
    unpriced = [c.name for c in cells if c.est_cost_usd is None]
    lines.append(f"would call {total} requests{known}")
    if unpriced:
        lines.append(f"no price known for: {', '.join(unpriced)}")
    return lines
