"""The command's own error handling: usage errors are one line on stderr, exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest
from paths import GSM8K_SPEC


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", str(GSM8K_SPEC), "--executor", "foo"], "unknown executor 'foo'"),
        (["power", "--delta", "nan", "--variance", "0.25"], "must be finite"),
        (["power", "--delta", "1e-300", "--variance", "0.25"], "no answer for these numbers"),
        (["power", "--delta", "0.05", "--variance", "0.25", "--correlation", "2"], "correlation"),
        (["gate", "only-one"], "Missing argument 'candidate'"),
        (["nosuch"], "No such command 'nosuch'"),
    ],
)
def test_usage_errors_are_one_line_with_exit_2(args: list[str], message: str) -> None:
    """No framed box, no traceback: one 'error:' line naming the fix and the help to read."""
    out = subprocess.run(
        [sys.executable, "-m", "gradetrail", *args], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert message in lines[0] and "--help)" in lines[0]


def test_no_arguments_prints_help_once() -> None:
    """Bare `gradetrail` shows the help (once) and exits 2."""
    out = subprocess.run(
        [sys.executable, "-m", "gradetrail"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2
    assert (out.stdout + out.stderr).count("Usage:") == 1


@pytest.mark.parametrize("columns", [60, 120])
def test_help_reads_as_written(columns: int) -> None:
    """A flag shows no value type (`<bool>`), brackets in help text stay (`[parquet]`),
    and each paragraph is wrapped to the terminal: no line past its width, and a
    wider terminal gives longer lines."""
    import os

    env = {**os.environ, "COLUMNS": str(columns)}
    outs = {}
    for command in ("run", "export", "gate"):
        out = subprocess.run(
            [sys.executable, "-m", "gradetrail", command, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert out.returncode == 0, out.stderr
        outs[command] = out.stdout
        assert "<bool>" not in out.stdout
        assert max(len(line) for line in out.stdout.splitlines()) <= columns
    assert "gradetrail[parquet]" in outs["export"]
    assert "--no-cache" in outs["run"] and "--print-run-dir" in outs["run"]
