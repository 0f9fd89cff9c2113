"""The user's code off the run's event loop: a python provider's ``model.function`` and
an agent's tools module are the user's, and may block (``time.sleep`` or a blocking
client in an ``async def``), spin or never return. The run's own loop must stay free
whatever they do, or every timeout, the progress display, Ctrl-C and SIGTERM stop with
it.

- A plain function runs in a daemon thread (:func:`in_daemon_thread`).
- A coroutine runs on a :class:`UserLoop`: an event loop in a daemon thread of its own,
  one for the process while it is healthy, so a module-level async client (an
  ``httpx.AsyncClient``) serves every call. The coroutine is driven step by step, so the
  loop knows which call is running and since when. A call that holds its loop for over
  the loop's ``held_s`` without awaiting is not failed for it: it runs on, bounded only
  by its caller's timeout, and its caller is told once (``on_held``). The loop it holds
  is replaced for the calls that arrive after (a held loop ends once its tasks have
  ended), and the calls queued on it that have not taken their first step yet move to
  the new loop, as if submitted there; calls already started keep waiting for it (their
  state lives on that loop). At most ``MAX_HELD`` replaced loops may still be held; past
  that, calls wait on the live loop rather than start yet another thread that a spinning
  coroutine would hold for good.
- A call cancelled (by its caller's timeout) while it holds its loop past ``held_s``
  says so: the cancellation it lets out is ``CancelledError(Blocked(...))``, so the
  caller can tell "it held its loop" from "it waited".

Python cannot stop a thread: a blocked or spinning call keeps its thread until it
returns. A caller that gives up on a call cancels it; the cancellation reaches the
coroutine when it next awaits.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
import types
from collections.abc import Callable, Coroutine, Generator
from typing import Any

__all__ = ["BLOCK_LIMIT_S", "MAX_HELD", "Blocked", "Escaped", "UserLoop", "in_daemon_thread"]

#: seconds a coroutine may hold its loop without awaiting before it counts as holding it
#: (its loop is replaced for later calls, and the caller is told once)
BLOCK_LIMIT_S = 1.0
#: replaced loops still held by a blocking coroutine, at most
MAX_HELD = 2
_BEAT_S = 0.1  # heartbeat interval, seconds
_POLL_S = 0.2  # how often a waiting caller looks at its loop, seconds


class Escaped(Exception):
    """The user's code raised a BaseException that is no Exception (SystemExit,
    KeyboardInterrupt, GeneratorExit, a class of its own) and is not a cancellation; kept
    an ordinary error, because asyncio re-raises such exceptions out of the event loop
    (ending its thread, or the run, with SystemExit's code as the exit code).

    Attributes:
        kind: the exception's class name (``"SystemExit"``, ``"GeneratorExit"``...).
        original: the exception raised.
    """

    def __init__(self, original: BaseException) -> None:
        super().__init__(type(original).__name__)
        self.kind = type(original).__name__
        self.original = original


class Blocked(Exception):
    """Why a call on a :class:`UserLoop` was cancelled: it was holding its loop, without
    awaiting, for longer than the loop's ``held_s``. Never raised on its own: it is the
    argument of the ``CancelledError`` :meth:`UserLoop.run` lets out
    (``exc.args[0]``).

    Attributes:
        label: the call's label (e.g. its sample id), or None.
        held_s: seconds it had held the loop when it was cancelled.
    """

    def __init__(self, label: str | None, held_s: float) -> None:
        super().__init__(f"{label or 'a call'} held its loop for {held_s:.1f} s")
        self.label = label
        self.held_s = held_s


class _Call:
    """One submission of a call to a loop: whether its coroutine has taken a step there
    (``queued`` -> ``started``), or was taken back to go to another loop (``moved``);
    and the longest step it has taken, seconds."""

    __slots__ = ("label", "longest_s", "state")
    _claim = threading.Lock()  # one state change at a time, across the loops' threads

    def __init__(self, label: str | None) -> None:
        self.label = label
        self.state = "queued"
        self.longest_s = 0.0

    def _move(self, old: str, new: str) -> bool:
        with _Call._claim:
            if self.state != old:
                return False
            self.state = new
            return True

    def begin(self) -> bool:
        """On its loop, before the coroutine's first step: False when it was moved."""
        return self._move("queued", "started")

    def withdraw(self) -> bool:
        """From the caller: take back a call that has not started; False once it has."""
        return self._move("queued", "moved")


class _Loop:
    """One event loop in its daemon thread, its heartbeat, and the call mid-step."""

    def __init__(self, name: str, held_s: float) -> None:
        self.loop = asyncio.new_event_loop()
        self.held_s = held_s
        self.beat = time.monotonic()
        self.step: tuple[_Call, float] | None = None  # the call running, since (monotonic)
        self.replaced = False
        self._calls = 0  # calls submitted here and not yet ended (see submit)
        self._calls_lock = threading.Lock()
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
        if self.replaced and not self._calls and not asyncio.all_tasks(self.loop):
            self.loop.stop()
            return
        self.loop.call_later(_BEAT_S, self._heartbeat)

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        """Run ``coro`` on this loop; it is counted until it ends, so a replaced loop
        never stops under a call (counted before it is handed over: its task does not
        exist until the loop takes it, and the heartbeat may look in between)."""
        with self._calls_lock:
            self._calls += 1
        try:
            done = asyncio.run_coroutine_threadsafe(coro, self.loop)
        except BaseException:
            self._ended(None)
            raise
        done.add_done_callback(self._ended)
        return done

    def _ended(self, _: object) -> None:
        with self._calls_lock:
            self._calls -= 1

    def holding(self, call: _Call) -> float | None:
        """Seconds ``call`` has been mid-step, when it is the call holding the loop now
        for longer than ``held_s``; else None."""
        step = self.step
        if step is None or step[0] is not call:
            return None
        held = time.monotonic() - step[1]
        return held if held > self.held_s else None


class UserLoop:
    """Where the user's coroutines run: one live :class:`_Loop` at a time.

    Args:
        name: the name of the loops' threads (seen in a thread dump).
        held_s: seconds a call may hold a loop without awaiting (or its heartbeat may be
            late) before the loop counts as held: calls after it go to a new loop (a
            loop's async clients do not follow them) and the holder's ``on_held`` is told.
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
        on_held: Callable[[float, bool], None] | None = None,
    ) -> Any:
        """Await ``coro`` on the live loop from the caller's loop.

        While it waits, the caller looks at the loop every 0.2 s: when the loop is held
        by another call and ``coro`` has not started, it moves to a new loop (no error, no
        second run: the coroutine had not taken a step).

        Args:
            coro: the user's coroutine (not yet started).
            label: what names this call (its sample id), in :class:`Blocked`.
            on_held: called at most once, on the caller's loop, the first time this call
                is seen holding its loop past ``held_s`` without awaiting, with the
                seconds it held it (so far, or in all) and whether it still holds it.

        Returns:
            What ``coro`` returned.

        Raises:
            asyncio.CancelledError: the caller cancelled the call (its timeout); with a
                :class:`Blocked` as its argument when the call was holding its loop.
            Escaped: ``coro`` raised SystemExit or KeyboardInterrupt.
            Exception: whatever else ``coro`` raised.
        """
        where = self._current()
        call = _Call(label)
        done = where.submit(_guarded(coro, where, call))
        waiting = asyncio.wrap_future(done)
        told = on_held is None
        try:
            while True:
                finished, _ = await asyncio.wait({waiting}, timeout=_POLL_S)
                held = where.holding(call)
                if not told and (held is not None or call.longest_s > self.held_s):
                    told = True
                    on_held(held or call.longest_s, held is not None)  # type: ignore[misc]
                if finished:
                    return waiting.result()
                if call.state == "queued" and where.held():
                    fresh = self._current()
                    if fresh is not where and call.withdraw():
                        done.cancel()  # never started: its task ends at once on that loop
                        where, call = fresh, _Call(label)
                        moved = _guarded(coro, where, call)
                        done = where.submit(moved)
                        waiting = asyncio.wrap_future(done)
        except asyncio.CancelledError:
            held = where.holding(call)
            if held is not None:
                raise asyncio.CancelledError(Blocked(label, held)) from None
            raise
        finally:
            done.cancel()  # a no-op once it finished; else the task is cancelled on its loop
            if call.withdraw():  # it never started: close it (no "never awaited" warning)
                coro.close()


async def _guarded(coro: Coroutine[Any, Any, Any], where: _Loop, call: _Call) -> Any:
    try:
        return await _stepped(coro, where, call)
    except (Exception, asyncio.CancelledError):
        raise
    except BaseException as exc:  # SystemExit, GeneratorExit...: the user's, not the run's
        raise Escaped(exc) from None


@types.coroutine
def _stepped(coro: Coroutine[Any, Any, Any], where: _Loop, call: _Call) -> Generator[Any, Any, Any]:
    """Drive ``coro`` as ``await`` would, step by step, noting on ``where`` which call is
    running and since when (what :meth:`_Loop.holding` reads from another thread), and on
    ``call`` its longest step. Returns None at once, without touching ``coro``, when the
    call was moved to another loop before its first step."""
    if not call.begin():
        return None
    value: Any = None
    error: BaseException | None = None
    while True:
        since = time.monotonic()
        where.step = (call, since)
        try:
            out = coro.send(value) if error is None else coro.throw(error)
        except StopIteration as stop:
            return stop.value
        finally:
            where.step = None
            call.longest_s = max(call.longest_s, time.monotonic() - since)
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
        Escaped: ``fn`` raised another BaseException that is no Exception (SystemExit,
            GeneratorExit).
        Exception: whatever else ``fn`` raised.
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
        except Exception as exc:  # handed to the awaiting coroutine, not lost
            hand_back(False, exc)
        except BaseException as exc:  # SystemExit, GeneratorExit: never out of the run's loop
            hand_back(False, Escaped(exc))
        else:
            hand_back(True, result)

    threading.Thread(target=target, name="gradetrail-python-provider", daemon=True).start()
    return await future
