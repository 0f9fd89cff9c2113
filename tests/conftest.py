"""Shared fixtures: an isolated cache and results root per test, the bundled example,
and an in-process CLI runner."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from paths import GSM8K_DATA, GSM8K_SPEC
from typer.testing import CliRunner

from gradetrail.cli import app

pytest_plugins = ["pytester"]  # the pytest plugin's tests run pytest sessions


def pytest_configure(config: pytest.Config) -> None:
    """Give the session a working Ctrl-C when it was started with SIGINT ignored.

    A shell without job control (``cmd &`` in a script, as CI runners and nohup do)
    starts its background commands with SIGINT ignored, and an ignored signal stays
    ignored in every child process: the tests that Ctrl-C a ``gradetrail run`` child
    would then see it finish as if nothing was sent (the run, rightly, leaves an
    ignored SIGINT alone). A handled signal is reset to the default in each child."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # Hugging Face: no Hub (no test touches the internet) and a private cache, for the
    # whole session and every child process, whichever tests were selected; set before
    # any test module imports ``datasets`` (it reads them once), removed at the end
    os.environ["HF_HUB_OFFLINE"] = "1"
    if "HF_HOME" not in os.environ:
        os.environ["HF_HOME"] = _HF_HOME[0] = tempfile.mkdtemp(prefix="gradetrail-hf-")


#: the session's private HF_HOME, when this conftest made it
_HF_HOME: list[str] = [""]


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the session's private Hugging Face cache."""
    if _HF_HOME[0]:
        shutil.rmtree(_HF_HOME[0], ignore_errors=True)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say once why the browser tests were skipped (chromium absent: tests/view_support.py),
    since ``-q`` lists no skip reasons: one line naming the package that runs them."""
    reasons = {
        str(report.longrepr[2])
        for report in terminalreporter.stats.get("skipped", [])
        if isinstance(report.longrepr, tuple) and "apt-get install chromium" in report.longrepr[2]
    }
    for reason in sorted(reasons):
        terminalreporter.write_line(f"browser tests skipped: {reason.removeprefix('Skipped: ')}")


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own default cache, so nothing leaks between tests or from the
    developer's real cache."""
    path = tmp_path / "cache.sqlite"
    monkeypatch.setenv("GRADETRAIL_CACHE", str(path))
    return path


@pytest.fixture
def cache_path(_isolated_cache: Path) -> Path:
    """The test's cache file (also the default via GRADETRAIL_CACHE)."""
    return _isolated_cache


@dataclass
class CliResult:
    """Exit code and captured output of one CLI invocation."""

    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(tmp_path: Path) -> Callable[..., CliResult]:
    """Run ``gradetrail ARGS`` in-process (``input``: what standard input holds); results
    go under tmp_path/results unless the arguments say otherwise."""
    runner = CliRunner()

    def invoke(*args: str, results: bool = True, input: str | None = None) -> CliResult:  # noqa: A002
        argv = list(args)
        if results and argv and argv[0] == "run" and "--results-root" not in argv:
            argv += ["--results-root", str(tmp_path / "results")]
        out = runner.invoke(app, argv, input=input, catch_exceptions=False)
        return CliResult(out.exit_code, out.stdout, out.stderr)

    return invoke


@pytest.fixture
def gsm8k_copy(tmp_path: Path) -> Path:
    """A private copy of the bundled GSM8K example (spec and data), safe to edit."""
    dest = tmp_path / "example"
    (dest / "data").mkdir(parents=True)
    shutil.copy(GSM8K_SPEC, dest / "gsm8k.yaml")
    shutil.copytree(GSM8K_DATA, dest / "data" / "gsm8k")
    return dest / "gsm8k.yaml"
