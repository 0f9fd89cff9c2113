"""A real two-node Ray cluster on this machine for the Ray executor's tests, started with
the Ray CLI (``ray start --head``, then ``ray start --address``) and stopped by process id.

Every address is on the loopback range: the head advertises 127.0.0.2 and the second
node 127.0.0.3 (Ray rewrites 127.0.0.1 to the machine's network address, and these two
it leaves alone). Each node has its own temp dir. The second node runs in its own mount
namespace (``unshare -m``, root only) with a private tmpfs mounted over ``hidden``, the
directory that holds the driver's spec, dataset, cache and results: its workers cannot
see any of them, as on a cluster without a shared filesystem.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))
#: object store of each test node (Ray's minimum is 75 MiB)
OBJECT_STORE = str(80 * 1024 * 1024)
_ADDRESS = re.compile(r"ray start --address='([^']+)'")


@dataclass
class RunningCluster:
    """A running two-node cluster.

    Attributes:
        address: the head's GCS address (``127.0.0.2:PORT``).
        temp_dirs: each node's Ray temp dir (session directories and logs inside).
        hidden: the directory the second node cannot see.
    """

    address: str
    temp_dirs: list[Path]
    hidden: Path


def ray_env() -> dict[str, str]:
    """The environment for Ray processes started by tests: no usage stats (no network),
    and token authentication off explicitly (Ray turns it on for ``ray start --head``
    when ``~/.ray/auth_token`` exists, which a local ``ray.init()`` creates, but not for
    the nodes that join)."""
    return {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


def _start(cmd: list[str], log: Path, cwd: Path) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=ray_env(),
            start_new_session=True,
        )


def _wait_for(log: Path, proc: subprocess.Popen, pattern: str, timeout: float = 90.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if re.search(pattern, text):
            return text
        if proc.poll() is not None:
            raise AssertionError(f"{proc.args[:3]} exited {proc.returncode}:\n{text[-3000:]}")
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {pattern!r} in {log}")


def _stop(procs: list[subprocess.Popen], temp_dirs: list[Path]) -> None:
    """SIGTERM each ``ray start --block`` (it drains and ends its node's processes), then
    SIGKILL whatever still names one of our temp dirs, by process id."""
    for proc in reversed(procs):  # the second node first: it drains through the head
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
    for pid in _pids_naming(temp_dirs):
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _pids_naming(temp_dirs: list[Path]) -> list[int]:
    marks = [str(d).encode() for d in temp_dirs]
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if any(mark in cmdline for mark in marks):
            pids.append(int(entry.name))
    return pids


@contextmanager
def two_node_cluster(hidden: Path) -> Iterator[RunningCluster]:
    """Start the head and a second node that cannot see ``hidden``; stop both on exit."""
    root = Path(tempfile.mkdtemp(prefix="gtray-", dir="/tmp"))  # short: socket paths
    head_dir, node_dir, node_cwd = root / "h", root / "n", root / "cwd"
    for d in (head_dir, node_dir, node_cwd):
        d.mkdir()
    procs: list[subprocess.Popen] = []
    try:
        head = _start(
            [RAY, "start", "--head", "--block", "--temp-dir", str(head_dir)]
            + ["--node-ip-address", "127.0.0.2", "--port", "0", "--num-cpus", "1"]
            + ["--include-dashboard", "false", "--object-store-memory", OBJECT_STORE]
            + ["--disable-usage-stats"],
            root / "head.log",
            root,
        )
        procs.append(head)
        text = _wait_for(root / "head.log", head, r"--block")
        address = _ADDRESS.search(text)
        assert address is not None, text
        join = (
            f"mount -t tmpfs gtray-hidden {hidden} && cd {node_cwd} && exec {RAY} start "
            f"--block --address {address[1]} --temp-dir {node_dir} --node-ip-address "
            f"127.0.0.3 --num-cpus 1 --object-store-memory {OBJECT_STORE} "
            "--disable-usage-stats"
        )
        node = _start(["unshare", "-m", "sh", "-c", join], root / "node.log", root)
        procs.append(node)
        _wait_for(root / "node.log", node, r"--block")
        yield RunningCluster(address[1], [head_dir, node_dir], hidden)
    finally:
        _stop(procs, [head_dir, node_dir])
        shutil.rmtree(root, ignore_errors=True)


def grep_tree(root: Path, needle: bytes) -> list[Path]:
    """Files under ``root`` whose bytes contain ``needle``."""
    hits = []
    for path in root.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink() and needle in path.read_bytes():
                hits.append(path)
        except OSError:
            continue
    return hits
