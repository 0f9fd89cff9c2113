"""A small disk for tests that fill one: a tmpfs mounted for the test; a read-only view of
a directory (root only)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _mount(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
    )
    return done.returncode == 0


@contextmanager
def small_disk(path: Path, size: str) -> Iterator[bool]:
    """A tmpfs of ``size`` at ``path`` (yields True), or nothing mounted (False)."""
    mounted = _mount(path, size)
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


@contextmanager
def read_only_view(source: Path, path: Path) -> Iterator[bool]:
    """``source`` mounted read-only at ``path`` (a bind mount: yields True), or nothing
    mounted (False)."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "--bind", "-o", "ro", str(source), str(path)], capture_output=True
    )
    mounted = done.returncode == 0
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)
