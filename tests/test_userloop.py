"""gradetrail.userloop: where the user's coroutines run, off the run's event loop."""

from __future__ import annotations

import asyncio
import threading

from gradetrail.userloop import MAX_HELD, Blocked, UserLoop


async def _until(condition, what: str) -> None:  # noqa: ANN001
    for _ in range(3000):  # a hang guard, not a bound: conditions come in milliseconds
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never saw {what}")


def test_a_held_loop_is_replaced_at_most_max_held_times() -> None:
    """A coroutine holding its loop sends the calls after it to a new loop; once MAX_HELD
    replaced loops are still held, a call waits on the live loop instead of starting
    another thread (which a spinning coroutine would keep for good), and runs there once
    the hold ends."""
    release = threading.Event()
    started: list[str] = []
    users = UserLoop("test-userloop", held_s=0.05)

    async def hold() -> str:
        me = f"{threading.current_thread().name}-{threading.get_ident()}"
        started.append(me)
        release.wait(60)  # holds the loop without awaiting
        return me

    async def main() -> list[str]:
        calls = []
        try:
            for n in range(1, MAX_HELD + 2):
                calls.append(asyncio.ensure_future(users.run(hold())))
                await _until(lambda n=n: len(started) == n, f"hold {n} start")
                await asyncio.sleep(0.1)  # past held_s: the heartbeat has stopped
            calls.append(asyncio.ensure_future(users.run(hold())))
            await asyncio.sleep(0.1)
            assert len(started) == MAX_HELD + 1  # queued on the live loop, not a new one
        finally:
            release.set()
        return list(await asyncio.gather(*calls))

    threads = asyncio.run(main())
    assert len(set(threads)) == MAX_HELD + 1
    assert threads[-1] == threads[-2]


def test_a_call_that_holds_its_loop_past_the_bound_is_named() -> None:
    """With a block bound, the call holding the loop raises Blocked(own=True) and a call
    waiting behind it Blocked(own=False) naming the holder; a call that awaits is never
    Blocked."""
    release = threading.Event()
    users = UserLoop("test-userloop-bound", held_s=10.0)

    async def hold() -> None:
        release.wait(60)

    async def behave() -> str:
        await asyncio.sleep(0)
        return "ok"

    async def main() -> list[object]:
        try:
            assert await users.run(behave(), label="first", block_limit_s=0.1) == "ok"
            holder = asyncio.ensure_future(users.run(hold(), label="s1", block_limit_s=0.1))
            await asyncio.sleep(0)
            waiter = users.run(behave(), label="s2", block_limit_s=0.1)
            return await asyncio.gather(holder, waiter, return_exceptions=True)
        finally:
            release.set()

    holder, waiter = asyncio.run(main())
    assert isinstance(holder, Blocked) and holder.own and holder.culprit == "s1"
    assert isinstance(waiter, Blocked) and not waiter.own and waiter.culprit == "s1"
