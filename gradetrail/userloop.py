"""The user's code off the run's event loop: a python provider's ``model.function`` and
an agent's tools module are the user's, and may block (``time.sleep`` or a blocking
client in an ``async def``), spin or never return. The run's own loop must stay free
whatever they do, or every timeout, the progress display, Ctrl-C and SIGTERM stop with
it.

- A plain function runs in a daemon thread (:func:`in_daemon_thread`).
- A coroutine runs on a :class:`UserLoop`: an event loop in a daemon thread of its own,
  one for the process while it is healthy, so a module-level async client (an
  ``httpx.AsyncClient``) serves every call. The coroutine is driven step by step, so the
  loop knows which call is running and since when: a call that holds the loop past a
  bound without awaiting is named (:class:`Blocked`), and the loop it holds is replaced
  for the calls after it (it ends once its tasks have ended). At most ``MAX_HELD``
  replaced loops may still be held; past that, calls wait on the live loop rather than
  start yet another thread that a spinning coroutine would hold for good.

Python cannot stop a thread: a blocked or spinning call keeps its thread until it
returns. A caller that gives up on a call cancels it; the cancellation reaches the
coroutine when it next awaits.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import types
from collections.abc import Callable, Coroutine, Generator
from typing import Any

__all__ = ["BLOCK_LIMIT_S", "Blocked", "Escaped", "UserLoop", "in_daemon_thread"]

#: seconds a coroutine may hold its loop without awaiting before it counts as blocking
BLOCK_LIMIT_S = 1.0
#: replaced loops still held by a blocking coroutine, at most
MAX_HELD = 2
_BEAT_S = 0.1  # heartbeat interval, seconds
_POLL_S = 0.2  # how often a caller that watches for blocking looks, seconds


class Escaped(Exception):
    """The user's code raised SystemExit or KeyboardInterrupt; kept an ordinary error,
    because asyncio re-raises both out of the event loop (ending its thread, or the run
    with SystemExit's code as the exit code).

    Attributes:
        kind: ``"SystemExit"`` or ``"KeyboardInterrupt"``.
        original: the exception raised.
    """

    def __init__(self, original: BaseException) -> None:
        super().__init__(type(original).__name__)
        self.kind = type(original).__name__
        self.original = original


class Blocked(Exception):
    """A call on a :class:`UserLoop` held it past the bound without awaiting.

    Attributes:
        own: True when this call is the one holding the loop; False when it is waiting
            for another call that holds it.
        culprit: the label of the call holding the loop (e.g. its sample id), or None.
        held_s: seconds the loop has been held, so far.
    """

    def __init__(self, own: bool, culprit: str | None, held_s: float) -> None:
        super().__init__(f"the loop has been held for {held_s:.1f} s by {culprit or 'a call'}")
        self.own = own
        self.culprit = culprit
        self.held_s = held_s


class _Call:
    """One call on a loop: what :class:`Blocked` names it by."""

    __slots__ = ("label",)

    def __init__(self, label: str | None) -> None:
        self.label = label


class _Loop:
    """One event loop in its daemon thread, its heartbeat, and the call mid-step."""

    def __init__(self, name: str, held_s: float) -> None:
        self.loop = asyncio.new_event_loop()
        self.held_s = held_s
        self.beat = time.monotonic()
        self.step: tuple[_Call, float] | None = None  # the call running, since (monotonic)
        self.replaced = False
        started = threading.Event()
        self.loop.call_soon(self._heartbeat, started)
        threading.Thread(target=self.loop.run_forever, name=name, daemon=True).start()
        started.wait()

    def held(self) -> bool:
        """Its heartbeat is late: something holds the loop (or its thread has ended)."""
        return time.monotonic() - self.beat > self.held_s or not self.loop.is_running()

    def _heartbeat(self, started: threading.Event | None = None) -> None:
        """Every _BEAT_S on the loop; a replaced loop stops once its tasks have ended."""
        self.beat = time.monotonic()
        if started is not None:
            started.set()
        if self.replaced and not asyncio.all_tasks(self.loop):
            self.loop.stop()
            return
        self.loop.call_later(_BEAT_S, self._heartbeat)

    def blocked(self, call: _Call, limit_s: float) -> Blocked | None:
        """:class:`Blocked` when a call has been mid-step longer than ``limit_s``."""
        step = self.step
        if step is None:
            return None
        held = time.monotonic() - step[1]
        if held <= limit_s:
            return None
        return Blocked(step[0] is call, step[0].label, held)


class UserLoop:
    """Where the user's coroutines run: one live :class:`_Loop` at a time.

    Args:
        name: the name of the loops' threads (seen in a thread dump).
        held_s: seconds without a heartbeat after which the live loop counts as held, and
            calls after it go to a new loop (a loop's async clients do not follow them).
    """

    def __init__(self, name: str, held_s: float) -> None:
        self.name = name
        self.held_s = held_s
        self._lock = threading.Lock()
        self._live: _Loop | None = None
        self._old: list[_Loop] = []

    def _current(self) -> _Loop:
        """The live loop, replaced by a new one when it is held (unless MAX_HELD replaced
        loops are still held) or its thread has ended."""
        with self._lock:
            live = self._live
            if live is not None and live.held() and live.loop.is_running():
                self._old = [old for old in self._old if old.loop.is_running() and old.held()]
                if len(self._old) >= MAX_HELD:
                    return live
            if live is None or live.held():
                if live is not None:
                    live.replaced = True
                    self._old.append(live)
                live = self._live = _Loop(self.name, self.held_s)
            return live

    async def run(
        self,
        coro: Coroutine[Any, Any, Any],
        *,
        label: str | None = None,
        block_limit_s: float | None = None,
    ) -> Any:
        """Await ``coro`` on the live loop from the caller's loop.

        Args:
            coro: the user's coroutine (not yet started).
            label: what names this call in another call's :class:`Blocked`.
            block_limit_s: seconds a call may hold the loop without awaiting; None: no
                bound (the caller's own timeout is the only one).

        Returns:
            What ``coro`` returned.

        Raises:
            Blocked: the loop was held past ``block_limit_s``, by this call (``own``) or
                by another; this call is cancelled.
            Escaped: ``coro`` raised SystemExit or KeyboardInterrupt.
            Exception: whatever else ``coro`` raised.
        """
        where = self._current()
        call = _Call(label)
        done = asyncio.run_coroutine_threadsafe(_guarded(coro, where, call), where.loop)
        waiting = asyncio.wrap_future(done)
        try:
            if block_limit_s is None:
                return await waiting
            while True:
                finished, _ = await asyncio.wait({waiting}, timeout=_POLL_S)
                if finished:
                    return waiting.result()
                blocked = where.blocked(call, block_limit_s)
                if blocked is not None:
                    raise blocked
        finally:
            done.cancel()  # a no-op once it finished; else the task is cancelled on its loop


async def _guarded(coro: Coroutine[Any, Any, Any], where: _Loop, call: _Call) -> Any:
    try:
        return await _stepped(coro, where, call)
    except (SystemExit, KeyboardInterrupt) as exc:
        raise Escaped(exc) from None


@types.coroutine
def _stepped(coro: Coroutine[Any, Any, Any], where: _Loop, call: _Call) -> Generator[Any, Any, Any]:
    """Drive ``coro`` as ``await`` would, step by step, noting on ``where`` which call is
    running and since when (what :meth:`_Loop.blocked` reads from another thread)."""
    value: Any = None
    error: BaseException | None = None
    while True:
        where.step = (call, time.monotonic())
        try:
            out = coro.send(value) if error is None else coro.throw(error)
        except StopIteration as stop:
            return stop.value
        finally:
            where.step = None
        try:
            value, error = (yield out), None
        except BaseException as exc:  # thrown in by the task (a cancellation): pass it on
            value, error = None, exc


async def in_daemon_thread(fn: Callable[[Any], Any], request: Any) -> Any:
    """Run a sync function ``fn(request)`` in a daemon thread and await its result.

    Not ``asyncio.to_thread``: a function that never returns would keep the default thread
    pool, and so ``asyncio.run`` and the process, from ever ending after the per-attempt
    timeout gave up on it. A daemon thread is abandoned at exit instead.

    Raises:
        RuntimeError: ``fn`` raised KeyboardInterrupt (its own, not the user's Ctrl-C).
        BaseException: whatever else ``fn`` raised.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():
            (future.set_result if ok else future.set_exception)(value)

    def hand_back(ok: bool, value: Any) -> None:
        # the run may have ended (Ctrl-C, SIGTERM) while the function ran: then nobody waits
        with contextlib.suppress(RuntimeError):  # "Event loop is closed"
            loop.call_soon_threadsafe(settle, ok, value)

    def target() -> None:
        try:
            result = fn(request)
        except KeyboardInterrupt:  # raised by the function itself: not the user's Ctrl-C
            hand_back(False, RuntimeError("the function raised KeyboardInterrupt"))
        except BaseException as exc:  # handed to the awaiting coroutine, not lost
            hand_back(False, exc)
        else:
            hand_back(True, result)

    threading.Thread(target=target, name="gradetrail-python-provider", daemon=True).start()
    return await future
