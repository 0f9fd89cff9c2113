"""A sweep as one CI check: run its cells (cached), gate them against the baseline, and
pass when a candidate passes (or the named one does). The pytest plugin collects sweep
files through this function."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gradetrail.analysis.sweep import SweepTable

__all__ = ["SweepCheck", "check_sweep"]


@dataclass(frozen=True)
class SweepCheck:
    """The outcome of one CI check of a sweep.

    Attributes:
        table: the sweep's table.
        candidate: the cell that had to pass, or None for any candidate.
        passed: that cell (or any candidate) passed.
    """

    table: SweepTable
    candidate: str | None
    passed: bool

    def report(self) -> str:
        """The verdict line, then the table as ``gradetrail sweep`` prints it."""
        from gradetrail._util.terminal import clean
        from gradetrail.report.sweep import sweep_lines

        what = f"cell {self.candidate}" if self.candidate else "a candidate"
        head = f"sweep {self.table.name}: {what} {'passed' if self.passed else 'did not pass'}"
        return "\n".join([head, *(clean(line) for line in sweep_lines(self.table))])


def check_sweep(
    path: str | Path,
    *,
    candidate: str | None = None,
    results_root: str | Path = "results",
    cache_path: str | Path | None = None,
) -> SweepCheck:
    """Run the sweep file at ``path`` and gate it.

    Raises:
        GradetrailError: the sweep cannot run or its cells cannot be compared (the
            message says what to fix), or the candidate is the baseline; RunError when a
            cell was interrupted (BudgetExhausted, exit code 3, when a spending ceiling
            stopped it: running it again stops there again).
    """
    from gradetrail.analysis.sweep import sweep_table
    from gradetrail.engine.sweep import run_sweep
    from gradetrail.errors import RunError
    from gradetrail.executors.budget import BudgetExhausted
    from gradetrail.spec.sweep import load_sweep

    sweep = load_sweep(path)
    if candidate is not None:
        sweep.candidate_cell(candidate, "candidate")
    done = run_sweep(sweep, results_root=results_root, cache_path=cache_path)
    if done.interrupted and done.stop_reason is not None:  # a ceiling: again stops again
        stopped = next((c.name for c in done.record.cells if c.outcome == "interrupted"), "?")
        raise BudgetExhausted(f"sweep {sweep.name}: cell {stopped}: {done.stop_reason}")
    if done.interrupted:
        raise RunError(f"sweep {sweep.name} was interrupted; run it again to finish it")
    table = sweep_table(done.directory)
    return SweepCheck(table, candidate, table.passed(candidate))
