"""The Ray executor (``--executor ray``): provider calls on Ray actors, everything else in
the driver.

Who does what:

- The **driver** (this process) keeps the cache, scoring and results, as with the local
  executor: :func:`~gradetrail.calls.cached_call` looks the cache up first and only
  misses reach :meth:`RayExecutor.complete`. It also keeps the retry loop
  (:func:`~gradetrail.retry.call_with_retry`) and ONE
  :class:`~gradetrail.executors.limits.Throttle` per provider, so ``run.concurrency``,
  the rate caps, the AIMD cut on 429s and a Retry-After pause are global across workers
  by construction: switching executors never multiplies the load on a provider.
- Each **attempt** goes to the least-loaded live worker (a Ray async actor,
  :class:`~gradetrail.executors._ray_worker.ProviderWorker`), which calls
  ``provider.complete`` once and returns the response or the classified
  :class:`~gradetrail.errors.ProviderError`. The driver awaits the ObjectRef on its event
  loop (never ``ray.get``).
- A **worker lost mid-call** (``RayActorError``: died, unavailable while Ray restarts it)
  is a transient :class:`~gradetrail.errors.ProviderConnectionError`: the retry loop
  retries it, and the next attempt goes to another live worker. Only the driver counts
  responses, so a call Ray reports as failed after it ran is never counted twice.

Ray is imported, and a cluster joined or started, only when some request misses the
cache (:meth:`RayExecutor.start`, called by the runner; or lazily on the first judge
miss): a fully cached run never touches Ray. Workers start on the first call, once the
judges have registered their providers, and each gets every provider through a method
argument (API keys are never put in ``runtime_env``). The ``python`` provider's module is
shipped to the workers with ``runtime_env.py_modules``
(:meth:`~gradetrail.providers.base.Provider.shipped_modules`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import re
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from gradetrail.errors import ProviderConnectionError, ProviderError, RunError, UsageError
from gradetrail.executors.retrying import RetryingExecutor
from gradetrail.providers.base import Provider, Request, Response
from gradetrail.retry import RetryPolicy

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


@dataclass(slots=True)
class _Slot:
    provider: Provider
    concurrency: int
    blob: bytes | None = None


class RayPool:
    """The Ray connection and the workers shared by a run's executors (the model's and
    its judges'); each executor is a numbered slot on every worker.

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
        self.address: str | None = None
        self.connect_s: float | None = None
        self.start_s: float | None = None

    # -- connecting ----------------------------------------------------------------------

    def _address(self) -> str | None:
        return self.options.address or os.environ.get("RAY_ADDRESS") or None

    def check(self) -> None:
        """Before the run: Ray is installed and the cluster answers (``HOST:PORT``: a gRPC
        server listens there; ``auto``: a cluster started on this machine is recorded).
        Joining waits for the first call, when every provider (judges too) is known and
        their code can be shipped with the job.

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
        """Join (or start) the cluster with the providers' code in the job's
        ``runtime_env``; idempotent. Ray already initialized in this process (by the
        caller) is used as it is, and left open at the end: ship code yourself then.

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
            # on this thread: Ray's processes end with the thread that started them. ray.init
            # replaces the SIGTERM handler (the run's own: drain, then stop): put it back
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

    # -- slots and workers ---------------------------------------------------------------

    def add(self, provider: Provider, concurrency: int) -> int:
        """Register a provider; return its slot.

        Raises:
            RunError: the workers have already started (they were sized and given their
                runtime environment for the providers known then).
        """
        if self._starting is not None:
            raise RunError("a provider was added after the Ray workers started")
        self._slots.append(_Slot(provider, concurrency))
        return len(self._slots) - 1

    async def workers(self) -> list[_Worker]:
        """The workers, started on first use (connecting first if needed).

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
        if self._ray is None:  # a judge's first miss in an otherwise cached run
            self.connect()
        ray = self._ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from gradetrail.executors._ray_worker import ProviderWorker

        started = time.perf_counter()
        nodes = [n["NodeID"] for n in ray.nodes() if n.get("Alive")] or [None]
        count = self.options.workers or len(nodes)
        count = min(count, max(s.concurrency for s in self._slots))
        actor = ray.remote(ProviderWorker)
        options: dict[str, Any] = {
            "num_cpus": 0,  # I/O-bound: never wait for a free CPU
            "max_restarts": MAX_RESTARTS,
            "max_task_retries": 0,  # the driver's retry policy decides, and counts
            "max_concurrency": sum(s.concurrency for s in self._slots) + 4,
        }

        def placement(i: int) -> Any:  # round-robin over the alive nodes (hard: a node
            node = nodes[i % len(nodes)]  # that just joined is not passed over; a worker
            # whose node dies is dead, and the others take its share)
            return "SPREAD" if node is None else NodeAffinitySchedulingStrategy(node, soft=False)

        handles = [
            actor.options(**options, scheduling_strategy=placement(i)).remote()
            for i in range(count)
        ]
        for slot in self._slots:
            slot.blob = ray.cloudpickle.dumps(slot.provider)
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                infos = await asyncio.gather(*(h.ready.remote() for h in handles))
                workers = [
                    _Worker(h, WorkerStats(i, info["node_id"], info["host"], info["pid"]))
                    for i, (h, info) in enumerate(zip(handles, infos, strict=True))
                ]
                await asyncio.gather(
                    *(self._register(w, i) for w in workers for i in range(len(self._slots)))
                )
        except TimeoutError:
            for handle in handles:
                ray.kill(handle)
            raise RunError(
                f"{count} Ray workers did not start within {START_TIMEOUT_S:.0f} s; "
                "check `ray status` and the worker logs of the cluster"
            ) from None
        except ray.exceptions.RayError as exc:
            for handle in handles:
                ray.kill(handle)
            raise RunError(f"the Ray workers could not start: {_reason(exc)}") from None
        self.start_s = time.perf_counter() - started
        return workers

    def _runtime_env(self) -> dict[str, Any] | None:
        modules = sorted({str(p) for s in self._slots for p in s.provider.shipped_modules()})
        return {"py_modules": modules} if modules else None

    async def _register(self, worker: _Worker, slot: int) -> None:
        blob = self._slots[slot].blob
        await worker.handle.register.remote(slot, blob, self._slots[slot].concurrency)

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
            if out is None:  # the worker restarted and lost its providers: register again
                stats.pid = (await worker.handle.ready.remote())["pid"]
                await self._register(worker, slot)
                out = await self._attempt(worker, slot, request)
        except self._ray.exceptions.RayActorError as exc:
            stats.lost += 1
            if isinstance(exc, self._ray.exceptions.ActorDiedError):
                worker.dead = True
            else:
                worker.passed_over_until = time.monotonic() + COOL_DOWN_S
            raise ProviderConnectionError(
                f"Ray worker {stats.index} (pid {stats.pid} on {stats.host}) was lost during "
                f"the call: {type(exc).__name__}"
            ) from None
        except self._ray.exceptions.RayTaskError as exc:  # the provider failed, unclassified
            stats.served += 1
            raise ProviderError(f"Ray worker {stats.index}: {_reason(exc)}") from None
        finally:
            worker.in_flight -= 1
        stats.served += 1
        if isinstance(out, ProviderError):
            raise out
        if out is None:
            raise ProviderConnectionError(f"Ray worker {stats.index} lost its provider twice")
        return out

    async def _attempt(self, worker: _Worker, slot: int, request: Request) -> Any:
        ref = worker.handle.complete.remote(slot, request)
        try:
            return await ref
        except asyncio.CancelledError:  # timeout or Ctrl-C: stop the call on the worker too
            with contextlib.suppress(Exception):
                self._ray.cancel(ref)
            raise

    # -- the end -------------------------------------------------------------------------

    def stats(self) -> list[WorkerStats]:
        """Every started worker's statistics (empty when none started)."""
        return [w.stats for w in self._workers or ()]

    async def shutdown(self) -> None:
        """Close the workers' providers, end the workers, and disconnect (a local Ray we
        started ends with it). Idempotent."""
        ray, workers = self._ray, self._workers or []
        if ray is None:
            return
        self._ray = None  # the statistics stay for describe()
        if workers:
            with contextlib.suppress(Exception), asyncio.timeout(5.0):
                await asyncio.gather(
                    *(w.handle.close.remote() for w in workers if not w.dead),
                    return_exceptions=True,
                )
            for worker in workers:
                with contextlib.suppress(Exception):
                    ray.kill(worker.handle)
        if self._owns_connection:
            await asyncio.to_thread(ray.shutdown)
            self._owns_connection = False


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
        """Check that Ray is installed and the cluster answers (the runner calls this before
        the run directory exists, only when some request misses the cache); the cluster is
        joined, or a local Ray started, at the first call.

        Raises:
            UsageError: Ray is not installed, or the cluster cannot be reached.
        """
        self.pool.check()

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
        (``ceil(concurrency / workers)``), and Ray's connect and worker start-up seconds;
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
