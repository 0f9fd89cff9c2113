"""The Ray executor (``--executor ray``): provider calls on Ray actors, everything else in
the driver.

Who does what:

- The **driver** (this process) keeps the cache, scoring and results, as with the local
  executor: :func:`~gradetrail.executors.calls.cached_call` looks the cache up first and only
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
miss): a fully cached run never touches Ray. From that first miss, joining the cluster
and starting the workers run in a background thread while the driver writes the run
directory and binds the judges; each worker gets every provider through a method
argument (API keys are never put in ``runtime_env``). The ``python`` provider's module is
shipped to the workers with the actors' ``runtime_env.py_modules``
(:meth:`~gradetrail.providers.base.Provider.shipped_modules`); a judge whose code the
early workers lack has them started again with it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import math
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from gradetrail.errors import ProviderConnectionError, ProviderError, RunError, UsageError
from gradetrail.executors._ray_worker import Call, Failure, ProviderWorker
from gradetrail.executors.retry import RetryPolicy
from gradetrail.executors.retrying import RetryingExecutor
from gradetrail.providers.base import Provider, Request, Response

__all__ = ["RayExecutor", "RayOptions", "WorkerStats"]

INSTALL_HINT = "pip install 'gradetrail[ray]'"
#: seconds to wait for a cluster to answer before the run is refused
CONNECT_TIMEOUT_S = 20.0
#: seconds to wait for every worker to start (runtime env set-up included)
START_TIMEOUT_S = 120.0
#: times Ray restarts a worker that died (its in-flight calls are retried by the driver)
MAX_RESTARTS = 3
#: seconds a worker that Ray reported unavailable is passed over by the dispatcher
COOL_DOWN_S = 2.0
#: concurrent protocol calls an actor admits (submit, collect, cancel, register, close)
PROTOCOL_CALLS = 32
#: object store of a local Ray started on demand: provider calls move kilobytes
LOCAL_OBJECT_STORE_BYTES = 100 * 1024 * 1024
_HOST_PORT = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.\-]+):(?P<port>\d{1,5})$")

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
        if self.address is not None and self.address != "auto":
            match = _HOST_PORT.match(self.address)
            if match is None or not 0 < int(match["port"]) < 65536:
                raise UsageError(
                    f"--address {self.address!r}: use auto or HOST:PORT (the head node's "
                    "GCS address, as `ray start --head` prints it), or leave it out to "
                    "start a local Ray"
                )
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


@dataclass(slots=True)
class _Worker:
    handle: Any
    stats: WorkerStats
    in_flight: int = 0
    dead: bool = False
    passed_over_until: float = 0.0
    #: attempt id -> the future its outcome resolves
    pending: dict[int, asyncio.Future[Any]] = field(default_factory=dict)
    outbox: list[Any] = field(default_factory=list)  # Calls not submitted yet
    cancels: list[int] = field(default_factory=list)  # ids not cancelled on the worker yet
    flushing: bool = False
    collector: asyncio.Task[None] | None = None


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


class _Lost(Exception):
    """The worker holding an attempt was lost (it died, or is unavailable while Ray
    restarts it)."""

    def __init__(self, cause: str, died: bool) -> None:
        super().__init__(cause)
        self.cause, self.died = cause, died


class RayPool:
    """The Ray connection and the workers shared by a run's executors (the model's and
    its judges'); each executor is a numbered slot on every worker.

    Start-up runs in the background (:meth:`prestart`, called at the first cache miss)
    while the driver prepares the run; the first call waits only for what is left.
    Attempts travel in batches (:mod:`gradetrail.executors._ray_worker`): the attempts
    made in one turn of the event loop go to a worker in one ``submit``, and each worker's
    finished attempts come back together through one outstanding ``collect``.

    Args:
        options: where to run and on how many workers.
    """

    def __init__(self, options: RayOptions) -> None:
        self.options = options
        self._ray: Any = None
        self._owns_connection = False
        self._slots: list[_Slot] = []
        self._workers: list[_Worker] | None = None
        self._starting: asyncio.Future[list[_Worker]] | None = None
        self._connect_lock = threading.Lock()
        self._boot: concurrent.futures.Future[_Boot] | None = None
        self._release = threading.Event()
        self._ids = itertools.count(1)
        self._began: float | None = None
        self.address: str | None = None
        self.connect_s: float | None = None
        self.start_s: float | None = None
        self.waited_s: float | None = None

    # -- connecting ----------------------------------------------------------------------

    def _address(self) -> str | None:
        return self.options.address or os.environ.get("RAY_ADDRESS") or None

    def check(self) -> None:
        """Before the run: Ray is installed and the cluster answers (``HOST:PORT``: a gRPC
        server listens there; ``auto``: a cluster started on this machine is recorded).

        Raises:
            UsageError: Ray is not installed, or the cluster cannot be reached.
        """
        address = self._address()
        if address is None:
            # a local Ray of our own is single-node: it advertises the loopback address
            # (as Ray does on macOS), so nothing on the network reaches it or is reached
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        ray = _import_ray()
        if ray.is_initialized() or address is None:
            return
        if address == "auto":
            address = _resolve_auto(ray)
        _probe(address)

    def connect(self) -> None:
        """Join (or start) the cluster, with the code of the providers known now in the
        job's ``runtime_env``; idempotent. Ray already initialized in this process (by
        the caller) is used as it is, and left open at the end: ship code yourself then.

        Raises:
            UsageError: Ray is not installed, or the cluster cannot be reached (within
                :data:`CONNECT_TIMEOUT_S`).
        """
        with self._connect_lock:
            if self._ray is not None:
                return
            started = time.perf_counter()
            self.check()
            ray = _import_ray()
            if not ray.is_initialized():
                self._init(ray, self._address())
                self._owns_connection = True
                _errors_to_stderr(ray)
            _lean_serialization(ray)
            self.address = ray.get_runtime_context().gcs_address
            self.connect_s = time.perf_counter() - started
            self._ray = ray

    def _init(self, ray: Any, address: str | None) -> None:
        kwargs: dict[str, Any] = {
            "log_to_driver": False,
            "logging_level": logging.ERROR,
            "runtime_env": self._runtime_env(),
        }
        logging.getLogger("ray").setLevel(logging.ERROR)
        if address is None:  # a local Ray of our own: small, quiet, no dashboard
            kwargs.update(
                address="local",
                include_dashboard=False,
                object_store_memory=LOCAL_OBJECT_STORE_BYTES,
            )
            # ray.init replaces the SIGTERM handler (the run's own: drain, then stop) when
            # it runs on the main thread: put it back
            previous = signal.getsignal(signal.SIGTERM)
            try:
                ray.init(**kwargs)
            except Exception as exc:
                raise UsageError(f"cannot start a local Ray: {_first_line(exc)}") from None
            finally:
                if previous is not None and threading.current_thread() is threading.main_thread():
                    signal.signal(signal.SIGTERM, previous)
            return
        where = f"the Ray cluster at {address}"
        _bounded(partial(ray.init, address=address, **kwargs), CONNECT_TIMEOUT_S, where)

    # -- starting the workers ------------------------------------------------------------

    def add(self, provider: Provider, concurrency: int) -> int:
        """Register a provider; return its slot.

        Raises:
            RunError: the run's calls have begun (every worker holds the providers known
                then).
        """
        if self._starting is not None:
            raise RunError("a provider was added after the Ray workers started")
        self._slots.append(_Slot(provider, concurrency))
        return len(self._slots) - 1

    def prestart(self) -> None:
        """Start joining the cluster and creating the workers in the background, with the
        providers known now (idempotent). The thread that starts a local Ray stays alive
        until :meth:`shutdown`: Ray's processes end with the thread that started them."""
        if self._boot is not None:
            return
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
        self.connect()
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
        ray = self._ray
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
        if entry.blob is None:
            entry.blob = self._ray.cloudpickle.dumps(entry.provider)
        return handle.register.remote(slot, entry.blob, entry.concurrency)

    async def workers(self) -> list[_Worker]:
        """The workers, started on first use (in the background since :meth:`prestart`).

        Raises:
            UsageError: Ray is missing or the cluster unreachable.
            RunError: the workers did not start within :data:`START_TIMEOUT_S`.
        """
        if self._workers is not None:
            return self._workers
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
        self._workers = await asyncio.shield(self._starting)
        return self._workers

    async def _start(self) -> list[_Worker]:
        waited = time.perf_counter()
        self.prestart()  # a judge's first miss in an otherwise cached run starts here
        assert self._boot is not None and self._began is not None
        handles: list[Any] = []
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                boot = await asyncio.wrap_future(self._boot)
                if not self._modules(self._slots) <= boot.modules and self._owns_connection:
                    # a judge ships code the job lacks (a job's code is fixed when it
                    # starts): start the local Ray again with every provider's code
                    boot = await self._restart(boot)
                handles = boot.handles
                for refs, handle in zip(boot.registered, handles, strict=True):
                    refs += [self._register(handle, i, s) for i, s in enumerate(self._slots)][
                        len(refs) :
                    ]
                infos = await asyncio.gather(*(asyncio.gather(*refs) for refs in boot.registered))
        except TimeoutError:
            for handle in handles:
                self._ray.kill(handle)
            raise RunError(
                f"{len(handles) or 'the'} Ray workers did not start within "
                f"{START_TIMEOUT_S:.0f} s; check `ray status` and the worker logs of the "
                "cluster"
            ) from None
        except self._ray_errors() as exc:
            for handle in handles:
                self._ray.kill(handle)
            raise RunError(f"the Ray workers could not start: {_reason(exc)}") from None
        now = time.perf_counter()
        self.start_s, self.waited_s = now - self._began, now - waited
        return [
            _Worker(h, WorkerStats(i, info[0]["node_id"], info[0]["host"], info[0]["pid"]))
            for i, (h, info) in enumerate(zip(handles, infos, strict=True))
        ]

    async def _restart(self, boot: _Boot) -> _Boot:
        ray = self._ray
        for handle in boot.handles:
            ray.kill(handle)
        await asyncio.to_thread(ray.shutdown)
        self._ray, self._owns_connection = None, False
        self._release.set()  # the old start thread may end: its Ray is gone
        self._release, self._boot = threading.Event(), None
        began = self._began
        self.prestart()
        self._began = began
        assert self._boot is not None
        return await asyncio.wrap_future(self._boot)

    def _ray_errors(self) -> tuple[type[BaseException], ...]:
        ray = self._ray
        return (ray.exceptions.RayError,) if ray is not None else ()

    # -- one attempt ---------------------------------------------------------------------

    def _pick(self, workers: list[_Worker]) -> _Worker:
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
        worker.in_flight += 1
        stats = worker.stats
        stats.peak_in_flight = max(stats.peak_in_flight, worker.in_flight)
        try:
            out = await self._attempt(worker, slot, request)
        except _Lost as exc:
            stats.lost += 1
            raise ProviderConnectionError(
                f"Ray worker {stats.index} (pid {stats.pid} on {stats.host}) was lost during "
                f"the call: {exc.cause}"
            ) from None
        finally:
            worker.in_flight -= 1
        stats.served += 1
        if isinstance(out, ProviderError):
            raise out
        if isinstance(out, Failure):  # the provider failed, unclassified
            raise ProviderError(f"Ray worker {stats.index}: {out.reason}")
        return out

    async def _attempt(self, worker: _Worker, slot: int, request: Request) -> Any:
        call_id = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        worker.pending[call_id] = future
        worker.outbox.append(Call(call_id, slot, request))
        self._schedule(worker)
        try:
            return await future
        except asyncio.CancelledError:  # timeout or Ctrl-C: stop the call on the worker too
            if worker.pending.pop(call_id, None) is not None:
                worker.cancels.append(call_id)
                self._schedule(worker)
            raise

    def _schedule(self, worker: _Worker) -> None:
        """Send what this turn of the event loop queued for ``worker`` in one batch, and
        keep one ``collect`` outstanding while it holds attempts."""
        if not worker.flushing:
            worker.flushing = True
            asyncio.get_running_loop().call_soon(self._flush, worker)
        if worker.pending and (worker.collector is None or worker.collector.done()):
            worker.collector = asyncio.ensure_future(self._collect(worker))

    def _flush(self, worker: _Worker) -> None:
        worker.flushing = False
        calls, worker.outbox = worker.outbox, []
        cancels, worker.cancels = worker.cancels, []
        calls = [c for c in calls if c.id in worker.pending]
        if calls:
            asyncio.ensure_future(self._submit(worker, calls))
        if cancels:
            asyncio.ensure_future(self._quietly(worker.handle.cancel.remote(cancels)))

    async def _submit(self, worker: _Worker, calls: list[Call], again: bool = False) -> None:
        try:
            missing = await worker.handle.submit.remote(calls)
            if missing:  # the worker restarted and lost its providers: register them again
                retry = [c for c in calls if c.id in set(missing) and c.id in worker.pending]
                if again:
                    self._fail(worker, [c.id for c in retry], "it lost its providers twice")
                    return
                infos = await asyncio.gather(
                    *(
                        self._register(worker.handle, s, self._slots[s])
                        for s in sorted({c.slot for c in retry})
                    )
                )
                worker.stats.pid = infos[0]["pid"]
                await self._submit(worker, retry, again=True)
        except self._ray.exceptions.RayActorError as exc:
            self._lose(worker, exc)
        except self._ray.exceptions.RayError as exc:  # a submit that failed on the worker
            self._fail(worker, [c.id for c in calls], _reason(exc))

    async def _collect(self, worker: _Worker) -> None:
        while worker.pending and not worker.dead:
            try:
                done = await worker.handle.collect.remote()
            except self._ray.exceptions.RayActorError as exc:
                self._lose(worker, exc)
                return
            except self._ray.exceptions.RayError as exc:
                self._fail(worker, list(worker.pending), _reason(exc))
                return
            for call_id, outcome in done:
                future = worker.pending.pop(call_id, None)
                if future is not None and not future.done():  # else: given up on, or lost
                    future.set_result(outcome)

    def _lose(self, worker: _Worker, exc: BaseException) -> None:
        """``worker`` was lost: every attempt it holds fails (transient: retried on
        another worker); an outcome it reports later for one of them is dropped, so no
        response is counted twice."""
        died = isinstance(exc, self._ray.exceptions.ActorDiedError)
        if died:
            worker.dead = True
        else:
            worker.passed_over_until = time.monotonic() + COOL_DOWN_S
        pending, worker.pending = worker.pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(_Lost(type(exc).__name__, died))

    def _fail(self, worker: _Worker, ids: list[int], reason: str) -> None:
        for call_id in ids:
            future = worker.pending.pop(call_id, None)
            if future is not None and not future.done():
                future.set_result(Failure(reason))

    async def _quietly(self, ref: Any) -> None:
        with contextlib.suppress(Exception):
            await ref

    # -- the end -------------------------------------------------------------------------

    def stats(self) -> list[WorkerStats]:
        """Every started worker's statistics (empty when none started)."""
        return [w.stats for w in self._workers or ()]

    async def shutdown(self) -> None:
        """Close the workers' providers, end the workers, and disconnect (a local Ray we
        started ends with it). Idempotent."""
        boot, self._boot = self._boot, None
        if boot is None:
            return
        with contextlib.suppress(Exception):  # it failed: nothing to close but the connection
            await asyncio.wrap_future(boot)
        ray, workers = self._ray, self._workers or []
        self._ray = None  # the statistics stay for describe()
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
        if self._owns_connection:
            await asyncio.to_thread(ray.shutdown)
            self._owns_connection = False
        self._release.set()


def _actor_class(ray: Any) -> Any:
    """:class:`ProviderWorker` as a Ray actor class, made once per process (Ray exports
    a class to the cluster on its first use)."""
    global _ACTOR
    if _ACTOR is None:
        _ACTOR = ray.remote(ProviderWorker)
    return _ACTOR


_ACTOR: Any = None


def _lean_serialization(ray: Any) -> None:
    """Build this driver's Ray serialization context without importing pyarrow: Ray
    registers Arrow serializers whenever pyarrow is installed, and importing it (with
    numpy) costs half a second of the first call; the driver sends no Arrow data. Where
    pyarrow is already imported it costs nothing, and is left alone; a no-op when this
    Ray's internals differ."""
    worker = getattr(getattr(getattr(ray, "_private", None), "worker", None), "global_worker", None)
    context = getattr(worker, "get_serialization_context", None)
    if context is None or "pyarrow" in sys.modules:
        return
    sys.modules["pyarrow"] = None  # type: ignore[assignment]  # `import pyarrow` fails
    try:
        context()
    except Exception:  # Ray builds it on first use instead
        pass
    finally:
        if "pyarrow" in sys.modules and sys.modules["pyarrow"] is None:
            del sys.modules["pyarrow"]


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
        local Ray) and start the workers in the background while the driver prepares the
        run. The runner calls this before the run directory exists, only when some
        request misses the cache; a judge registered later (in ``bind``, before the
        first call) is added to the workers at the first call.

        Raises:
            UsageError: Ray is not installed, or the cluster cannot be reached.
        """
        self.pool.check()
        self.pool.prestart()

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
        waited for that: the part the driver's own preparation did not hide);
        ``started: false`` when every response came from the cache."""
        workers = self.pool.stats()
        out: dict[str, Any] = {
            "kind": "ray",
            "started": bool(workers),
            "concurrency": self.concurrency,
            "address": self.pool.address,
        }
        if workers:
            out["workers"] = len(workers)
            out["nodes"] = len({w.node_id for w in workers})
            out["in_flight_per_worker"] = math.ceil(self.concurrency / len(workers))
            out["connect_s"] = _round(self.pool.connect_s)
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


@dataclass
class _Outcome:
    value: Any = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


def _bounded(fn: Callable[[], Any], timeout_s: float, where: str) -> None:
    """Run ``fn`` (``ray.init``) in a daemon thread and wait at most ``timeout_s``: Ray
    retries an unresponsive cluster for minutes.

    Raises:
        UsageError: it failed, or did not return in time.
    """
    outcome = _Outcome()

    def target() -> None:
        try:
            outcome.value = fn()
        except BaseException as exc:  # handed to the waiting thread
            outcome.error = exc
        finally:
            outcome.done.set()

    threading.Thread(target=target, name="gradetrail-ray-init", daemon=True).start()
    if not outcome.done.wait(timeout_s):
        raise UsageError(
            f"cannot connect to {where} within {timeout_s:.0f} s; check --address "
            "(`ray status` on the head node prints it)"
        )
    if outcome.error is not None:
        raise UsageError(f"cannot connect to {where}: {_first_line(outcome.error)}") from None


def _probe(address: str) -> None:
    """Check in a few seconds that something speaking HTTP/2 (gRPC, as Ray's GCS does)
    listens at ``address``, before ``ray.init`` would retry it for minutes.

    Raises:
        UsageError: nothing listens there, the host is unreachable, or it is not gRPC.
    """
    import socket

    match = _HOST_PORT.match(address)
    if match is None:  # e.g. $RAY_ADDRESS in a form of its own: ray.init decides
        return
    host, port = match["host"].strip("[]"), int(match["port"])
    try:
        with socket.create_connection((host, port), timeout=5.0) as sock:
            sock.settimeout(5.0)
            # HTTP/2 client preface and an empty SETTINGS frame (RFC 9113, section 3.4);
            # a gRPC server answers with its own SETTINGS frame (type 0x4)
            sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))
            header = _read_exactly(sock, 9)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UsageError(
            f"cannot reach the Ray cluster at {address} ({reason}); check --address and that "
            "`ray start --head` runs there"
        ) from None
    if len(header) < 9 or header[3] != 4:
        raise UsageError(
            f"{address} does not answer as a Ray cluster (GCS) does; check the port in "
            "--address (`ray start --head` prints it)"
        )


def _read_exactly(sock: Any, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _errors_to_stderr(ray: Any) -> None:
    """Ray's driver prints the cluster's error notices (a worker died, ...) on stdout;
    ``--json`` and ``--print-run-dir`` own stdout, so send them to stderr. A no-op when
    this Ray's internals differ."""
    module = getattr(getattr(ray, "_private", None), "worker", None)
    original = getattr(module, "print_to_stdstream", None)
    if original is None or getattr(original, "gradetrail_stderr", False):
        return

    def to_stderr(data: dict[str, Any], ignore_prefix: bool) -> None:
        original({**data, "is_err": True}, ignore_prefix)

    to_stderr.gradetrail_stderr = True  # type: ignore[attr-defined]
    module.print_to_stdstream = to_stderr


def _resolve_auto(ray: Any) -> str:
    """The address ``auto`` means: the cluster ``ray start`` recorded on this machine.

    Raises:
        UsageError: none is recorded.
    """
    try:
        from ray._private.services import canonicalize_bootstrap_address
    except ImportError:  # a Ray whose internals moved: let ray.init resolve it
        return "auto"
    try:
        address = canonicalize_bootstrap_address("auto")
    except Exception:
        address = None
    if not address:
        raise UsageError(
            "--address auto: no Ray cluster was started on this machine; run `ray start "
            "--head` first, or give HOST:PORT, or leave --address out to start a local Ray"
        )
    return address


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError(f"--executor ray needs Ray; {INSTALL_HINT}") from None
    return ray


def _reason(exc: BaseException) -> str:
    """``Type: message`` of what failed on a worker (a RayTaskError's cause, not Ray's
    frame of it)."""
    cause = getattr(exc, "cause", None) or exc
    return f"{type(cause).__name__}: {_first_line(cause)}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _round(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 3)
