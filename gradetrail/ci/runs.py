"""The warnings of the two runs a gate compared, read from their manifests."""

from __future__ import annotations

from gradetrail.analysis.gate import GateResult
from gradetrail.errors import GradetrailError

__all__ = ["gate_run_warnings"]


def gate_run_warnings(result: GateResult) -> dict[str, list[str]]:
    """``{"baseline": [...], "candidate": [...]}``: each run's
    :func:`~gradetrail.rundir.manifest.run_warnings` (a manifest that can no longer be read is
    itself the warning)."""
    from gradetrail.rundir.manifest import run_warnings
    from gradetrail.rundir.results import read_manifest

    out: dict[str, list[str]] = {}
    for label, path in (("baseline", result.baseline), ("candidate", result.candidate)):
        try:
            out[label] = run_warnings(read_manifest(path))
        except GradetrailError as exc:
            out[label] = [str(exc)]
    return out
