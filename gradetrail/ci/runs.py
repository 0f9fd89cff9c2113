"""The warnings of the two runs a gate compared, read from their manifests."""

from __future__ import annotations

from gradetrail.errors import GradetrailError
from gradetrail.gate import GateResult

__all__ = ["gate_run_warnings"]


def gate_run_warnings(result: GateResult) -> dict[str, list[str]]:
    """``{"baseline": [...], "candidate": [...]}``: each run's
    :func:`~gradetrail.manifest.run_warnings` (a manifest that can no longer be read is
    itself the warning)."""
    from gradetrail.manifest import run_warnings
    from gradetrail.results import read_manifest

    out: dict[str, list[str]] = {}
    for label, path in (("baseline", result.baseline), ("candidate", result.candidate)):
        try:
            out[label] = run_warnings(read_manifest(path))
        except GradetrailError as exc:
            out[label] = [str(exc)]
    return out
