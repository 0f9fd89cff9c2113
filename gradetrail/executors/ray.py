"""The Ray executor (``--executor ray``): provider calls on Ray actors, everything else in
the driver.

Who does what:

- The **driver** (this process) keeps the cache, scoring and results, as with the local
  executor: :meth:`~gradetrail.executors.calls.Calls.call` looks the cache up first and only
  misses reach :meth:`RayExecutor.complete`. It also keeps the retry loop
  (:func:`~gradetrail.executors.retry.call_with_retry`) and ONE
  :class:`~gradetrail.executors.limits.Throttle` per provider, so ``run.concurrency``,
  the rate caps, the AIMD cut on 429s and a Retry-After pause are global across workers
  by construction: switching executors never multiplies the load on a provider.
- Each **attempt** goes to the least-loaded live worker (a Ray async actor,
  :class:`~gradetrail.executors._ray_worker.ProviderWorker`), which calls
  ``provider.complete`` once and answers the response or the classified
  :class:`~gradetrail.errors.ProviderError`. Attempts travel in batches (one ``submit``
  per worker per turn of the driver's event loop, one outstanding ``collect`` returning
  every finished attempt), so Ray's per-call cost is paid per batch. The driver awaits
  ObjectRefs on its event loop (never ``ray.get``).
- A **worker lost mid-call** (``RayActorError``: died, unavailable while Ray restarts it)
  fails every attempt it holds with a transient
  :class:`~gradetrail.errors.ProviderConnectionError`: the retry loop retries them, and
  the next attempt goes to another live worker. Only the driver counts responses, and an
  outcome reported for an attempt already given up on is dropped, so no response is
  counted twice.

Ray is imported, and a cluster joined or started, only when some request misses the
cache (:meth:`RayExecutor.start`, called by the runner; or lazily on the first judge
miss): a fully cached run never touches Ray. At that first miss the runner waits for the
cluster to be joined and the workers to hold the provider before it makes the run
directory, so a set-up that cannot run leaves nothing behind; each worker gets every
provider through a method
argument (API keys are never put in ``runtime_env``). The ``python`` provider's module is
shipped to the workers with the actors' ``runtime_env.py_modules``
(:meth:`~gradetrail.providers.base.Provider.shipped_modules`); a judge whose code the
early workers lack has them started again with it.

The parts: :mod:`~gradetrail.executors.ray_cluster` joins (or starts) the cluster,
:mod:`~gradetrail.executors.ray_pool` starts the workers and picks one for each attempt,
:mod:`~gradetrail.executors.ray_link` batches one worker's attempts, and this module
holds the options and the executor.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Coroutine
from dataclasses import dataclass
from typing import Any

from gradetrail.errors import UsageError
from gradetrail.executors.ray_cluster import check_address
from gradetrail.executors.ray_link import WorkerStats
from gradetrail.executors.ray_pool import RayPool
from gradetrail.executors.retry import AttemptListener, CallOutcome, RetryPolicy
from gradetrail.executors.retrying import RetryingExecutor
from gradetrail.providers.base import Provider, Request, Response

__all__ = ["RayExecutor", "RayOptions", "WorkerStats"]

log = logging.getLogger("gradetrail.executors.ray")


@dataclass(frozen=True, slots=True)
class RayOptions:
    """Where provider calls run with ``--executor ray``. Execution only: neither enters
    the identity hash nor the spec.

    Attributes:
        address: None starts a local Ray on demand (or joins ``$RAY_ADDRESS`` when set);
            ``auto`` joins the cluster ``ray start --head`` started on this machine;
            ``HOST:PORT`` joins the cluster whose head (GCS) listens there.
        workers: Ray actors making provider calls, at least 1 and at most
            ``run.concurrency`` (None: one per alive node of the cluster).
    """

    address: str | None = None
    workers: int | None = None

    def __post_init__(self) -> None:
        """Check the values.

        Raises:
            UsageError: ``address`` is not ``auto`` or ``HOST:PORT``, or ``workers`` < 1.
        """
        if self.address is not None:
            check_address(self.address)
        if self.workers is not None and (
            isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1
        ):
            raise UsageError(f"--workers {self.workers!r}: use a whole number of at least 1")

    def build(
        self,
        provider: Provider,
        policy: RetryPolicy,
        concurrency: int,
        **limits: Any,
    ) -> RayExecutor:
        """A :class:`RayExecutor` for the run's provider (its keyword arguments pass on).

        Raises:
            UsageError: more workers than ``concurrency`` (each would get no request).
        """
        if self.workers is not None and self.workers > concurrency:
            raise UsageError(
                f"--workers {self.workers} is more than run.concurrency ({concurrency}), so "
                f"some workers would never get a request; use --workers {concurrency} or "
                "less, or raise run.concurrency"
            )
        return RayExecutor(provider, policy, concurrency, options=self, **limits)


class RayExecutor(RetryingExecutor):
    """Runs provider calls on Ray workers, with the driver's retry policy and one global
    throttle (in-flight slots with AIMD, rate caps, Retry-After pause) per provider.

    Args:
        provider: the run's provider (its calls run on the workers; its key, if any, is
            read here and handed to them as a method argument).
        policy: the retry policy.
        concurrency: attempts in flight at most, across all workers.
        options: where to run and on how many workers.
        pool: share another executor's workers (for judges; see :meth:`for_provider`).
        settings: ``requests_per_minute``, ``tokens_per_minute`` (global rate caps),
            ``adaptive``, and ``sleep``, ``clock``, ``rand`` (injected for tests), as for
            :class:`~gradetrail.executors.local.LocalExecutor`.
    """

    def __init__(
        self,
        provider: Provider,
        policy: RetryPolicy,
        concurrency: int,
        *,
        options: RayOptions | None = None,
        pool: RayPool | None = None,
        **settings: Any,
    ) -> None:
        super().__init__(provider, policy, concurrency, **settings)
        self._owns_pool = pool is None
        self.pool = pool if pool is not None else RayPool(options or RayOptions())
        self._slot = self.pool.add(provider, concurrency)

    def start(self) -> None:
        """Check that Ray is installed and the cluster answers, then join it (or start a
        local Ray) and wait for the workers to hold the run's provider. The runner calls
        this before the run directory exists, only when some request misses the cache,
        so a set-up that cannot run (another Ray version, code the workers cannot import)
        is refused in one line with nothing left behind; a judge registered later (in
        ``bind``, before the first call) is added to the workers at the first call.

        Raises:
            UsageError: Ray is not installed, the cluster cannot be reached or joined, or
                the workers cannot import the provider's code.
            RunError: the workers did not start (in time, or for a reason of Ray's).
        """
        self.pool.cluster.check()
        self.pool.wait_started()

    def complete(
        self, request: Request, on_attempt: AttemptListener | None = None
    ) -> Coroutine[Any, Any, CallOutcome]:
        """Serve ``request`` with retries, as :class:`RetryingExecutor` does, once the
        workers are up: waiting for them to start (seconds, on a cold cluster) is not part
        of any attempt, so it counts against neither ``run.timeout_s`` nor
        ``run.sample_timeout_s``.

        Raises:
            UsageError: Ray is missing or the cluster unreachable.
            RunError: the workers did not start.
        """
        if self.pool.ready:
            return super().complete(request, on_attempt)
        return self._complete_once_started(request, on_attempt)

    async def _complete_once_started(
        self, request: Request, on_attempt: AttemptListener | None
    ) -> CallOutcome:
        await self.pool.workers()
        return await super().complete(request, on_attempt)

    def attempt(self, request: Request) -> Awaitable[Response]:
        """One attempt on the least-loaded live worker (after this provider's throttle)."""
        return self.pool.call(self._slot, request)

    def for_provider(self, provider: Provider) -> RayExecutor:
        """An executor for ``provider`` (a judge) on the same workers, with this one's
        policy, concurrency bound and rate caps and its own throttle (another model has
        its own limits)."""
        return RayExecutor(
            provider, self.policy, self.concurrency, pool=self.pool, **self.settings()
        )

    def describe(self) -> dict[str, Any]:
        """``kind: ray``, the cluster's address, the workers (node, host, pid, attempts
        served and lost, peak in flight), the in-flight share per worker
        (``ceil(concurrency / workers)``), and Ray's start-up seconds: ``connect_s``
        (``ray.init``), ``start_s`` (from the first cache miss to every worker holding
        every provider, connecting included) and ``waited_s`` (how long the first call
        waited for that: near 0, since the runner waits for the start before the run
        directory exists, unless a judge's code restarted the workers);
        ``started: false`` when every response came from the cache."""
        workers = self.pool.stats()
        out: dict[str, Any] = {
            "kind": "ray",
            "started": bool(workers),
            "concurrency": self.concurrency,
            "address": self.pool.cluster.address,
        }
        if workers:
            out["workers"] = len(workers)
            out["nodes"] = len({w.node_id for w in workers})
            out["in_flight_per_worker"] = math.ceil(self.concurrency / len(workers))
            out["connect_s"] = _round(self.pool.cluster.connect_s)
            out["start_s"] = _round(self.pool.start_s)
            out["waited_s"] = _round(self.pool.waited_s)
            out["per_worker"] = [
                {
                    "node_id": w.node_id,
                    "host": w.host,
                    "pid": w.pid,
                    "served": w.served,
                    "lost": w.lost,
                    "peak_in_flight": w.peak_in_flight,
                }
                for w in workers
            ]
        return out

    async def aclose(self) -> None:
        """End the workers and disconnect (the executor that created the pool does; a
        judge's executor closes nothing it shares)."""
        if self._owns_pool:
            await self.pool.shutdown()


def _round(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 3)
