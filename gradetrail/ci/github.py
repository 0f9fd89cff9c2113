"""GitHub Actions workflow commands: ``::error::`` and ``::warning::`` annotations for a
failed gate and for run warnings, and the step summary
(https://docs.github.com/actions/reference/workflow-commands-for-github-actions)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from gradetrail.analysis.gate import GateFamily
from gradetrail.ci.junit import verdict_line
from gradetrail.ci.text import github_data, github_property

__all__ = ["append_step_summary", "cannot_compare_annotation", "gate_annotations"]


def gate_annotations(
    family: GateFamily, warnings: Sequence[Mapping[str, Sequence[str]]] = ()
) -> list[str]:
    """Workflow command lines: one ``::error`` per failed comparison (its verdict line),
    one ``::warning`` per gate warning and per run warning (errors, truncations, a
    served-model mismatch; see :func:`gradetrail.rundir.manifest.run_warnings`)."""
    out = []
    for index, result in enumerate(family.results):
        if not result.passed:
            title = f"gradetrail gate failed: {result.candidate}"
            out.append(_command("error", title, verdict_line(result)))
        for warning in result.warnings:
            out.append(_command("warning", "gradetrail gate", warning))
        runs = warnings[index] if index < len(warnings) else {}
        for label, items in runs.items():
            out += [_command("warning", f"gradetrail {label} run", w) for w in items]
    return out


def cannot_compare_annotation(message: str) -> str:
    """The ``::error`` line of a gate that could not compare its runs (exit 2)."""
    return _command("error", "gradetrail gate cannot compare", message)


def append_step_summary(markdown: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """Append ``markdown`` to the file named by ``$GITHUB_STEP_SUMMARY``; return its path,
    or None when the variable is unset or empty.

    Raises:
        OSError: the file cannot be written, is a symlink, or is not a regular file with
            one link.
    """
    target = (environ if environ is not None else os.environ).get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    from gradetrail._util.outfiles import append_file

    path = Path(target)
    append_file(path, markdown.encode("utf-8", "backslashreplace"))  # \ud800 as its escape
    return path


def _command(kind: str, title: str, message: str) -> str:
    return f"::{kind} title={github_property(title)}::{github_data(message)}"
