"""gradetrail's pytest plugin (entry point ``pytest11``): eval spec files as test items.

``pytest evals/`` collects every spec file whose name matches the ini option
``gradetrail_specs`` (default ``eval_*.yaml eval_*.yml *.eval.yaml *.eval.yml``) as one
test item. The item runs the eval through the normal runner and cache (a second session
is all cache hits) and passes when the run is complete, something scored, and it meets
what its spec's ``ci:`` section (or the ``--gradetrail-*`` options) requires: a minimum
score on the 95% CI's lower bound and/or non-inferiority to a stored baseline run.
A failure prints the run's summary and the samples that regressed.

Sweep files (ini option ``gradetrail_sweeps``, default ``sweep_*.yaml sweep_*.yml
*.sweep.yaml *.sweep.yml``) are one item each: the sweep runs (cached) and the item passes
when a candidate cell passes its gate against the baseline (``--gradetrail-candidate``:
when that cell does); a failure prints the sweep's table.

This module imports nothing of gradetrail until a spec file is collected, so pytest
sessions without evals pay nothing for it.
"""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import pytest

DEFAULT_PATTERNS = ["eval_*.yaml", "eval_*.yml", "*.eval.yaml", "*.eval.yml"]
SWEEP_PATTERNS = ["sweep_*.yaml", "sweep_*.yml", "*.sweep.yaml", "*.sweep.yml"]


def pytest_addoption(parser: pytest.Parser) -> None:
    """The ``--gradetrail-*`` options and the ``gradetrail_specs`` ini option."""
    group = parser.getgroup("gradetrail", "gradetrail evals as tests")
    group.addoption(
        "--gradetrail-results-root",
        default=None,
        help="Where eval run directories go (default: results/ under pytest's rootdir).",
    )
    group.addoption("--gradetrail-cache", default=None, help="The response cache file.")
    group.addoption(
        "--gradetrail-min-score",
        type=float,
        default=None,
        help="Require every eval's 95%% CI lower bound to reach this (overrides ci.min_score).",
    )
    group.addoption(
        "--gradetrail-margin",
        type=float,
        default=None,
        help="The gate's margin against ci.baseline (overrides ci.margin).",
    )
    group.addoption(
        "--gradetrail-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Override a spec field in every eval, as gradetrail run --set (repeatable).",
    )
    group.addoption(
        "--gradetrail-candidate",
        default=None,
        help="A sweep passes when this cell passes (default: when any candidate does).",
    )
    parser.addini(
        "gradetrail_sweeps",
        type="args",
        default=SWEEP_PATTERNS,
        help="File name patterns of sweep files collected as tests.",
    )
    parser.addini(
        "gradetrail_specs",
        type="args",
        default=DEFAULT_PATTERNS,
        help="File name patterns of eval spec files collected as tests.",
    )


def pytest_collect_file(parent: pytest.Collector, file_path: Path) -> pytest.Collector | None:
    """An :class:`EvalFile` for each spec file matching ``gradetrail_specs``."""
    if file_path.suffix not in (".yaml", ".yml"):
        return None
    patterns = parent.config.getini("gradetrail_specs")
    if any(fnmatch(file_path.name, pattern) for pattern in patterns):
        return EvalFile.from_parent(parent, path=file_path)
    if any(fnmatch(file_path.name, p) for p in parent.config.getini("gradetrail_sweeps")):
        return SweepFile.from_parent(parent, path=file_path)
    return None


class SweepFile(pytest.File):
    """A sweep file: one :class:`SweepItem`."""

    def collect(self) -> list[SweepItem]:
        """The file's one sweep, named after the file."""
        return [SweepItem.from_parent(self, name=self.path.stem)]


class EvalFile(pytest.File):
    """A spec file: one :class:`EvalItem`."""

    def collect(self) -> list[EvalItem]:
        """The file's one eval, named after the file."""
        return [EvalItem.from_parent(self, name=self.path.stem)]


class EvalFailed(Exception):
    """The eval ran but did not meet its check; the message is the report."""


class EvalItem(pytest.Item):
    """One eval run as one test."""

    def runtest(self) -> None:
        """Run the eval (cached) and check it; raise :class:`EvalFailed` on a miss."""
        from gradetrail.ci.check import check_eval
        from gradetrail.errors import GradetrailError

        config = self.config
        root = config.getoption("gradetrail_results_root") or config.rootpath / "results"
        try:
            check = check_eval(
                self.path,
                min_score=config.getoption("gradetrail_min_score"),
                margin=config.getoption("gradetrail_margin"),
                overrides=list(config.getoption("gradetrail_set")),
                results_root=root,
                cache_path=config.getoption("gradetrail_cache"),
            )
        except GradetrailError as exc:
            raise EvalFailed(f"eval {self.path.name} cannot run: {exc}") from None
        self.user_properties.append(("run_dir", str(check.run.run_dir)))
        if not check.passed:
            raise EvalFailed(check.report())

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        """The eval's report, without a traceback into gradetrail."""
        if isinstance(excinfo.value, EvalFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        """Where the item comes from, for pytest's report."""
        return self.path, None, f"eval {self.path.name}"


class SweepItem(pytest.Item):
    """One sweep run as one test: passes when a candidate (or the named one) passes."""

    def runtest(self) -> None:
        """Run the sweep (cached) and gate it; raise :class:`EvalFailed` when none passes."""
        from gradetrail.ci.sweep import check_sweep
        from gradetrail.errors import GradetrailError

        config = self.config
        root = config.getoption("gradetrail_results_root") or config.rootpath / "results"
        try:
            check = check_sweep(
                self.path,
                candidate=config.getoption("gradetrail_candidate"),
                results_root=root,
                cache_path=config.getoption("gradetrail_cache"),
            )
        except GradetrailError as exc:
            raise EvalFailed(f"sweep {self.path.name} cannot run: {exc}") from None
        self.user_properties.append(("sweep_dir", check.table.directory))
        self.user_properties.append(("best", str(check.table.best)))
        if not check.passed:
            raise EvalFailed(check.report())

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        """The sweep's table, without a traceback into gradetrail."""
        if isinstance(excinfo.value, EvalFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        """Where the item comes from, for pytest's report."""
        return self.path, None, f"sweep {self.path.name}"
