"""Nothing under a results directory feeds the cache unless a run on that cache wrote it:
a ``pending-cache.jsonl`` planted in a run directory (cloned from a colleague, or edited
in a committed baseline) imports 0 entries; one a run on another cache wrote imports 0;
one this cache's own run wrote is restored."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest
from run_support import app_env, read_calls, run_to_end, write_eval

import gradetrail
from gradetrail.cache.pending import PendingResponses, cache_key, restore_pending
from gradetrail.cache.store import ResponseCache, checksum
from gradetrail.errors import CacheRefused
from gradetrail.providers.base import Response
from gradetrail.rundir.layout import RunDir

SAMPLES = 6


def _forged_line(key: str, answer: str, mac: str | None) -> str:
    """A pending line whose stored text answers ``answer``, its checksum recomputed."""
    text = Response(text=f"A: {answer}").to_json()
    entry = {"key": key, "provider": "python", "model": "slow", "text": text}
    entry["checksum"] = checksum(key, text)
    if mac is not None:
        entry["mac"] = mac
    return json.dumps(entry) + "\n"


def _cached_texts(cache: Path) -> list[str]:
    db = sqlite3.connect(cache)
    try:
        return [json.loads(r[0])["text"] for r in db.execute("SELECT response FROM responses")]
    finally:
        db.close()


@pytest.mark.parametrize("mac", ["none", "forged", "other-cache"])
def test_a_planted_pending_file_imports_nothing(tmp_path: Path, mac: str) -> None:
    """A model that answers every question wrongly, and a planted pending file with the
    right answers for every request (checksums recomputed; no MAC, a made-up MAC, or a
    MAC under another cache's key, as a colleague's run would write): 0 entries are
    imported, every request reaches the model, the mean stays 0, the cache holds only the
    model's answers, and the run says what it ignored (before: a mean of 1.00 with no
    model call, and the forged entries stayed in the cache)."""
    spec = write_eval(tmp_path / "eval", samples=SAMPLES, concurrency=2)
    plan = gradetrail.plan_run(gradetrail.load_spec(spec))
    results = tmp_path / "results"
    run_dir = plan.run_dir(results)
    run_dir.mkdir(parents=True)
    (tmp_path / "colleague").mkdir()
    other = cache_key(tmp_path / "colleague" / "cache.sqlite") if mac == "other-cache" else None
    with (run_dir / "pending-cache.jsonl").open("w") as f:
        for i, item in enumerate(plan.prepared):
            text = Response(text=f"A: {2 * i}").to_json()
            fields = [item.key, "python", "slow", text, checksum(item.key, text)]
            signed = {
                "none": None,
                "forged": "0" * 64,
                "other-cache": other and _sign(other, fields),
            }[mac]
            f.write(_forged_line(item.key, str(2 * i), signed))
    calls = tmp_path / "calls.txt"
    wrong = {f"q{i}": [1] for i in range(SAMPLES)}
    cache = tmp_path / "cache.sqlite"
    code, out, err = run_to_end(spec, cache, results, app_env(calls, wrong=wrong), "--json")
    assert code == 0, err
    manifest = json.loads(out)
    assert manifest["score"]["mean"] == 0.0
    assert manifest["cache"]["rejected"] == SAMPLES
    assert sum(read_calls(calls).values()) == SAMPLES
    assert _cached_texts(cache) == ["A: -1"] * SAMPLES
    assert f"{SAMPLES} responses in the run directory's pending-cache.jsonl" in err
    assert "stay in the file: run with the --cache that wrote them" in err
    # never imported, never deleted (another cache's may be paid responses): still there
    assert len((run_dir / "pending-cache.jsonl").read_text().splitlines()) == SAMPLES


def _sign(key: bytes, fields: list[str]) -> str:
    import hashlib
    import hmac

    data = json.dumps(fields, ensure_ascii=True).encode("ascii")
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def test_this_caches_own_pending_lines_are_restored(tmp_path: Path) -> None:
    """Lines a run on this cache kept (its disk was full) are stored by the next run on
    it, and only those: one edited line (its checksum recomputed) is refused."""
    cache_path = tmp_path / "cache.sqlite"
    key = cache_key(cache_path)
    assert key is not None and cache_key(cache_path) == key  # made once, then read
    assert (os.stat(f"{cache_path}-key").st_mode & 0o777) == 0o600
    with RunDir.create(tmp_path / "results" / "run") as run_dir:
        pending = PendingResponses(run_dir, key)
        for i in range(3):
            text = Response(text=f"A: {i}").to_json()
            assert pending.keep(f"k{i}", "python", "slow", text, checksum(f"k{i}", text))
        pending.close()
        path = run_dir.path / "pending-cache.jsonl"
        lines = path.read_text().splitlines()
        edited = json.loads(lines[2])
        edited["text"] = Response(text="A: 99").to_json()
        edited["checksum"] = checksum(edited["key"], edited["text"])
        path.write_text("\n".join([*lines[:2], json.dumps(edited)]) + "\n")
        cache = ResponseCache(cache_path)
        try:
            restored = restore_pending(run_dir, cache, key)
            assert (restored.stored, restored.rejected) == (2, 1)
            assert cache.get("k0") is not None and cache.get("k2") is None
        finally:
            cache.close()


def test_a_key_file_others_can_read_is_refused(tmp_path: Path) -> None:
    """A key file open to others (or a link) is refused with one line naming the fix."""
    cache_path = tmp_path / "cache.sqlite"
    cache_key(cache_path)
    key_path = Path(f"{cache_path}-key")
    key_path.chmod(0o644)
    with pytest.raises(CacheRefused, match="others may read or write it"):
        cache_key(cache_path)
    key_path.unlink()
    key_path.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(CacheRefused, match="never followed as a link"):
        cache_key(cache_path)


def test_another_caches_pending_lines_wait_for_a_run_on_that_cache(tmp_path: Path) -> None:
    """A run on cache A stopped with its responses in the run directory's pending file
    (its disk full); the same run on cache B does not import them (not signed for B) and
    leaves them in the file; a run on A then imports them and sends no request. Before,
    the run on B deleted the file: the responses A's run had paid for were lost, and
    paid again."""
    spec = write_eval(tmp_path / "eval", samples=SAMPLES, concurrency=2)
    plan = gradetrail.plan_run(gradetrail.load_spec(spec))
    results = tmp_path / "results"
    cache_a, cache_b = tmp_path / "a" / "cache.sqlite", tmp_path / "b" / "cache.sqlite"
    cache_a.parent.mkdir()
    cache_b.parent.mkdir()
    ResponseCache(cache_a).close()
    with RunDir.create(plan.run_dir(results)) as run_dir:
        pending = PendingResponses(run_dir, cache_key(cache_a), cache_a)
        for item in plan.prepared:
            text = Response(text="A: 7").to_json()
            assert pending.keep(item.key, "python", "slow", text, checksum(item.key, text))
        pending.close()
    calls = tmp_path / "calls.txt"
    code, out, err = run_to_end(spec, cache_b, results, app_env(calls), "--json")
    assert code == 0, err
    assert json.loads(out)["cache"]["rejected"] == SAMPLES
    assert sum(read_calls(calls).values()) == SAMPLES
    pending_file = plan.run_dir(results) / "pending-cache.jsonl"
    assert len(pending_file.read_text().splitlines()) == SAMPLES
    calls_a = tmp_path / "calls-a.txt"
    code, out, err = run_to_end(spec, cache_a, results, app_env(calls_a), "--json")
    assert code == 0, err
    manifest = json.loads(out)
    assert manifest["cache"]["rejected"] == 0 and manifest["cache_hits"] == SAMPLES
    assert sum(read_calls(calls_a).values()) == 0
    assert _cached_texts(cache_a) == ["A: 7"] * SAMPLES
    assert not pending_file.exists()
