"""Executors: where provider calls run (local asyncio; Ray workers in
:mod:`gradetrail.executors.ray`, imported only when chosen)."""

from gradetrail.executors.base import Executor
from gradetrail.executors.local import LocalExecutor

__all__ = ["Executor", "LocalExecutor"]
