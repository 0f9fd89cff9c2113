"""A cache file deleted while a run is using it is noticed: the run recreates it with
every entry it can still read from the open file, says so, and the next run pays for
nothing again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_support import (
    app_env,
    read_calls,
    release,
    run_to_end,
    start_run,
    wait_until,
    write_eval,
)


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
