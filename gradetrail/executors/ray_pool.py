"""The Ray workers a run's executors share (the model's and its judges'): started once,
in the background from the first cache miss, each holding every provider in a numbered
slot; an attempt goes to the least-loaded live worker.

The connection is :class:`~gradetrail.executors.ray_cluster.RayCluster`'s, and each
worker's batches of attempts are its :class:`~gradetrail.executors.ray_link.WorkerLink`'s.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gradetrail.errors import ProviderConnectionError, RunError, UsageError
from gradetrail.executors._ray_worker import ProviderWorker
from gradetrail.executors.ray_cluster import RayCluster, failure_reason, first_line, import_ray
from gradetrail.executors.ray_link import WorkerLink, WorkerStats
from gradetrail.providers.base import Provider, Request, Response

if TYPE_CHECKING:
    from gradetrail.executors.ray import RayOptions

__all__ = ["RayPool"]

#: seconds to wait for every worker to start (runtime env set-up included)
START_TIMEOUT_S = 120.0
#: times Ray restarts a worker that died (its in-flight calls are retried by the driver)
MAX_RESTARTS = 3
#: concurrent protocol calls an actor admits (submit, collect, cancel, register, close)
PROTOCOL_CALLS = 32


@dataclass(slots=True)
class _Slot:
    provider: Provider
    concurrency: int
    blob: bytes | None = None


@dataclass(slots=True)
class _Boot:
    """What the background start made: the actors, the code shipped to them, and each
    actor's registration (ObjectRefs) of the slots known then."""

    handles: list[Any]
    modules: frozenset[str]
    registered: list[list[Any]]


class RayPool:
    """The Ray connection and the workers shared by a run's executors (the model's and
    its judges'); each executor is a numbered slot on every worker.

    Start-up runs in the background (:meth:`prestart`, called at the first cache miss)
    while the driver prepares the run; the first call waits only for what is left.

    Args:
        options: where to run and on how many workers.

    Attributes:
        cluster: the connection (its address and ``connect_s`` once connected).
        start_s: seconds from :meth:`prestart` to every worker holding every provider.
        waited_s: of those, the seconds the first call waited.
    """

    def __init__(self, options: RayOptions) -> None:
        self.options = options
        self.cluster = RayCluster(options.address)
        self._slots: list[_Slot] = []
        self._workers: list[WorkerLink] | None = None
        self._starting: asyncio.Future[list[WorkerLink]] | None = None
        self._boot: concurrent.futures.Future[_Boot] | None = None
        self._release = threading.Event()
        self._ids = itertools.count(1)
        self._began: float | None = None
        #: when wait_started() saw every worker up (None: not yet, or restarted since)
        self._up: float | None = None
        self.start_s: float | None = None
        self.waited_s: float | None = None

    # -- starting the workers ------------------------------------------------------------

    def add(self, provider: Provider, concurrency: int) -> int:
        """Register a provider; return its slot. Once :meth:`prestart` ran (a judge bound
        after the run's first cache miss) it is pickled at once.

        Raises:
            RunError: the run's calls have begun (every worker holds the providers known
                then).
            UsageError: the provider cannot be pickled for the workers.
        """
        if self._starting is not None:
            raise RunError("a provider was added after the Ray workers started")
        entry = _Slot(provider, concurrency)
        if self._boot is not None:
            entry.blob = _pickled(provider)
        self._slots.append(entry)
        return len(self._slots) - 1

    def prestart(self) -> None:
        """Pickle the providers known now (here, so that one that cannot be pickled refuses
        the run in one line before its directory exists), then start joining the cluster
        and creating the workers in the background (idempotent). The thread that starts a
        local Ray stays alive until :meth:`shutdown`: Ray's processes end with the thread
        that started them.

        Raises:
            UsageError: Ray is not installed, or a provider cannot be pickled.
        """
        if self._boot is not None:
            return
        for entry in self._slots:
            if entry.blob is None:
                entry.blob = _pickled(entry.provider)
        self._began = time.perf_counter()
        self._boot = concurrent.futures.Future()
        boot = self._boot

        def run() -> None:
            try:
                boot.set_result(self._start_in_background())
            except BaseException as exc:  # handed to the first call
                boot.set_exception(exc)
            self._release.wait()

        threading.Thread(target=run, name="gradetrail-ray-start", daemon=True).start()

    def _start_in_background(self) -> _Boot:
        slots = list(self._slots)
        modules = self._modules(slots)
        self.cluster.connect(self._runtime_env())
        handles = self._create()
        registered = [[self._register(h, i, s) for i, s in enumerate(slots)] for h in handles]
        return _Boot(handles, modules, registered)

    def _modules(self, slots: list[_Slot]) -> frozenset[str]:
        return frozenset(str(p) for s in slots for p in s.provider.shipped_modules())

    def _runtime_env(self) -> dict[str, Any] | None:
        modules = sorted(self._modules(self._slots))
        return {"py_modules": modules} if modules else None

    def _create(self) -> list[Any]:
        """Create the actors: one per alive node unless ``workers`` says how many, placed
        round-robin over the nodes (hard: a node that just joined is not passed over; a
        worker whose node dies is dead, and the others take its share)."""
        ray = self.cluster.ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive")] or [None]
        count = self.options.workers or len(nodes)
        count = min(count, max(s.concurrency for s in self._slots))
        options: dict[str, Any] = {
            "num_cpus": 0,  # I/O-bound: never wait for a free CPU
            "max_restarts": MAX_RESTARTS,
            "max_task_retries": 0,  # the driver's retry policy decides, and counts
            # the protocol's own calls (submit, collect, cancel, register), not the
            # requests in flight: those are bounded by the driver's throttles
            "max_concurrency": PROTOCOL_CALLS,
            "enable_task_events": False,  # no per-call record sent to the GCS
        }
        actor = _actor_class(ray)
        return [
            actor.options(
                **options,
                scheduling_strategy=(
                    "SPREAD"
                    if nodes[i % len(nodes)] is None
                    else NodeAffinitySchedulingStrategy(nodes[i % len(nodes)], soft=False)
                ),
            ).remote()
            for i in range(count)
        ]

    def _register(self, handle: Any, slot: int, entry: _Slot) -> Any:
        assert entry.blob is not None  # pickled by prestart() or add()
        return handle.register.remote(slot, entry.blob, entry.concurrency)

    @property
    def ready(self) -> bool:
        """True once the workers started (:meth:`workers` answers at once)."""
        return self._workers is not None

    async def workers(self) -> list[WorkerLink]:
        """The workers, started on first use (in the background since :meth:`prestart`).

        Raises:
            UsageError: Ray is missing, the cluster unreachable, or the workers cannot
                import a provider's code.
            RunError: the workers did not start within :data:`START_TIMEOUT_S`.
        """
        if self._workers is not None:
            return self._workers
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
        self._workers = await asyncio.shield(self._starting)
        return self._workers

    async def _start(self) -> list[WorkerLink]:
        waited = time.perf_counter()
        self.prestart()  # a judge's first miss in an otherwise cached run starts here
        assert self._boot is not None and self._began is not None
        handles: list[Any] = []
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                boot = await asyncio.wrap_future(self._boot)
                if not self._modules(self._slots) <= boot.modules and self.cluster.owns_connection:
                    # a judge ships code the job lacks (a job's code is fixed when it
                    # starts): start the local Ray again with every provider's code
                    boot = await self._restart(boot)
                handles = boot.handles
                for refs, handle in zip(boot.registered, handles, strict=True):
                    known = len(refs)  # the slots added since the start (a judge)
                    refs += [
                        self._register(handle, i, s)
                        for i, s in enumerate(self._slots)
                        if i >= known
                    ]
                infos = await asyncio.gather(*(asyncio.gather(*refs) for refs in boot.registered))
        except TimeoutError:
            raise self._not_started(handles, None) from None
        except self._ray_errors() as exc:
            raise self._not_started(handles, exc) from None
        now = time.perf_counter()
        self.start_s, self.waited_s = (self._up or now) - self._began, now - waited
        return [
            self._link(i, h, info[0])
            for i, (h, info) in enumerate(zip(handles, infos, strict=True))
        ]

    def wait_started(self) -> None:
        """Block until the background start (:meth:`prestart`) has joined the cluster and
        every worker holds the providers known now: the runner calls this before the run
        directory exists, so a cluster of another Ray version, an address that refuses
        the job or code the workers cannot import refuses the run in one line and leaves
        nothing behind (the first call then finds the workers started).

        Raises:
            UsageError: Ray is missing, the cluster cannot be joined (another Ray or
                Python version), or the workers cannot import a provider's code.
            RunError: the workers did not start within :data:`START_TIMEOUT_S`, or
                failed for a reason of Ray's own.
        """
        self.prestart()
        assert self._boot is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            boot = self._boot.result(timeout=START_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            raise self._not_started([], None) from None
        ray = self.cluster.ray
        refs = [ref for registered in boot.registered for ref in registered]
        try:
            ray.get(refs, timeout=max(0.0, deadline - time.monotonic()))
        except ray.exceptions.GetTimeoutError:
            raise self._not_started(boot.handles, None) from None
        except ray.exceptions.RayError as exc:
            raise self._not_started(boot.handles, exc) from None
        self._up = time.perf_counter()

    def _not_started(self, handles: list[Any], exc: BaseException | None) -> Exception:
        """The error of a start that failed (``exc``: Ray's; None: it timed out), once
        the ``handles`` started are killed: a provider's code the workers cannot import
        is the user's set-up (UsageError), anything else Ray's (RunError)."""
        for handle in handles:
            with contextlib.suppress(Exception):
                self.cluster.ray.kill(handle)
        if exc is None:
            return RunError(
                f"{len(handles) or 'the'} Ray workers did not start within "
                f"{START_TIMEOUT_S:.0f} s; check `ray status` and the worker logs of the "
                "cluster"
            )
        if isinstance(getattr(exc, "cause", None), ImportError):  # the user's setup
            return UsageError(
                f"the Ray workers cannot import a python provider's code "
                f"({failure_reason(exc)}): install it on every node of the cluster, or "
                "keep it in model.function's package or beside its module (docs/ray.md)"
            )
        return RunError(f"the Ray workers could not start: {failure_reason(exc)}")

    def _link(self, index: int, handle: Any, info: dict[str, Any]) -> WorkerLink:
        stats = WorkerStats(index, info["node_id"], info["host"], info["pid"])

        def register(slot: int) -> Any:
            return self._register(handle, slot, self._slots[slot])

        return WorkerLink(handle, stats, self.cluster.ray, register)

    async def _restart(self, boot: _Boot) -> _Boot:
        for handle in boot.handles:
            self.cluster.ray.kill(handle)
        await self.cluster.disconnect()
        self._release.set()  # the old start thread may end: its Ray is gone
        self._release, self._boot, self._up = threading.Event(), None, None
        began = self._began
        self.prestart()
        self._began = began
        assert self._boot is not None
        return await asyncio.wrap_future(self._boot)

    def _ray_errors(self) -> tuple[type[BaseException], ...]:
        ray = self.cluster.ray
        return (ray.exceptions.RayError,) if ray is not None else ()

    # -- one attempt ---------------------------------------------------------------------

    def _pick(self, workers: list[WorkerLink]) -> WorkerLink:
        live = [w for w in workers if not w.dead]
        if not live:
            raise ProviderConnectionError(
                f"every Ray worker died ({len(workers)} started, each restarted up to "
                f"{MAX_RESTARTS} times)",
                transient=False,
            )
        now = time.monotonic()
        ready = [w for w in live if w.passed_over_until <= now] or live
        return min(ready, key=lambda w: (w.in_flight, w.stats.served + w.stats.lost))

    async def call(self, slot: int, request: Request) -> Response:
        """One attempt at ``request`` on the least-loaded live worker.

        Raises:
            ProviderError: what the provider answered; a ProviderConnectionError
                (transient) when the worker was lost mid-call.
        """
        worker = self._pick(await self.workers())
        return await worker.call(next(self._ids), slot, request)

    # -- the end -------------------------------------------------------------------------

    def stats(self) -> list[WorkerStats]:
        """Every started worker's statistics (empty when none started)."""
        return [w.stats for w in self._workers or ()]

    async def shutdown(self) -> None:
        """Close the workers' providers, end the workers, and disconnect (a local Ray we
        started ends with it). Idempotent."""
        boot, self._boot = self._boot, None
        if boot is None:  # never started (Ray missing, a provider that does not pickle)
            await self.cluster.disconnect()
            return
        with contextlib.suppress(Exception):  # it failed: nothing to close but the connection
            await asyncio.wrap_future(boot)
        ray, workers = self.cluster.ray, self._workers or []
        if ray is None:
            self._release.set()
            return
        if workers:
            with contextlib.suppress(Exception):  # a worker that cannot close is killed
                async with asyncio.timeout(5.0):
                    await asyncio.gather(
                        *(w.handle.close.remote() for w in workers if not w.dead),
                        return_exceptions=True,
                    )
            for worker in workers:
                if worker.collector is not None:
                    worker.collector.cancel()
                with contextlib.suppress(Exception):
                    ray.kill(worker.handle)
        elif not boot.exception():
            for handle in boot.result().handles:
                with contextlib.suppress(Exception):
                    ray.kill(handle)
        await self.cluster.disconnect()  # the statistics stay for describe()
        self._release.set()


def _pickled(provider: Provider) -> bytes:
    """``provider`` pickled for the workers (cloudpickle: the ``python`` provider's
    function travels by reference when it is a module-level function, by value when it is
    an object).

    Raises:
        UsageError: Ray is not installed, or ``provider`` cannot be pickled (a lock, a
            client or an open file held by the ``python`` provider's callable object).
    """
    ray = import_ray()
    try:
        return ray.cloudpickle.dumps(provider)
    except Exception as exc:
        model = provider.model
        function = getattr(model, "function", None)
        what = f"model.function {function!r}" if function else f"model {model.name!r}"
        raise UsageError(
            f"--executor ray: {what} cannot be sent to the Ray workers ({type(exc).__name__}: "
            f"{first_line(exc)}); name a module-level function, or make what cannot be "
            "pickled (a lock, a client, an open file) inside the call, or use --executor local"
        ) from None


def _actor_class(ray: Any) -> Any:
    """:class:`ProviderWorker` as a Ray actor class, made once per process (Ray exports
    a class to the cluster on its first use)."""
    global _ACTOR
    if _ACTOR is None:
        _ACTOR = ray.remote(ProviderWorker)
    return _ACTOR


_ACTOR: Any = None
