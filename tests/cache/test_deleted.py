"""A cache file deleted while a run is using it is noticed: the run recreates it with
every entry it can still read from the open file, says so, and the next run pays for
nothing again."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from disk_support import small_disk
from run_support import (
    app_env,
    read_calls,
    release,
    run_to_end,
    start_run,
    wait_until,
    write_eval,
)

import gradetrail
from gradetrail.cache.store import CacheStats, ResponseCache
from gradetrail.providers.base import Request, Response


@pytest.mark.parametrize("when", ["mid-run", "after-last-call"])
def test_a_cache_deleted_during_a_run_is_recreated_and_reported(tmp_path: Path, when: str) -> None:
    """`rm cache.sqlite*` while the run goes (or once every call is made): the run ends
    complete, warns that it recreated the file, and a re-run is all cache hits (before:
    the file stayed gone, the run said nothing, and the re-run paid for all 20 again)."""
    spec = write_eval(tmp_path / "eval", samples=20, concurrency=2)
    cache, results, calls = tmp_path / "c.sqlite", tmp_path / "results", tmp_path / "calls"
    # the calls after the wanted one are held until the file is gone: the deletion lands
    # mid-run (or after the last call was made, before it is answered) on any machine
    wanted = 6 if when == "mid-run" else 20
    env = app_env(calls, delay=0.02, hold_after=wanted - 1)
    proc = start_run(spec, cache, results, env, "--json")
    wait_until(lambda: len(read_calls(calls)) >= wanted, what="calls", proc=proc)
    for path in tmp_path.glob("c.sqlite*"):
        path.unlink()
    release(calls)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    manifest = json.loads(out)
    assert manifest["status"] == "complete" and manifest["cache"]["recreated"] == 1
    assert f"warning: the cache file {cache} was deleted during the run; recreated it" in err
    assert cache.exists()
    code, again, _ = run_to_end(spec, cache, results, app_env(calls), "--json")
    assert code == 0 and json.loads(again)["cache_hits"] == 20
    assert sum(read_calls(calls).values()) == 20


def _fill(directory: Path) -> None:
    """Fill the filesystem under ``directory`` (a small tmpfs) to the last byte."""
    for name, chunk in (("filler", 65536), ("filler2", 512)):
        fd = os.open(directory / name, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while os.write(fd, b"\0" * chunk):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)


@pytest.mark.parametrize("replaced_by", ["directory", "full-disk"])
def test_a_cache_that_cannot_be_recreated_loses_no_paid_response(
    tmp_path: Path, replaced_by: str
) -> None:
    """The cache file is deleted mid-run and cannot be made again (a directory takes its
    place, or its disk is full): every response this run paid for, those stored in the
    deleted file included, is kept in the run directory's pending file, the manifest's
    ``lost`` is true (0), and once the cause is gone the same command pays for nothing
    again (before: the 6 responses in the deleted file were lost, `lost: 0`, and paid
    again)."""
    spec = write_eval(tmp_path / "eval", samples=20, concurrency=2)
    disk = tmp_path / "disk"
    with small_disk(disk, "2m") as mounted:
        if replaced_by == "full-disk" and not mounted:
            pytest.skip("needs a tmpfs mount (root)")
        cache, results, calls = disk / "c.sqlite", tmp_path / "results", tmp_path / "calls"
        env = app_env(calls, delay=0.02, hold_after=5)
        proc = start_run(spec, cache, results, env, "--json")
        wait_until(lambda: len(read_calls(calls)) >= 6, what="calls", proc=proc)
        for path in disk.glob("c.sqlite*"):
            if not path.name.endswith("-key"):
                path.unlink()
        if replaced_by == "directory":
            cache.mkdir()
        else:
            _fill(disk)
        release(calls)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 1, out + err
        assert "Traceback" not in err
        plan = gradetrail.plan_run(gradetrail.load_spec(spec))
        manifest = gradetrail.read_manifest(plan.run_dir(results))
        assert manifest["status"] == "failed" and "pending-cache.jsonl" in err, err
        paid = sum(read_calls(calls).values())
        assert manifest["cache"]["lost"] == 0, manifest["cache"]
        assert manifest["cache"]["unsaved"] >= paid, (manifest["cache"], paid)
        if replaced_by == "directory":
            cache.rmdir()
        else:
            (disk / "filler").unlink()
            (disk / "filler2").unlink()
        code, again, err = run_to_end(spec, cache, results, app_env(calls), "--json")
        assert code == 0, err
        assert json.loads(again)["status"] == "complete"
        counts = read_calls(calls)
        assert len(counts) == 20 and set(counts.values()) == {1}, counts


@pytest.mark.parametrize("how", ["rename", "overwrite"])
def test_a_stale_copy_put_back_mid_run_is_never_left_malformed(tmp_path: Path, how: str) -> None:
    """An old copy of the cache is put back over it while a run writes it: renamed into
    place (a new inode, as `mv`, rsync and editors do), the run recreates it with every
    entry it wrote and later runs pay for nothing again; written over the live file in
    place (`cp`, which SQLite documents as corrupting), every later run says in one line
    how to repair it, and `gradetrail cache check --repair` sets the file aside, keeps
    what is readable and makes the cache usable again (before: "malformed" for every
    later run, and `--repair` could not read it)."""
    cache, results, calls = tmp_path / "c.sqlite", tmp_path / "results", tmp_path / "calls"
    # the stale copy: the cache after a first run, before a second one (whose close
    # checkpoints its entries into the file, so the copy is older than the file's pages)
    first = write_eval(tmp_path / "first", samples=10, concurrency=4)
    code, _, err = run_to_end(first, cache, tmp_path / "r0", app_env(calls), "--json")
    assert code == 0, err
    stale = tmp_path / "stale.sqlite"
    shutil.copyfile(cache, stale)
    second = write_eval(tmp_path / "second", samples=200, concurrency=16)
    code, _, err = run_to_end(second, cache, tmp_path / "r1", app_env(calls), "--json")
    assert code == 0, err
    spec = write_eval(tmp_path / "eval", samples=230, concurrency=2)
    env = app_env(calls, delay=0.02, hold_after=220)
    proc = start_run(spec, cache, results, env, "--json")
    wait_until(lambda: sum(read_calls(calls).values()) >= 221, what="calls", proc=proc)
    if how == "rename":
        shutil.copyfile(stale, tmp_path / "stale2.sqlite")
        os.replace(tmp_path / "stale2.sqlite", cache)
    else:
        shutil.copyfile(stale, cache)
    release(calls)
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    code, out, err = run_to_end(spec, cache, results, app_env(calls), "--json")
    if how == "rename":
        assert code == 0, err
        assert json.loads(out)["status"] == "complete"
        counts = read_calls(calls)
        assert set(counts.values()) == {1}, counts
        return
    if code != 0:
        (line,) = err.strip().splitlines()
        assert "gradetrail cache check --repair" in line, err
    if run_cli_process(["cache", "check", "--cache", str(cache)]).returncode != 0:
        repaired = run_cli_process(["cache", "check", "--repair", "--cache", str(cache)])
        assert repaired.returncode == 0, repaired.stdout + repaired.stderr
        assert "set it aside as c.sqlite.damaged-" in repaired.stdout
    checked = run_cli_process(["cache", "check", "--cache", str(cache)])
    assert checked.returncode == 0, checked.stdout + checked.stderr
    code, out, err = run_to_end(spec, cache, results, app_env(calls), "--json")
    assert code == 0, err
    assert json.loads(out)["status"] == "complete"


def run_cli_process(args: list[str]) -> subprocess.CompletedProcess:
    """``python -m gradetrail ARGS`` in a child process."""
    env = {**os.environ, "PYTHONPATH": str(Path(gradetrail.__file__).parents[1])}
    return subprocess.run(
        [sys.executable, "-m", "gradetrail", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_cache_on_a_disk_with_less_free_space_than_its_wal_fills_it_never(
    tmp_path: Path,
) -> None:
    """A cold run whose cache is on a 4 MB disk: its 1,200 entries take a fraction of it,
    and the run completes, each request made once (before: the WAL, copied back only
    every 8,000 pages, about 33 MB, filled the disk first: the run stopped for a full
    disk with the main file still empty, and every later run stopped the same way)."""
    spec = write_eval(tmp_path / "eval", samples=1200, concurrency=64)
    disk = tmp_path / "disk"
    with small_disk(disk, "4m") as mounted:
        if not mounted:
            pytest.skip("needs a tmpfs mount (root)")
        cache, calls = disk / "c.sqlite", tmp_path / "calls"
        code, out, err = run_to_end(spec, cache, tmp_path / "results", app_env(calls), "--json")
        assert code == 0, err
        assert json.loads(out)["status"] == "complete"
        counts = read_calls(calls)
        assert len(counts) == 1200 and set(counts.values()) == {1}
        assert _stats(cache).entries == 1200


def _fill_but(directory: Path, kib: int) -> None:
    """Fill the filesystem under ``directory`` (a small tmpfs) but ``kib`` KiB."""
    st = os.statvfs(directory)
    with open(directory / "filler", "wb") as f:
        f.write(b"\0" * (st.f_bavail * st.f_frsize - kib * 1024))


def _stats(path: Path) -> CacheStats:
    """``path``'s stats, read by a connection closed at once (the last one to close a WAL
    file copies the WAL back and truncates the file)."""
    cache = ResponseCache(path, read_only=True)
    try:
        return cache.stats()
    finally:
        cache.close()


def test_cache_clear_frees_a_full_disk(cli, tmp_path: Path) -> None:
    """`cache clear --yes` on a cache whose disk has 250 KiB left (the state a clear is
    run to relieve) deletes every entry and compacts the file; `--model` deletes that
    model's entries and, with no room to compact, says so in a note, exit 0 (before:
    the one transaction needed a WAL the size of the table, so it failed, 'write failed
    (database or disk is full)', exit 1, and deleted nothing)."""
    disk = tmp_path / "disk"
    with small_disk(disk, "8m") as mounted:
        if not mounted:
            pytest.skip("needs a tmpfs mount (root)")
        path = disk / "c.sqlite"
        cache = ResponseCache(path)
        for i in range(600):
            request = Request(
                "openai", f"m{i % 2}", None, None, ({"role": "user", "content": str(i)},), {}
            )
            cache.put(request.key(), request, Response(f"{i} " + "x" * 1000))
        cache.close()
        _fill_but(disk, 250)

        out = cli("cache", "clear", "--yes", "--model", "m1", "--cache", str(path))
        assert out.exit_code == 0, out.stderr
        assert out.stdout == f"deleted 300 entries from {path}\n"
        assert out.stderr.startswith("note: the file keeps its size (database or disk is full)")
        assert _stats(path).by_model == [("openai", "m0", 300)]

        out = cli("cache", "clear", "--yes", "--cache", str(path))
        assert (out.exit_code, out.stdout, out.stderr) == (
            0,
            f"deleted 300 entries from {path}\n",
            "",
        )
        assert _stats(path).entries == 0
        assert path.stat().st_size < 64 * 1024  # compacted
