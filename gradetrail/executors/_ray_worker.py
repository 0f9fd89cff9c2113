"""The Ray actor that makes provider calls: requests go in, responses or classified errors
come out. It holds no cache, no scorer and no results (the driver owns those), so a
cluster needs no shared filesystem.

The protocol batches both ways, so Ray's cost per actor call (about 0.3 ms of CPU on
each side, measured in ``bench/bench_ray.py``) is paid per batch, not per request:

- :meth:`ProviderWorker.submit` starts a batch of calls (each an asyncio task on the
  actor's loop) and returns at once;
- :meth:`ProviderWorker.collect` waits until some call has finished and returns every
  call finished since the last collect (the driver keeps one outstanding per worker);
- :meth:`ProviderWorker.cancel` stops calls the driver gave up on (a timeout, Ctrl-C).

The requests in flight are bounded by the driver's throttle, not by Ray: they are
tasks on the actor's event loop, not actor calls.

This module imports no ``ray`` at import time, and only what a provider call needs
(the package's names load lazily): :mod:`gradetrail.executors.ray_pool` wraps
:class:`ProviderWorker` with ``ray.remote`` when a run first needs workers. On a worker
it is imported by reference, so gradetrail must be installed on every node (as Ray
itself must be).
"""

from __future__ import annotations

import asyncio
import os
import pickle
import socket
from typing import Any, NamedTuple

from gradetrail.errors import ProviderError
from gradetrail.providers.base import Provider, Request, Response

__all__ = ["Call", "Failure", "ProviderWorker"]


class Call(NamedTuple):
    """One attempt the driver hands to a worker.

    Attributes:
        id: the driver's number for this attempt (unique per driver).
        slot: which registered provider serves it.
        request: the request.
    """

    id: int
    slot: int
    request: Request


class Failure(NamedTuple):
    """A provider call that raised something other than a ProviderError (a bug in a
    ``python`` provider's function, say): ``Type: message``, as data, so that it crosses
    the boundary whatever the exception's class."""

    reason: str


#: what a finished call answers: a response, a classified error, or a Failure
Outcome = Response | ProviderError | Failure


class ProviderWorker:
    """An async actor serving provider calls for one or more providers, each in a
    numbered slot (the run's model, its judges).

    Providers arrive pickled through :meth:`register` (a method argument, never the
    actor's runtime environment, so an API key the provider holds is neither in the job's
    metadata nor in Ray's logs). After a restart the actor has no providers:
    :meth:`submit` then answers the calls it could not start, and the driver registers
    the providers again.
    """

    def __init__(self) -> None:
        self._providers: dict[int, Provider] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._done: list[tuple[int, Outcome]] = []
        self._wake: asyncio.Event | None = None
        self._closed = False

    def _event(self) -> asyncio.Event:
        if self._wake is None:  # on the actor's own event loop
            self._wake = asyncio.Event()
        return self._wake

    async def register(self, slot: int, blob: bytes, pool_size: int) -> dict[str, Any]:
        """Install the pickled provider ``blob`` in ``slot`` (kept when the slot is
        taken: a restarted worker may be registered by several batches at once), size its
        connection pool for ``pool_size`` requests in flight and warm it up (SDK import).

        Returns:
            Where this worker runs: ``pid``, ``node_id`` (Ray's hex id) and ``host``.

        Raises:
            Exception: the provider cannot be unpickled here (its code is missing on this
                node: see docs/ray.md on shipping the ``python`` provider's module).
        """
        if slot not in self._providers:
            provider: Provider = pickle.loads(blob)
            provider.size_pool(pool_size)
            provider.warm_up()
            self._providers.setdefault(slot, provider)
        import ray

        return {
            "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "host": socket.gethostname(),
        }

    async def submit(self, calls: list[Call]) -> list[int]:
        """Start every call in ``calls``; their outcomes come back through
        :meth:`collect`.

        Returns:
            The ids of the calls not started because their slot is empty (this worker
            restarted and lost its providers).
        """
        missing = []
        for call in calls:
            provider = self._providers.get(call.slot)
            if provider is None:
                missing.append(call.id)
                continue
            self._tasks[call.id] = asyncio.ensure_future(self._run(call.id, provider, call.request))
        return missing

    async def _run(self, call_id: int, provider: Provider, request: Request) -> None:
        try:
            outcome: Outcome = await provider.complete(request)
        except ProviderError as exc:
            exc.__traceback__ = None  # the driver needs the classification, not our frames
            # one outcome that cannot be pickled would fail the whole batch it goes in
            outcome = exc.portable()
        except asyncio.CancelledError:  # the driver gave up on it: nothing to report
            self._tasks.pop(call_id, None)
            raise
        except Exception as exc:
            first = (str(exc).strip() or type(exc).__name__).splitlines()[0]
            outcome = Failure(f"{type(exc).__name__}: {first}")
        self._tasks.pop(call_id, None)
        self._done.append((call_id, outcome))
        self._event().set()

    async def collect(self) -> list[tuple[int, Outcome]]:
        """Wait until some call has finished (or the worker closes); return ``(id,
        outcome)`` for every call finished since the last collect."""
        wake = self._event()
        while not self._done and not self._closed:
            wake.clear()
            await wake.wait()
        await asyncio.sleep(0)  # calls finishing in this loop iteration join the batch
        done, self._done = self._done, []
        return done

    async def cancel(self, ids: list[int]) -> None:
        """Stop the calls ``ids`` (those already finished are dropped at the driver)."""
        for call_id in ids:
            task = self._tasks.pop(call_id, None)
            if task is not None:
                task.cancel()

    async def close(self) -> None:
        """Stop every call, answer any waiting :meth:`collect`, close every provider's
        connections."""
        self._closed = True
        self._event().set()
        await self.cancel(list(self._tasks))
        providers, self._providers = list(self._providers.values()), {}
        for provider in providers:
            await provider.aclose()
