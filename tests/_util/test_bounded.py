"""Bounded calls keep their time bound while arming the timer once, not once a call: an
alarm armed by an earlier call re-arms for the running call's own deadline, one past it
stops the call, one between calls disarms."""

from __future__ import annotations

import signal
import time

import pytest

from gradetrail._util.bounded import BoundedCalls, CallTimedOut


class Clock:
    """A settable monotonic clock."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def counting(bounded: BoundedCalls) -> list[float]:
    """Record every arming of ``bounded``'s timer (the timer is still armed)."""
    armed: list[float] = []
    arm = bounded._arm

    def record(seconds: float) -> None:
        armed.append(seconds)
        arm(seconds)

    bounded._arm = record  # type: ignore[method-assign]
    return armed


def test_many_calls_arm_the_timer_once() -> None:
    """1,000 quick scores arm the timer once (no two system calls a score)."""
    with BoundedCalls(30.0) as bounded:
        armed = counting(bounded)
        assert [bounded.call(len, "abc") for _ in range(1000)] == [3] * 1000
    assert armed == [30.0]


def test_an_earlier_calls_alarm_rearms_for_the_running_calls_deadline() -> None:
    """The alarm armed by call 1 arrives during call 2, before call 2's own bound: call 2
    goes on, the timer re-armed for what is left of its bound; an alarm past that bound
    stops it."""
    clock = Clock()
    with BoundedCalls(10.0, clock=clock) as bounded:
        armed = counting(bounded)
        bounded.call(len, "first")  # armed at 100 for 10 s; ends at once
        clock.now = 106.0  # call 2 starts: its deadline is 116

        def alarm_at(now: float) -> str:
            clock.now = now
            bounded._handler(signal.SIGALRM, None)  # as the kernel would deliver it
            return "done"

        assert bounded.call(alarm_at, 110.0) == "done"  # call 1's expiry: not call 2's
        assert armed == [10.0, pytest.approx(6.0)]
        clock.now = 120.0  # call 3: its deadline is 130
        with pytest.raises(CallTimedOut):
            bounded.call(alarm_at, 130.5)


def test_an_alarm_between_calls_disarms_and_the_next_call_arms_again() -> None:
    """An alarm with no call running stops nothing, and the next call arms afresh."""
    clock = Clock()
    with BoundedCalls(5.0, clock=clock) as bounded:
        armed = counting(bounded)
        bounded.call(len, "x")
        clock.now = 105.0
        bounded._handler(signal.SIGALRM, None)  # idle: nothing to stop
        assert bounded.call(len, "yz") == 2
    assert armed == [5.0, 5.0]


def test_a_real_alarm_still_stops_a_slow_call_after_quick_ones() -> None:
    """With the timer armed by earlier calls, a Python loop that never ends is still
    interrupted by SIGALRM (the hang guard only fails the test)."""

    def spin() -> None:
        guard = time.monotonic() + 60
        while time.monotonic() < guard:
            pass
        pytest.fail("the bound never stopped the call")

    with BoundedCalls(0.2) as bounded:
        for _ in range(50):
            bounded.call(len, "quick")
        with pytest.raises(CallTimedOut):
            bounded.call(spin)
