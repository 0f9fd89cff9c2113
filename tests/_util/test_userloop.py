"""gradetrail._util.userloop: where the user's coroutines run, off the run's event loop."""

from __future__ import annotations

import asyncio
import threading
import time

from gradetrail._util.userloop import MAX_HELD, Blocked, UserLoop


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


def _thread() -> str:
    return f"{threading.current_thread().name}-{threading.get_ident()}"


def test_a_call_that_holds_its_loop_runs_on_and_queued_calls_move_without_error() -> None:
    """A call holding its loop past held_s is not failed: it returns what it returns, and
    on_held is told once, with how long it held. A call queued behind it that has not started
    moves to a fresh loop and is answered while the hold lasts; a call already started
    on the held loop waits for it there, and is answered too; neither is told."""
    release = threading.Event()
    users = UserLoop("test-userloop-held", held_s=0.2)
    told: dict[str, list[tuple[float, bool]]] = {"holder": [], "queued": [], "started": []}
    began: list[str] = []

    async def hold() -> str:
        began.append("holder")
        release.wait(60)  # holds the loop without awaiting
        await asyncio.sleep(0)
        time.sleep(0.3)  # and again: on_held is not told twice
        return _thread()

    async def started() -> str:
        began.append("started")
        while "holder" not in began:  # so it can end only once the hold has begun
            await asyncio.sleep(0.01)
        return _thread()

    async def queued() -> str:
        await asyncio.sleep(0)
        return _thread()

    def run(coro, name: str) -> asyncio.Future:  # noqa: ANN001
        return asyncio.ensure_future(
            users.run(coro, label=name, on_held=lambda s, now: told[name].append((s, now)))
        )

    async def main() -> tuple[str, str, str]:
        try:
            waiter = run(started(), "started")
            await _until(lambda: began == ["started"], "the started call's first step")
            holder = run(hold(), "holder")
            await _until(lambda: began == ["started", "holder"], "the hold")
            moved = run(queued(), "queued")  # submitted before the hold counts: queued
            moved_thread = await asyncio.wait_for(moved, 30)  # a hang guard, not a bound
            assert not holder.done() and not waiter.done()
        finally:
            release.set()
        return await holder, await waiter, moved_thread

    holder, waiter, moved = asyncio.run(main())
    assert holder == waiter != moved  # the started call stayed; the queued one moved
    assert len(told["holder"]) == 1
    held_s, _ = told["holder"][0]  # told while it holds, or (a loaded machine's poll
    assert held_s > 0.2  # coming late) once it has let go: either way, with its hold
    assert told["queued"] == told["started"] == []


def test_a_call_cancelled_while_it_holds_its_loop_says_so() -> None:
    """Cut off by a timeout while it holds its loop, a call lets out CancelledError with a
    Blocked naming it (what asyncio.timeout chains to its TimeoutError); a call cut off
    while it awaits lets out a plain CancelledError."""
    stop = threading.Event()
    users = UserLoop("test-userloop-cut", held_s=0.1)

    async def hold() -> None:
        stop.wait(60)

    async def wait() -> None:
        await asyncio.sleep(60)

    async def cut(coro, label: str) -> BaseException | None:  # noqa: ANN001
        try:
            async with asyncio.timeout(0.5):
                await users.run(coro, label=label)
        except TimeoutError as exc:
            return exc.__context__
        return None

    async def main() -> tuple[BaseException | None, BaseException | None]:
        try:
            return await cut(wait(), "s0"), await cut(hold(), "s1")
        finally:
            stop.set()

    waited, held = asyncio.run(main())
    assert isinstance(waited, asyncio.CancelledError) and waited.args == ()
    assert isinstance(held, asyncio.CancelledError)
    blocked = held.args[0]
    assert isinstance(blocked, Blocked) and blocked.label == "s1" and blocked.held_s > 0.1
