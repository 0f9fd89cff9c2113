"""The Ray actor that makes provider calls: a request goes in, a response or a classified
error comes out. It holds no cache, no scorer and no results (the driver owns those), so
a cluster needs no shared filesystem.

This module imports no ``ray`` at import time: :mod:`gradetrail.executors.ray` wraps
:class:`ProviderWorker` with ``ray.remote`` when a run first needs workers. On a worker
it is imported by reference, so gradetrail must be installed on every node (as Ray
itself must be).
"""

from __future__ import annotations

import os
import pickle
import socket
from typing import Any

from gradetrail.errors import ProviderError
from gradetrail.providers.base import Provider, Request, Response

__all__ = ["ProviderWorker"]


class ProviderWorker:
    """An async actor serving provider calls for one or more providers, each in a
    numbered slot (the run's model, its judges).

    Providers arrive pickled through :meth:`register` (a method argument, never the
    actor's runtime environment, so an API key the provider holds is neither in the job's
    metadata nor in Ray's logs). After a restart the actor has no providers:
    :meth:`complete` then answers None and the driver registers them again.
    """

    def __init__(self) -> None:
        self._providers: dict[int, Provider] = {}

    async def ready(self) -> dict[str, Any]:
        """Where this worker runs: ``pid``, ``node_id`` (Ray's hex id) and ``host``."""
        import ray

        return {
            "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "host": socket.gethostname(),
        }

    async def register(self, slot: int, blob: bytes, pool_size: int) -> None:
        """Install the pickled provider ``blob`` in ``slot`` (a no-op when the slot is
        taken: a restarted worker may be registered by several calls at once), size its
        connection pool for ``pool_size`` requests in flight and warm it up (SDK import).

        Raises:
            Exception: the provider cannot be unpickled here (its code is missing on this
                node: see the README on shipping the ``python`` provider's module).
        """
        if slot in self._providers:
            return
        provider: Provider = pickle.loads(blob)
        provider.size_pool(pool_size)
        provider.warm_up()
        self._providers.setdefault(slot, provider)

    async def complete(self, slot: int, request: Request) -> Response | ProviderError | None:
        """One attempt at ``request`` with the provider in ``slot``: the response, the
        classified error (returned, not raised, so it crosses the boundary as itself), or
        None when the slot is empty (this worker restarted)."""
        provider = self._providers.get(slot)
        if provider is None:
            return None
        try:
            return await provider.complete(request)
        except ProviderError as exc:
            exc.__traceback__ = None  # the driver needs the classification, not our frames
            return exc

    async def close(self) -> None:
        """Close every provider's connections."""
        providers, self._providers = list(self._providers.values()), {}
        for provider in providers:
            await provider.aclose()
