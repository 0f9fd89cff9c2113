"""The fake-time event loop of loop_support: timers in deadline order at their exact
times, without waiting, and real I/O still served."""

from __future__ import annotations

import asyncio
import threading
import time

from loop_support import FakeTimeLoop, run_on_fake_time


def test_timers_fire_in_deadline_order_at_their_exact_times() -> None:
    """Sleeps and call_later callbacks run in the order they are due, each at the loop
    time it was set for, whatever order they were set in."""
    fired: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await asyncio.sleep(seconds)
        fired.append((name, asyncio.get_running_loop().time()))

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, FakeTimeLoop) and loop.time() == 0.0
        loop.call_later(0.5, lambda: fired.append(("callback", loop.time())))
        await asyncio.gather(sleeper("late", 3600.0), sleeper("soon", 0.25))
        with_timeout = asyncio.ensure_future(asyncio.wait_for(asyncio.sleep(10), 2.0))
        try:
            await with_timeout
        except TimeoutError:
            fired.append(("timed out", loop.time()))

    run_on_fake_time(main())
    assert fired == [
        ("soon", 0.25),
        ("callback", 0.5),
        ("late", 3600.0),
        ("timed out", 3602.0),
    ]


def test_time_stands_still_while_callbacks_run_and_starts_where_asked() -> None:
    """Work between awaits takes no loop time; a loop may start at any time."""

    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        before = loop.time()
        time.sleep(0.01)  # real time passes, the loop's does not
        await asyncio.sleep(0)
        return before, loop.time()

    assert run_on_fake_time(main(), start=1000.0) == (1000.0, 1000.0)


def test_a_thread_waking_the_loop_is_served() -> None:
    """Real I/O still reaches the loop: a thread's call_soon_threadsafe (the loop's
    self-pipe) wakes a loop with nothing scheduled, and the loop's time does not move."""

    async def main() -> float:
        loop = asyncio.get_running_loop()
        woken = loop.create_future()
        threading.Timer(0.01, loop.call_soon_threadsafe, (woken.set_result, "up")).start()
        assert await woken == "up"
        return loop.time()

    assert run_on_fake_time(main()) == 0.0
