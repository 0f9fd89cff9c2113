"""The response cache: keys, persistence, stats and clear, and its CLI."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from gradetrail.cache.store import WAL_AUTOCHECKPOINT_PAGES, ResponseCache, default_cache_path
from gradetrail.errors import CacheRefused
from gradetrail.providers.base import Request, Response

BASE = Request(
    provider="openai",
    model="gpt-x",
    base_url=None,
    system="be brief",
    messages=({"role": "user", "content": "2+2?"},),
    params={"temperature": 0.0, "max_tokens": 16},
)


def _with(**changes: object) -> Request:
    fields = {f: getattr(BASE, f) for f in BASE.__dataclass_fields__}
    return Request(**{**fields, **changes})


@pytest.mark.parametrize(
    "changed",
    [
        {"provider": "anthropic"},
        {"model": "gpt-y"},
        {"base_url": "http://127.0.0.1:1/v1"},
        {"system": "be long"},
        {"messages": ({"role": "user", "content": "2+3?"},)},
        {"params": {"temperature": 0.5, "max_tokens": 16}},
        {"params": {"temperature": 0.0, "max_tokens": 16, "seed": 1}},
        {"epoch": 2},
        {"identity": {"recordings_sha256": "ab"}},
    ],
)
def test_everything_that_decides_the_response_changes_the_key(changed: dict) -> None:
    """Provider, model, base_url, system, messages, params, epoch, identity: each misses."""
    assert _with(**changed).key() != BASE.key()


def test_sample_id_and_param_order_do_not_change_the_key() -> None:
    """The key is canonical JSON: dict order is irrelevant, and the sample id is not in it."""
    same = _with(sample_id="other", params={"max_tokens": 16, "temperature": 0.0})
    assert same.key() == BASE.key()
    assert len(BASE.key()) == 64


def test_put_get_roundtrip_persists_across_connections(tmp_path: Path) -> None:
    """A stored response is read back intact by a new connection."""
    path = tmp_path / "c.sqlite"
    response = Response("4", "end_turn", "stop", "gpt-x-2025", 10, 1, 2, 0.25, 0.001)
    cache = ResponseCache(path)
    cache.put(BASE.key(), BASE, response)
    cache.close()
    again = ResponseCache(path)
    assert again.get(BASE.key()) == response
    assert again.get(_with(model="m2").key()) is None
    assert again._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_the_wal_is_checkpointed_every_wal_autocheckpoint_pages_and_at_close(
    tmp_path: Path,
) -> None:
    """A writable open checkpoints every WAL_AUTOCHECKPOINT_PAGES frames, not SQLite's
    1,000: after ~1,500 frames of responses the WAL still holds them all (a second
    connection reads every one through it); closing copies them into the file and
    removes the WAL, and a read-only open finds every one there."""
    path = tmp_path / "c.sqlite"
    cache = ResponseCache(path)
    assert cache._db.execute("PRAGMA wal_autocheckpoint").fetchone() == (WAL_AUTOCHECKPOINT_PAGES,)
    requests = [_with(epoch=i) for i in range(1, 1201)]
    for request in requests:
        cache.put(request.key(), request, Response("x" * 900, "end_turn", "stop", "m"))
    frames = (path.with_name("c.sqlite-wal").stat().st_size - 32) // (4096 + 24)
    assert 1500 < frames < WAL_AUTOCHECKPOINT_PAGES  # past SQLite's default, never copied
    reader = ResponseCache(path, read_only=True)
    assert len(reader.get_many([r.key() for r in requests])) == 1200
    reader.close()
    cache.close()
    assert not path.with_name("c.sqlite-wal").exists()
    again = ResponseCache(path, read_only=True)
    found = again.get_many([r.key() for r in requests])
    assert [found[r.key()].text for r in requests] == ["x" * 900] * 1200


def test_get_many_reads_what_get_reads_in_batches(tmp_path: Path) -> None:
    """get_many over 1,201 keys (three queries) returns exactly the stored responses, by
    key, each equal to get's; missing keys and a damaged entry are left out, the damaged
    one counted as get counts it."""
    cache = ResponseCache(tmp_path / "c.sqlite")
    requests = [_with(epoch=i) for i in range(1, 1202)]
    for i, request in enumerate(requests):
        if i % 3:
            cache.put(request.key(), request, Response(str(i), "end_turn", "stop", "m"))
    damaged = requests[1].key()
    cache._db.execute("UPDATE responses SET response = '{}' WHERE key = ?", (damaged,))
    keys = [r.key() for r in requests]
    found = cache.get_many(keys)
    assert set(found) == {k for i, k in enumerate(keys) if i % 3 and i != 1}
    assert all(found[k] == cache.get(k) for k in found)
    assert found[keys[1199]].text == "1199"
    assert cache.damaged == 1 and cache.get(damaged) is None


def test_stats_and_clear(tmp_path: Path) -> None:
    """stats counts per model; clear by model or all."""
    cache = ResponseCache(tmp_path / "c.sqlite")
    for i in range(3):
        cache.put(_with(epoch=i + 1).key(), BASE, Response(str(i)))
    other = _with(model="m2")
    cache.put(other.key(), other, Response("x"))
    stats = cache.stats()
    assert stats.entries == 4
    assert stats.by_model == [("openai", "gpt-x", 3), ("openai", "m2", 1)]
    assert cache.clear("m2") == 1
    assert cache.clear() == 3
    assert cache.stats().entries == 0


def test_default_location_env_override(monkeypatch, tmp_path: Path) -> None:
    """GRADETRAIL_CACHE overrides the XDG default."""
    monkeypatch.setenv("GRADETRAIL_CACHE", str(tmp_path / "x.sqlite"))
    assert default_cache_path() == tmp_path / "x.sqlite"
    monkeypatch.delenv("GRADETRAIL_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_path() == tmp_path / "xdg" / "gradetrail" / "cache.sqlite"


def test_unopenable_cache_is_a_clear_error(cli, tmp_path: Path) -> None:
    """A cache path that is a directory fails with a one-line fix, exit 2 (bad input)."""
    from paths import GSM8K_SPEC

    out = cli("run", str(GSM8K_SPEC), "--cache", str(tmp_path))
    assert out.exit_code == 2
    assert "is not a regular file" in out.stderr and "--no-cache" in out.stderr


def test_cache_cli_stats_and_clear(cli, cache_path: Path) -> None:
    """`cache stats` and `cache clear --yes` report on the default cache."""
    from paths import GSM8K_SPEC

    assert cli("run", str(GSM8K_SPEC), "--set", "dataset.limit=5").exit_code == 0
    out = cli("cache", "stats")
    assert out.exit_code == 0
    assert "5 entries" in out.stdout and "175b_verification" in out.stdout
    out = cli("cache", "clear", "--yes")
    assert out.exit_code == 0 and "deleted 5 entries" in out.stdout
    explicit = cli("cache", "stats", "--cache", str(cache_path))
    assert "0 entries" in explicit.stdout


def test_cache_clear_by_a_model_it_does_not_hold(cli, cache_path: Path) -> None:
    """`cache clear --model ""` is refused, exit 2, before it asks (before: it asked
    "Delete every entry?" and then deleted the entries of a model named ""); a model the
    cache does not hold deletes nothing and says where the models are listed."""
    from paths import GSM8K_SPEC

    assert cli("run", str(GSM8K_SPEC), "--set", "dataset.limit=5").exit_code == 0
    out = cli("cache", "clear", "--model", "")
    assert (out.exit_code, out.stdout) == (2, "")
    assert out.stderr == (
        "error: cache clear: --model is empty; name a model (`gradetrail cache stats` lists "
        "them), or leave --model out to delete every entry\n"
    )
    out = cli("cache", "clear", "--model", "gpt-4", "--yes")
    assert (out.exit_code, out.stdout) == (0, f"deleted 0 entries from {cache_path}\n")
    assert out.stderr == (
        "note: no entry is gpt-4's; `gradetrail cache stats` lists the models the cache holds\n"
    )
    assert "5 entries" in cli("cache", "stats").stdout


def test_an_empty_cache_file_reads_as_an_empty_cache(cli, tmp_path: Path) -> None:
    """A cache file of 0 bytes (made by `touch`, or left by a first run killed before it
    wrote the schema) is an empty cache to `cache stats` and to reads (a sweep's dry run), and is
    left as it is (before: 'read failed (no such table: responses)', exit 1)."""
    path = tmp_path / "c.sqlite"
    path.touch()
    out = cli("cache", "stats", "--cache", str(path))
    assert (out.exit_code, out.stdout, out.stderr) == (
        0,
        f"cache {path}: 0 entries, 0.00 MB\n",
        "",
    )
    cache = ResponseCache(path, read_only=True)
    try:
        assert cache.get_many([BASE.key()]) == {} and cache.get(BASE.key()) is None
    finally:
        cache.close()
    assert path.stat().st_size == 0


def test_a_cache_locked_by_another_process_says_to_wait_for_it(tmp_path: Path) -> None:
    """Another connection holds the write lock past the busy timeout while a cache is
    opened: the one line names the lock and to run again once it is done (before:
    'cannot open (database is locked); pass another --cache PATH or --no-cache')."""
    path = tmp_path / "c.sqlite"
    ResponseCache(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(CacheRefused) as caught:
            ResponseCache(path, timeout_s=0.05)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert str(caught.value) == (
        f"cache {path}: cannot open (database is locked); another process held the cache's "
        "write lock too long (a `gradetrail cache clear`, or a program with the file open): "
        "once it is done, run the same command again, or pass another --cache PATH or "
        "--no-cache"
    )
    assert caught.value.exit_code == 2


def test_errors_are_never_cached(cli, tmp_path: Path) -> None:
    """A sample with no recording is a provider_error and leaves nothing in the cache."""
    from paths import GSM8K_DATA

    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"q": "1"}) + "\n" + json.dumps({"q": "2"}) + "\n")
    rec = tmp_path / "rec.jsonl"
    rec.write_text(json.dumps({"m": "A: 1"}) + "\n")  # only sample 1 is recorded
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: t\ndataset: {path: d.jsonl}\nprompt: '{{ q }}'\ntarget: '{{ q }}'\n"
        "model: {provider: replay, name: m, recordings: {path: rec.jsonl}}\n"
        "scorer: {type: numeric, marker: 'A:'}\n"
    )
    assert GSM8K_DATA.exists()
    out = cli("run", str(spec), "--json")
    assert out.exit_code == 0
    m = json.loads(out.stdout)
    assert m["counts"] == {"scored": 1, "provider_error": 1}
    assert ResponseCache(Path(__import__("os").environ["GRADETRAIL_CACHE"])).stats().entries == 1


def test_foreign_sqlite_file_is_refused_untouched(cli, tmp_path: Path) -> None:
    """Another program's database is never altered or cleared: one line, exit 2."""
    import sqlite3

    path = tmp_path / "other.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE responses (key TEXT, v INT)")
    db.executemany("INSERT INTO responses VALUES (?, ?)", [(str(i), i) for i in range(5)])
    db.commit()
    db.close()
    for args in (["cache", "clear", "--yes"], ["cache", "stats"]):
        out = cli(*args, "--cache", str(path))
        assert out.exit_code == 2
        assert "not a gradetrail cache" in out.stderr
    db = sqlite3.connect(path)
    assert db.execute("SELECT COUNT(*) FROM responses").fetchone() == (5,)
    assert db.execute("PRAGMA journal_mode").fetchone() == ("delete",)


def test_stats_and_clear_never_create_a_cache(cli, tmp_path: Path) -> None:
    """A mistyped --cache path is an error (exit 2), and no file or directory appears."""
    path = tmp_path / "typo" / "c.sqlite"
    for args in (["cache", "stats"], ["cache", "clear", "--yes"]):
        out = cli(*args, "--cache", str(path))
        assert out.exit_code == 2 and f"no cache at {path}" in out.stderr
    assert not (tmp_path / "typo").exists()


def test_clear_without_yes_and_no_terminal_deletes_nothing(cli, cache_path: Path) -> None:
    """Without --yes and no one to answer, clear keeps every entry and exits 2: a flag is
    missing (docs/troubleshooting.md#exit-codes: bad usage is 2; it was 1, the code of a
    failed verdict); answered no, it exits 1."""
    from paths import GSM8K_SPEC

    assert cli("run", str(GSM8K_SPEC), "--set", "dataset.limit=3").exit_code == 0
    out = cli("cache", "clear")
    assert out.exit_code == 2 and "nothing deleted: no one to confirm" in out.stderr
    assert "pass --yes" in out.stderr
    assert "3 entries" in cli("cache", "stats").stdout
    out = cli("cache", "clear", input="n\n")
    assert out.exit_code == 1 and "nothing deleted; pass --yes" in out.stderr
    assert "3 entries" in cli("cache", "stats").stdout
