"""`gradetrail view` as a real process: prints its URL, serves, refuses bad input in one line."""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from paths import ROOT


def start(*args: str) -> subprocess.Popen:
    """``python -m gradetrail view ARGS``, output piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "gradetrail", "view", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_view_prints_its_url_and_serves_the_runs_page(tmp_path: Path) -> None:
    """--port 0: the printed URL names the port the OS chose, and it answers."""
    proc = start(str(tmp_path), "--port", "0")
    try:
        line = proc.stdout.readline()
        assert line.startswith("gradetrail view: http://127.0.0.1:"), line + proc.stderr.read()
        url = line.split()[2]
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.status == 200 and "No run directory" in response.read().decode()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def status_of(address: str, port: int, host: str) -> int:
    """The status of GET / sent to ``address:port`` with this Host header (no proxy)."""
    connection = http.client.HTTPConnection(address, port, timeout=10)
    try:
        connection.request("GET", "/", headers={"Host": host})
        return connection.getresponse().status
    finally:
        connection.close()


def test_another_host_is_served_only_with_a_warning(tmp_path: Path) -> None:
    """--host 0.0.0.0 warns that everyone who can reach it can read the runs; it answers
    through any of the machine's addresses named as such (127.0.0.2 here: before, only
    the names it had listed), and still refuses another site's name."""
    proc = start(str(tmp_path), "--port", "0", "--host", "0.0.0.0")
    try:
        line = proc.stdout.readline()
        port = int(line.split()[2].rsplit(":", 1)[1].strip("/"))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as response:
            assert response.status == 200
        assert status_of("127.0.0.2", port, f"127.0.0.2:{port}") == 200
        assert status_of("127.0.0.2", port, f"evil.example:{port}") == 400
        assert status_of("127.0.0.2", port, f"127.0.0.3:{port}") == 400  # not this socket's
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert "warning: serving on 0.0.0.0, not loopback" in err


def test_bad_root_and_busy_port_are_one_line_with_exit_2(tmp_path: Path) -> None:
    """A missing results root, or a port already taken: one error line, exit 2."""
    proc = start(str(tmp_path / "missing"), "--port", "0")
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and err.count("error:") == 1 and "missing" in err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = start(str(tmp_path), "--port", str(port))
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in err
