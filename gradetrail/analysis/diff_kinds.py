"""The kinds of :mod:`gradetrail.analysis.diff`, in a module of their own: the ``diff``
command's help names them without importing the comparison (nor the gate and the run
readers it needs)."""

from __future__ import annotations

from typing import Literal

__all__ = ["KINDS", "DiffKind"]

DiffKind = Literal[
    "improved", "regressed", "changed", "same", "error", "only_baseline", "only_candidate"
]
#: every kind, in the order counts are shown
KINDS: tuple[DiffKind, ...] = (
    "improved",
    "regressed",
    "changed",
    "error",
    "only_baseline",
    "only_candidate",
    "same",
)
