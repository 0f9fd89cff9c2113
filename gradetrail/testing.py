"""Helpers for testing evals and gradetrail itself: :func:`assert_eval` runs an eval as a
test; :class:`FakeClock` lets retries and rate limits be checked without waiting.

:class:`FakeClock` is an injectable clock and sleep pair: ``sleep`` records each delay,
advances the clock by it and returns at once, so backoff, Retry-After pauses and
per-sample ceilings can be checked exactly::

    clock = FakeClock()
    executor = LocalExecutor(provider, policy, 4, sleep=clock.sleep, clock=clock.now)
    ...
    assert clock.slept == [3.0, 3.0]   # two 429s with Retry-After: 3
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["EvalAssertionError", "FakeClock", "assert_eval"]


class FakeClock:
    """A monotonic clock that only moves when something sleeps on it.

    Args:
        start: the initial time, seconds.

    Attributes:
        slept: every delay passed to :meth:`sleep`, in order, seconds.
    """

    def __init__(self, start: float = 1000.0) -> None:
        self.time = start
        self.slept: list[float] = []

    def now(self) -> float:
        """The current fake time, seconds (use as ``clock=``)."""
        return self.time

    async def sleep(self, seconds: float) -> None:
        """Record ``seconds``, advance the clock by it, and yield to the event loop once
        (use as ``sleep=``)."""
        self.slept.append(seconds)
        self.time += max(seconds, 0.0)
        await asyncio.sleep(0)


class EvalAssertionError(AssertionError):
    """An eval did not meet its CI check; the message is the check's report.

    Attributes:
        check: the :class:`~gradetrail.ci.check.EvalCheck` (run, threshold, gate).
    """

    def __init__(self, check: Any) -> None:
        super().__init__(check.report())
        self.check = check


def assert_eval(spec: Any, **kwargs: Any) -> Any:
    """Run an eval and assert it meets its CI check, for tests written by hand::

        def test_support_bot():
            assert_eval("evals/support.yaml", min_score=0.8)

    ``spec`` is a spec file's path or a loaded spec; the keyword arguments are those of
    :func:`gradetrail.ci.check.check_eval` (``min_score``, ``baseline``, ``margin``,
    ``overrides``, ``results_root``, ``cache_path``); the spec's ``ci:`` section fills in
    what they leave out. Returns the passing :class:`~gradetrail.ci.check.EvalCheck`.

    Raises:
        EvalAssertionError: the run is incomplete, nothing scored, the 95% CI lower bound
            is under ``min_score``, or the run is not non-inferior to the baseline; its
            message is the run summary with the regressed samples.
        SpecError, DatasetError, ProviderError, RunError: the eval cannot run at all.
    """
    from gradetrail.ci.check import check_eval

    check = check_eval(spec, **kwargs)
    if not check.passed:
        raise EvalAssertionError(check)
    return check
