"""Stops that are not the provider's lose nothing paid for: a read-only cache is refused
before any call; with the cache's disk full or the results disk full, every response
that arrived is kept (in the cache, or in the run directory until the cache can take
it), the manifest never stays `running`, no `.tmp` file is left, and the same command
run again pays only for what never arrived.

Disks are real small tmpfs mounts (the suite runs as root, locally and in CI). Where
mounting is impossible, the child process gets RLIMIT_FSIZE instead (every file it
writes stops growing at the limit), and the same guarantees are checked.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from disk_support import small_disk
from run_support import ROOT, app_env, read_calls, write_eval

import gradetrail
from gradetrail.cache.store import ResponseCache


def _remount(path: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(path)], check=True)


def _run(  # noqa: ANN202
    spec: Path,
    cache: Path,
    results: Path,
    calls: Path,
    fsize: int | None = None,
):
    """`gradetrail run` in a child process; with ``fsize``, under RLIMIT_FSIZE."""

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        assert fsize is not None
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    cmd = [sys.executable, "-m", "gradetrail", "run", str(spec), "--cache", str(cache)]
    cmd += ["--results-root", str(results)]
    env = {**app_env(calls, delay=0.01), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        cmd,
        cwd=spec.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit if fsize else None,
    )


def _run_dir(spec: Path, results: Path) -> Path:
    return gradetrail.plan_run(gradetrail.load_spec(spec)).run_dir(results)


def _cached(cache: Path) -> int:
    db = sqlite3.connect(cache)
    try:
        return db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
    finally:
        db.close()


def _pending(run_dir: Path) -> int:
    path = run_dir / "pending-cache.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def _no_leftovers(run_dir: Path) -> None:
    assert [p.name for p in run_dir.iterdir() if p.name.endswith(".tmp")] == []
    manifest = gradetrail.read_manifest(run_dir)
    assert manifest["status"] == "failed", manifest["status"]


@pytest.mark.parametrize("full", ["cache", "results"])
def test_a_full_disk_loses_no_response_and_leaves_no_running_manifest(
    tmp_path: Path, full: str
) -> None:
    """The disk under the cache (or under the results) fills mid-run: the run stops
    failed, naming the fix; every call made so far is kept (cache + pending file); no
    `running` manifest and no `.tmp` file remain; after space is freed the same command
    finishes, and across both runs every sample reached the application exactly once."""
    samples = 150
    spec = write_eval(tmp_path / "eval", samples=samples, concurrency=4)
    disk = tmp_path / "disk"
    calls = tmp_path / "calls.txt"
    size = "120k" if full == "cache" else "140k"
    with small_disk(disk, size) as mounted:
        fsize = None if mounted else (200_000 if full == "cache" else 100_000)
        cache = (disk if full == "cache" and mounted else tmp_path) / "c.sqlite"
        results = (disk if full == "results" and mounted else tmp_path) / "results"
        first = _run(spec, cache, results, calls, fsize)
        assert first.returncode == 1, first.stdout + first.stderr
        error = first.stderr.strip().splitlines()[0]
        assert error.startswith("error: ") and "Traceback" not in first.stderr
        run_dir = _run_dir(spec, results)
        _no_leftovers(run_dir)
        paid = sum(read_calls(calls).values())
        assert 0 < paid < samples
        if full == "cache" and mounted:
            assert "kept in" in error and "pending-cache.jsonl" in error
            assert "free space and run the same command again" in error
        # nothing paid for is lost: each call made is in the cache or the pending file
        assert _cached(cache) + _pending(run_dir) >= paid - (0 if mounted else 4)
        if mounted:
            _remount(disk, "size=16m")
        again = _run(spec, cache, results, calls)
        assert again.returncode == 0, again.stderr
        assert gradetrail.read_manifest(run_dir)["status"] == "complete"
        assert not (run_dir / "pending-cache.jsonl").exists()
        assert len(gradetrail.read_results(run_dir)) == samples
    counts = read_calls(calls)
    assert len(counts) == samples
    assert max(counts.values()) == 1 if mounted else sum(counts.values()) <= samples + 4


def test_a_read_only_cache_is_refused_before_any_call(tmp_path: Path) -> None:
    """A cache on a read-only filesystem is refused at open, before any call is paid for
    (before: 16 calls were paid, then the run failed); exit 2."""
    spec = write_eval(tmp_path / "eval", samples=20, concurrency=16)
    disk = tmp_path / "ro"
    calls = tmp_path / "calls.txt"
    with small_disk(disk, "1m") as mounted:
        cache = disk / "c.sqlite"
        if mounted:
            ResponseCache(cache).close()
            _remount(disk, "ro")
            out = _run(spec, cache, tmp_path / "results", calls)
        else:  # no mount: an immutable file (root ignores file modes)
            cache.parent.mkdir(parents=True, exist_ok=True)
            ResponseCache(cache).close()
            if subprocess.run(["chattr", "+i", str(cache)], capture_output=True).returncode:
                pytest.fail("this test needs mount or chattr (run the suite as root)")
            try:
                out = _run(spec, cache, tmp_path / "results", calls)
            finally:
                subprocess.run(["chattr", "-i", str(cache)], capture_output=True)
    assert out.returncode == 2  # bad input: pass another --cache
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: cache {cache}: not writable (")
    assert lines[0].endswith("); pass another --cache PATH or --no-cache")
    assert read_calls(calls) == {}
    assert not (tmp_path / "results").exists()


def test_a_results_disk_full_at_start_is_one_line_before_any_call(tmp_path: Path) -> None:
    """The results disk is already full when the run starts: one `error:` line naming
    the disk, no traceback, no call made (before: an OSError traceback)."""
    spec = write_eval(tmp_path / "eval", samples=5, concurrency=2)
    disk = tmp_path / "full"
    calls = tmp_path / "calls.txt"
    with small_disk(disk, "256k") as mounted:
        if not mounted:
            pytest.skip("needs a tmpfs mount (root)")
        (disk / "results").mkdir()
        fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        out = _run(spec, tmp_path / "c.sqlite", disk / "results", calls)
        assert out.returncode in (1, 2), out.stdout + out.stderr
        assert "Traceback" not in out.stderr, out.stderr
        (line,) = out.stderr.strip().splitlines()
        assert line.startswith("error: ") and ("space" in line or "full" in line), line
        assert read_calls(calls) == {}


@pytest.mark.parametrize("inodes", [5, 6, 7])
def test_no_inode_left_leaves_neither_running_nor_reserve(tmp_path: Path, inodes: int) -> None:
    """A results disk with only a few inodes (the run runs out of them while setting up
    its directory, at a different file each time): one error line, no traceback, and
    neither a `running` manifest nor `.reserve` is left (before: both were)."""
    spec = write_eval(tmp_path / "eval", samples=10, concurrency=2)
    disk = tmp_path / "few-inodes"
    disk.mkdir()
    mounted = (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size=4m,nr_inodes={inodes}", "tmpfs", str(disk)],
            capture_output=True,
        ).returncode
        == 0
    )
    if not mounted:
        pytest.skip("needs a tmpfs mount (root)")
    try:
        out = _run(spec, tmp_path / "c.sqlite", disk / "results", tmp_path / "calls.txt")
        assert out.returncode == 1, out.stdout + out.stderr
        assert "Traceback" not in out.stderr
        assert out.stderr.strip().splitlines()[0].startswith("error: ")
        names = {p.name for p in disk.rglob("*")}
        assert ".reserve" not in names, names
        for manifest in disk.rglob("manifest.json"):
            assert json.loads(manifest.read_text())["status"] == "failed"
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)
