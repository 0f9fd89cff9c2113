"""The Ray cluster a run's workers live on: joining one (or starting a local Ray), with
the providers' code in the job's ``runtime_env``, checked in seconds before ``ray.init``
would retry an unreachable address for minutes; and leaving it at the end.

Ray is imported (:func:`import_ray`) only when some request misses the cache:
:class:`~gradetrail.executors.ray_pool.RayPool` connects from its start-up thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from gradetrail.errors import UsageError

__all__ = ["RayCluster"]

INSTALL_HINT = "pip install 'gradetrail[ray]'"
#: seconds to wait for a cluster to answer before the run is refused
CONNECT_TIMEOUT_S = 20.0
#: object store of a local Ray started on demand: provider calls move kilobytes
LOCAL_OBJECT_STORE_BYTES = 100 * 1024 * 1024
#: the environment of a local Ray started on demand: single-node (it advertises the
#: loopback address) and no usage statistics; a variable the user set is left as it is
LOCAL_ENV = ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_USAGE_STATS_ENABLED")
#: characters of a Ray error's message an error line quotes at most
MESSAGE_CHARS = 400
#: ``HOST:PORT`` of a cluster's head (GCS), as ``--address`` takes it
HOST_PORT = re.compile(r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.\-]+):(?P<port>\d{1,5})$")


class RayCluster:
    """The connection to Ray: made once (:meth:`connect`), by the pool's start-up thread,
    and ended by :meth:`disconnect` when this process made it.

    Args:
        address: ``--address``: None starts a local Ray (or joins ``$RAY_ADDRESS`` when
            set), ``auto`` or ``HOST:PORT`` join a running cluster.

    Attributes:
        ray: the ``ray`` module once connected, else None.
        owns_connection: True when :meth:`connect` initialized Ray (else the caller had).
        address: the cluster's GCS address once connected.
        connect_s: seconds :meth:`connect` took.
    """

    def __init__(self, address: str | None) -> None:
        self._option = address
        self._lock = threading.Lock()
        self.ray: Any = None
        self.owns_connection = False
        self.address: str | None = None
        self.connect_s: float | None = None
        #: the variables of LOCAL_ENV this process's environment had not, set by check()
        self._set_env: set[str] = set()

    def _local_env_done(self) -> None:
        """Take the variables :meth:`check` set for a local Ray out of the environment
        again, once its processes have them: left there, every process started later from
        this one (a user's ``ray start --address``, a second run's cluster) took them, and
        a worker node refused to start ('Multi-node Ray clusters are not supported')."""
        for name in self._set_env:
            os.environ.pop(name, None)
        self._set_env.clear()

    def _address(self) -> str | None:
        return self._option or os.environ.get("RAY_ADDRESS") or None

    def _source(self) -> str:
        """Where the address came from, as errors name it."""
        return "--address" if self._option else "RAY_ADDRESS"

    def check(self) -> None:
        """Before the run: Ray is installed and the cluster answers (``HOST:PORT``: a gRPC
        server listens there; ``auto``: a cluster started on this machine is recorded).
        ``$RAY_ADDRESS`` is held to ``--address``'s forms.

        Raises:
            UsageError: Ray is not installed, the address is not ``auto`` or
                ``HOST:PORT`` (a Ray Client ``ray://`` address in ``$RAY_ADDRESS``), or
                the cluster cannot be reached.
        """
        address, source = self._address(), self._source()
        if address is None:
            # a local Ray of our own is single-node: it advertises the loopback address
            # (as Ray does on macOS), so nothing on the network reaches it or is reached;
            # set for Ray's import and its processes' start only (see _local_env_done)
            for name in LOCAL_ENV:
                if name not in os.environ:
                    os.environ[name] = "0"
                    self._set_env.add(name)
        else:
            check_address(address, source)
        ray = import_ray()
        if ray.is_initialized() or address is None:
            return
        if address == "auto":
            address = _resolve_auto(ray, source)
        _probe(address, source)

    def connect(self, runtime_env: dict[str, Any] | None) -> None:
        """Join (or start) the cluster, with ``runtime_env`` (the code of the providers
        known now) as the job's; idempotent. Ray already initialized in this process (by
        the caller) is used as it is, and left open at the end: ship code yourself then.

        Raises:
            UsageError: Ray is not installed, or the cluster cannot be reached (within
                :data:`CONNECT_TIMEOUT_S`).
        """
        with self._lock:
            if self.ray is not None:
                return
            started = time.perf_counter()
            self.check()
            ray = import_ray()
            if not ray.is_initialized():
                self._init(ray, self._address(), runtime_env)
                self.owns_connection = True
                _errors_to_stderr(ray)
            _lean_serialization(ray)
            self.address = ray.get_runtime_context().gcs_address
            self.connect_s = time.perf_counter() - started
            self.ray = ray

    def _init(self, ray: Any, address: str | None, runtime_env: dict[str, Any] | None) -> None:
        kwargs: dict[str, Any] = {
            "log_to_driver": False,
            "logging_level": logging.ERROR,
            "runtime_env": runtime_env,
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
                raise UsageError(f"cannot start a local Ray: {first_line(exc)}") from None
            finally:
                self._local_env_done()
                if previous is not None and threading.current_thread() is threading.main_thread():
                    signal.signal(signal.SIGTERM, previous)
            return
        where = f"the Ray cluster at {address}"
        _bounded(partial(ray.init, address=address, **kwargs), CONNECT_TIMEOUT_S, where)

    async def disconnect(self) -> None:
        """Forget the connection, and end it when :meth:`connect` made it (a local Ray
        started here ends with it). Idempotent."""
        self._local_env_done()  # never connected (a failed start): set all the same
        ray, self.ray = self.ray, None
        if ray is not None and self.owns_connection:
            self.owns_connection = False
            await asyncio.to_thread(ray.shutdown)


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
        reason = first_line(outcome.error)
        if reason.startswith("Version mismatch"):  # Ray's check_version_info
            reason += (
                "; run gradetrail with the cluster's Ray and Python versions (the same "
                "patch release), or start the cluster with this machine's"
            )
        raise UsageError(f"cannot connect to {where}: {reason}") from None


def check_address(address: str, source: str = "--address") -> None:
    """``address`` is ``auto`` or ``HOST:PORT`` (a port from 1 to 65535).

    Raises:
        UsageError: it is neither (naming ``source``: ``--address`` or ``RAY_ADDRESS``).
    """
    if address == "auto":
        return
    match = HOST_PORT.match(address)
    if match is None or not 0 < int(match["port"]) < 65536:
        leave = "leave it out" if source == "--address" else "unset it"
        raise UsageError(
            f"{source} {address!r}: use auto or HOST:PORT (the head node's GCS address, "
            f"as `ray start --head` prints it), or {leave} to start a local Ray"
        )


def _probe(address: str, source: str) -> None:
    """Check in a few seconds that something speaking HTTP/2 (gRPC, as Ray's GCS does)
    listens at ``address`` (``HOST:PORT``), before ``ray.init`` would retry it for
    minutes.

    Raises:
        UsageError: nothing listens there, the host is unreachable, or it is not gRPC.
    """
    import socket

    match = HOST_PORT.match(address)
    if match is None:  # `auto` resolved by a Ray whose internals moved: ray.init decides
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
            f"cannot reach the Ray cluster at {address} ({reason}); check {source} and that "
            "`ray start --head` runs there"
        ) from None
    if len(header) < 9 or header[3] != 4:
        raise UsageError(
            f"{address} does not answer as a Ray cluster (GCS) does; check the port in "
            f"{source} (`ray start --head` prints it)"
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


def _resolve_auto(ray: Any, source: str) -> str:
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
        leave = "leave --address out" if source == "--address" else "unset RAY_ADDRESS"
        raise UsageError(
            f"{source} auto: no Ray cluster was started on this machine; run `ray start "
            f"--head` first, or give HOST:PORT, or {leave} to start a local Ray"
        )
    return address


def import_ray() -> Any:
    """The ``ray`` module.

    Raises:
        UsageError: Ray is not installed (with the command that installs it).
    """
    try:
        import ray
    except ImportError:
        raise UsageError(f"--executor ray needs Ray; {INSTALL_HINT}") from None
    return ray


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


def failure_reason(exc: BaseException) -> str:
    """``Type: message`` of what failed on a worker (a RayTaskError's cause, not Ray's
    frame of it)."""
    cause = getattr(exc, "cause", None) or exc
    return f"{type(cause).__name__}: {first_line(cause)}"


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (its type's name when it has none); when that
    line only introduces the next ones (it ends with a colon: Ray's ``Version mismatch:
    The cluster was started with:`` and the versions below it), the lines it introduces
    too, joined into one (at most :data:`MESSAGE_CHARS` characters)."""
    text = str(exc).strip() or type(exc).__name__
    lines = [" ".join(line.split()) for line in text.splitlines() if line.strip()]
    if not lines[0].endswith(":") or len(lines) == 1:
        return lines[0]
    joined = " ".join(lines)
    return joined if len(joined) <= MESSAGE_CHARS else joined[: MESSAGE_CHARS - 3] + "..."
