"""The driver's end of one Ray worker: attempts go out in batches, outcomes come back in
batches, and a lost worker fails what it holds.

The attempts made in one turn of the driver's event loop go to a worker in one
``submit``, and one outstanding ``collect`` brings back every attempt the worker has
finished since the last one (the worker's side is
:class:`~gradetrail.executors._ray_worker.ProviderWorker`), so Ray's per-call cost is paid
per batch. The driver awaits ObjectRefs on its event loop (never ``ray.get``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gradetrail.errors import ProviderConnectionError, ProviderError
from gradetrail.executors._ray_worker import Call, Failure
from gradetrail.executors.ray_cluster import failure_reason
from gradetrail.providers.base import Request, Response

__all__ = ["WorkerLink", "WorkerStats"]

#: seconds a worker that Ray reported unavailable is passed over by the dispatcher
COOL_DOWN_S = 2.0


@dataclass(slots=True)
class WorkerStats:
    """One worker as the driver saw it.

    Attributes:
        index: 0-based worker number.
        node_id: Ray's id of the node it runs on (hex).
        host: that node's host name.
        pid: its process id (the latest, after a restart).
        served: attempts it answered (a response or a provider error).
        lost: attempts lost because the worker died or was unavailable.
        peak_in_flight: most attempts it held at once.
    """

    index: int
    node_id: str
    host: str
    pid: int
    served: int = 0
    lost: int = 0
    peak_in_flight: int = 0


class _Lost(Exception):
    """The worker holding an attempt was lost (it died, or is unavailable while Ray
    restarts it)."""

    def __init__(self, cause: str, died: bool) -> None:
        super().__init__(cause)
        self.cause, self.died = cause, died


class WorkerLink:
    """One worker (a Ray actor) as the driver holds it: its attempts in flight, the batch
    not sent yet, and its statistics.

    Args:
        handle: the actor.
        stats: its statistics (node, host, pid as it registered).
        ray: the ``ray`` module (for its exceptions).
        register: ``register(slot)``: register the provider of ``slot`` on this worker
            again (an ObjectRef of its registration), for a worker that restarted.

    Attributes:
        in_flight: attempts it holds now.
        dead: True once Ray reported it dead (it is never picked again).
        passed_over_until: ``time.monotonic()`` until which it is passed over (Ray
            reported it unavailable).
    """

    def __init__(
        self,
        handle: Any,
        stats: WorkerStats,
        ray: Any,
        register: Callable[[int], Awaitable[dict[str, Any]]],
    ) -> None:
        self.handle, self.stats = handle, stats
        self._ray, self._register = ray, register
        self.in_flight = 0
        self.dead = False
        self.passed_over_until = 0.0
        #: attempt id -> the future its outcome resolves
        self.pending: dict[int, asyncio.Future[Any]] = {}
        self._outbox: list[Call] = []  # not submitted yet
        self._cancels: list[int] = []  # ids not cancelled on the worker yet
        self._flushing = False
        self.collector: asyncio.Task[None] | None = None

    async def call(self, call_id: int, slot: int, request: Request) -> Response:
        """One attempt at ``request`` on this worker, as attempt ``call_id``.

        Raises:
            ProviderError: what the provider answered; a ProviderConnectionError
                (transient) when the worker was lost mid-call.
        """
        self.in_flight += 1
        stats = self.stats
        stats.peak_in_flight = max(stats.peak_in_flight, self.in_flight)
        try:
            out = await self._attempt(call_id, slot, request)
        except _Lost as exc:
            stats.lost += 1
            error = ProviderConnectionError(
                f"Ray worker {stats.index} (pid {stats.pid} on {stats.host}) was lost during "
                f"the call: {exc.cause}"
            )
            error.maybe_billed = True  # the request may have reached the provider
            raise error from None
        finally:
            self.in_flight -= 1
        stats.served += 1
        if isinstance(out, ProviderError):
            raise out
        if isinstance(out, Failure):  # the provider failed, unclassified
            raise ProviderError(f"Ray worker {stats.index}: {out.reason}")
        return out

    async def _attempt(self, call_id: int, slot: int, request: Request) -> Any:
        future = asyncio.get_running_loop().create_future()
        self.pending[call_id] = future
        self._outbox.append(Call(call_id, slot, request))
        self._schedule()
        try:
            return await future
        except asyncio.CancelledError:  # timeout or Ctrl-C: stop the call on the worker too
            if self.pending.pop(call_id, None) is not None:
                self._cancels.append(call_id)
                self._schedule()
            raise

    def _schedule(self) -> None:
        """Send what this turn of the event loop queued in one batch, and keep one
        ``collect`` outstanding while the worker holds attempts."""
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().call_soon(self._flush)
        if self.pending and (self.collector is None or self.collector.done()):
            self.collector = asyncio.ensure_future(self._collect())

    def _flush(self) -> None:
        self._flushing = False
        calls, self._outbox = self._outbox, []
        cancels, self._cancels = self._cancels, []
        calls = [c for c in calls if c.id in self.pending]
        if calls:
            asyncio.ensure_future(self._submit(calls))
        if cancels:
            asyncio.ensure_future(self._quietly(self.handle.cancel.remote(cancels)))

    async def _submit(self, calls: list[Call], again: bool = False) -> None:
        try:
            missing = await self.handle.submit.remote(calls)
            if missing:  # the worker restarted and lost its providers: register them again
                retry = [c for c in calls if c.id in set(missing) and c.id in self.pending]
                if again:
                    self._fail([c.id for c in retry], "it lost its providers twice")
                    return
                infos = await asyncio.gather(
                    *(self._register(s) for s in sorted({c.slot for c in retry}))
                )
                self.stats.pid = infos[0]["pid"]
                await self._submit(retry, again=True)
        except self._ray.exceptions.RayActorError as exc:
            self._lose(exc)
        except self._ray.exceptions.RayError as exc:  # a submit that failed on the worker
            self._fail([c.id for c in calls], failure_reason(exc))

    async def _collect(self) -> None:
        while self.pending and not self.dead:
            try:
                done = await self.handle.collect.remote()
            except self._ray.exceptions.RayActorError as exc:
                self._lose(exc)
                return
            except self._ray.exceptions.RayError as exc:
                self._fail(list(self.pending), failure_reason(exc))
                return
            for call_id, outcome in done:
                future = self.pending.pop(call_id, None)
                if future is not None and not future.done():  # else: given up on, or lost
                    future.set_result(outcome)

    def _lose(self, exc: BaseException) -> None:
        """The worker was lost: every attempt it holds fails (transient: retried on
        another worker); an outcome it reports later for one of them is dropped, so no
        response is counted twice."""
        died = isinstance(exc, self._ray.exceptions.ActorDiedError)
        if died:
            self.dead = True
        else:
            self.passed_over_until = time.monotonic() + COOL_DOWN_S
        pending, self.pending = self.pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(_Lost(type(exc).__name__, died))

    def _fail(self, ids: list[int], reason: str) -> None:
        for call_id in ids:
            future = self.pending.pop(call_id, None)
            if future is not None and not future.done():
                future.set_result(Failure(reason))

    async def _quietly(self, ref: Any) -> None:
        with contextlib.suppress(Exception):
            await ref
