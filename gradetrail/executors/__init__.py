"""Executors: where provider calls run (local asyncio; Ray later)."""

from gradetrail.executors.base import Executor
from gradetrail.executors.local import LocalExecutor

__all__ = ["Executor", "LocalExecutor"]
