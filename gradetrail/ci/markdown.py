"""The gate's verdict as a short Markdown report, for a CI step summary or a PR comment:
the verdict, the interval against the margin, the paired counts, the regressed sample ids,
where the identities differ, and the runs' warnings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gradetrail.analysis.gate import GateFamily, GateResult, needed_line
from gradetrail.ci.text import markdown_code

__all__ = ["cannot_compare_markdown", "gate_markdown"]

#: regressed sample ids listed in the report; the rest are counted
SHOWN_IDS = 25


def gate_markdown(family: GateFamily, warnings: Sequence[Mapping[str, Sequence[str]]] = ()) -> str:
    """The report as Markdown text (ends with a newline).

    Args:
        family: the gate's comparisons (one, or several Holm-corrected).
        warnings: per comparison, run label (``baseline``, ``candidate``) -> that run's
            warnings (see :func:`gradetrail.rundir.manifest.run_warnings`).
    """
    sections = []
    if len(family.results) > 1:
        verdict = "PASS" if family.passed else "FAIL"
        passed = sum(r.passed for r in family.results)
        sections.append(
            f"## {_icon(family.passed)} gradetrail gate: {verdict} ({passed} of "
            f"{len(family.results)} comparisons pass, {family.results[0].family})\n"
        )
    for index, result in enumerate(family.results):
        runs = warnings[index] if index < len(warnings) else {}
        sections.append(_section(result, runs))
    return "\n".join(sections)


def _icon(passed: bool) -> str:
    return "✅" if passed else "❌"


def _section(r: GateResult, warnings: Mapping[str, Sequence[str]]) -> str:
    verdict = "PASS" if r.passed else "FAIL"
    level = f"{r.confidence:.0%}"
    lines = [
        f"### {_icon(r.passed)} gradetrail gate: {verdict} ({r.test})",
        "",
        f"Candidate {markdown_code(r.candidate)} against baseline {markdown_code(r.baseline)}"
        f", margin {r.margin:g}. {r.reason}".rstrip(),
        "",
        "| | |",
        "|---|---|",
        f"| mean difference (candidate − baseline) | {r.delta:+.4f} |",
        f"| {level} interval{' (unadjusted)' if r.p_adjusted is not None else ''} | "
        f"[{r.lo:+.4f}, {r.hi:+.4f}] (half-width {r.half_width:.4f}) |",
        f"| baseline mean · candidate mean | {r.baseline_mean:.4f} · {r.candidate_mean:.4f} |",
        f"| compared | {r.quantity} |",
        f"| samples compared | {r.n} ({'unpaired' if r.unpaired else 'paired'}, {r.method}) |",
    ]
    if not r.unpaired:
        lines.append(f"| regressed · improved | {len(r.regressed)} · {len(r.improved)} |")
    if r.mcnemar_p is not None:
        lines.append(f"| McNemar exact p | {r.mcnemar_p:.3g} |")
    if r.p_adjusted is not None:
        name = (r.family or "Holm").split()[0]
        lines.append(f"| p ({name}-adjusted, decides) | {r.p_adjusted:.3g} |")
    needed = needed_line(r, lambda command: f"`{command}`")
    if not r.passed and needed is not None:
        lines.append(f"| samples needed | {needed} |")
    if r.regressed:
        shown = ", ".join(markdown_code(sid, 60) for sid in r.regressed[:SHOWN_IDS])
        more = len(r.regressed) - SHOWN_IDS
        lines += ["", f"**Regressed samples ({len(r.regressed)}):** {shown}"]
        if more > 0:
            lines[-1] += f" and {more} more (`gradetrail gate --json` lists all)"
    lines += ["", "**Identity:** " + ("the same" if not r.identity_differences else "differs")]
    lines += [f"- {markdown_code(d)}" for d in r.identity_differences]
    notes = [*r.warnings]
    for label, items in warnings.items():
        notes += [f"{label}: {w}" for w in items]
    if notes:
        lines += ["", "**Warnings:**"] + [f"- {markdown_code(n, 200)}" for n in notes]
    return "\n".join(lines) + "\n"


def cannot_compare_markdown(message: str) -> str:
    """The report of a gate that could not compare its runs (exit 2): what to fix."""
    return f"### ⚠️ gradetrail gate: cannot compare\n\n{markdown_code(message, 400)}\n"
