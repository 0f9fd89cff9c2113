"""Serving the viewer: bind the socket first (so ``--port 0`` prints the real port and a
busy port is one clear error), then run uvicorn on it."""

from __future__ import annotations

import ipaddress
import socket
import sys
from pathlib import Path

from gradetrail.errors import UsageError

__all__ = ["bind", "is_loopback", "serve"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` only listens on this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (0: a free port the OS picks).

    Raises:
        UsageError: the address cannot be used (busy port, unknown host).
    """
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise UsageError(f"--host {host}: cannot resolve ({exc.strerror})") from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise UsageError(
            f"cannot listen on {host}:{port} ({exc.strerror}): pick another --port (0 for any)"
        ) from None
    sock.listen(128)
    return sock


def url_of(sock: socket.socket, host: str) -> str:
    """The URL a browser on this machine opens for ``sock``."""
    port = sock.getsockname()[1]
    shown = host if not host or ":" not in host.strip("[]") else f"[{host.strip('[]')}]"
    if host in ("0.0.0.0", "::"):
        shown = "127.0.0.1"
    return f"http://{shown}:{port}/"


def _machine_names() -> list[str]:
    """This machine's host name, FQDN and addresses: the Host headers a wildcard bind can
    legitimately receive (any other name is a rebinding attempt)."""
    names = {socket.gethostname(), socket.getfqdn()}
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None):
            address = str(info[4][0])
            names.add(f"[{address}]" if ":" in address else address)
    except OSError:
        pass
    return sorted(n for n in names if n)


def serve(results_root: str | Path, host: str = "127.0.0.1", port: int = 8765) -> None:
    """Serve the viewer of ``results_root`` until interrupted, printing its URL first.

    A host other than loopback is served only because it was asked for, with a warning:
    everyone who can reach it can read every run under the root.

    Raises:
        UsageError: the root is not a directory, or the address cannot be used.
    """
    import uvicorn

    from gradetrail.view.app import create_app
    from gradetrail.view.security import default_hosts

    hosts = default_hosts(host)
    if host in ("0.0.0.0", "::"):
        hosts += _machine_names()
    app = create_app(results_root, allowed_hosts=hosts)
    sock = bind(host, port)
    if not is_loopback(host):
        print(
            f"warning: serving on {host}, not loopback: anyone who can reach this address "
            f"can read every run under {results_root} (responses, prompts, datasets)",
            file=sys.stderr,
        )
    print(f"gradetrail view: {url_of(sock, host)} (results root {results_root}; Ctrl-C stops)")
    sys.stdout.flush()
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


class BackgroundServer:
    """The viewer served from a thread on a free loopback port, for tests and scripts::

        with BackgroundServer("results") as url:
            ...  # GET url

    Args:
        results_root: the directory holding run directories.
    """

    def __init__(self, results_root: str | Path) -> None:
        import threading

        import uvicorn

        from gradetrail.view.app import create_app

        self._sock = bind("127.0.0.1", 0)
        self.url = url_of(self._sock, "127.0.0.1").rstrip("/")
        config = uvicorn.Config(
            create_app(results_root), log_level="warning", access_log=False, lifespan="off"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    def __enter__(self) -> str:
        import time

        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.url

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()
