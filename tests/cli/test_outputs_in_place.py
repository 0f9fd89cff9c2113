"""Output paths that are not regular files: `gradetrail export --out`, `gradetrail split
-o` and `gradetrail gate --markdown` given a named pipe or a character device write into
it, and never rename a file over it (as root, `export --out /dev/null` put a regular
file in place of /dev/null)."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest
from cli_support import run_cli
from view_support import app_run, write_app_eval


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A small ended run (three samples) and its spec."""
    tmp = tmp_path_factory.mktemp("inplace")
    spec = write_app_eval(tmp / "eval", samples=3)
    with pytest.MonkeyPatch.context() as mp:
        return app_run(spec, tmp / "results", tmp / "cache.sqlite", "base", None, mp), spec


class Reader:
    """Reads a named pipe to its end in a thread (a writer of a FIFO waits for one)."""

    def __init__(self, path: Path) -> None:
        self.data = b""
        self._thread = threading.Thread(target=self._read, args=(path,), daemon=True)
        self._thread.start()

    def _read(self, path: Path) -> None:
        with open(path, "rb") as f:
            self.data = f.read()

    def join(self) -> bytes:
        self._thread.join(timeout=30)
        return self.data


def commands(run: tuple[Path, Path], out: Path) -> dict[str, list[str]]:
    run_dir, spec = run
    return {
        "export": ["export", str(run_dir), "--out", str(out)],
        "split": ["split", str(spec), "-o", str(out), "--fractions", "all=1"],
        "gate": ["gate", str(run_dir), str(run_dir), "--markdown", str(out)],
    }


FIRST_BYTES = {
    "export": b"run,model,identity,",
    "split": b'{\n "all": [',
    "gate": "### ❌ gradetrail gate: FAIL".encode(),
}
#: exit codes: three samples are too few for the gate to pass (exit 1, its report written)
CODES = {"export": 0, "split": 0, "gate": 1}


@pytest.mark.parametrize("command", ["export", "split", "gate"])
def test_a_named_pipe_is_written_into(run, tmp_path: Path, command: str) -> None:
    """The FIFO stays a FIFO and its reader gets the whole output (before: the file was
    renamed over the FIFO, whose reader waited for good)."""
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    reader = Reader(pipe)
    out = run_cli(*commands(run, pipe)[command])
    assert out.code == CODES[command], out.err
    assert reader.join().startswith(FIRST_BYTES[command])
    assert stat.S_ISFIFO(os.lstat(pipe).st_mode)


@pytest.mark.parametrize("command", ["export", "split", "gate"])
def test_a_character_device_is_written_into(run, tmp_path: Path, command: str) -> None:
    """A null device made for the test (as /dev/null is: char 1, 3) stays a device."""
    null = tmp_path / "null"
    try:
        os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device needs root (CAP_MKNOD)")
    out = run_cli(*commands(run, null)[command])
    assert out.code == CODES[command], out.err
    assert stat.S_ISCHR(os.lstat(null).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["null"]  # no temporary file left


def test_a_directory_is_one_error_line(run, tmp_path: Path) -> None:
    """`split -o DIR` names the directory (exit 2), as export does."""
    out = run_cli(*commands(run, tmp_path)["split"])
    assert out.code == 2
    assert out.err_lines == [
        f"error: {tmp_path}: cannot write the split file ({tmp_path} is a directory; "
        "name a file to write)"
    ]
