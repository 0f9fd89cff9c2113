"""The cache file under damage and concurrency: checksums (a bad entry is a miss, never
served), `cache check`, the upgrade of a cache written before checksums, links and
non-regular files at the cache path, and several processes opening one new file."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import sys
import time
from pathlib import Path

import pytest
from disk_support import read_only_view
from paths import GSM8K_SPEC

from gradetrail.cache.store import ResponseCache, checksum, set_aside
from gradetrail.providers.base import Request, Response

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

LIMIT = ["--set", "dataset.limit=60"]


def _mean(out) -> float:  # noqa: ANN001
    return json.loads(out.stdout)["score"]["mean"]


def _flip_digits(path: Path, n: int) -> None:
    """Flip the low bit of ``n`` digits inside stored response text, in the file itself
    (after a checkpoint, so the entries are in the main file): 4 <-> 5, 2 <-> 3, ..."""
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    data = bytearray(path.read_bytes())
    spots = [i for i in range(1, len(data)) if chr(data[i]).isdigit() and data[i - 1] == 32]
    random.Random(7).shuffle(spots)
    for i in spots[:n]:
        data[i] ^= 1
    path.write_bytes(bytes(data))


def test_flipped_bits_in_stored_text_are_misses_never_a_wrong_score(cli, cache_path: Path) -> None:
    """Bit flips in cached payloads change no score: each damaged entry is re-requested,
    counted in the manifest, and `cache check` reports it (exit 1) and --repair fixes it."""
    clean = cli("run", str(GSM8K_SPEC), *LIMIT, "--json")
    assert clean.exit_code == 0
    _flip_digits(cache_path, 40)

    check = cli("cache", "check", "--cache", str(cache_path))
    assert check.exit_code == 1
    damaged = int(check.stdout.split(" entries, ")[1].split(" damaged")[0])
    assert 10 <= damaged <= 40 and "checksum mismatch" in check.stdout
    assert "pass --repair" in check.stdout

    again = cli("run", str(GSM8K_SPEC), *LIMIT, "--json")
    manifest = json.loads(again.stdout)
    assert _mean(again) == _mean(clean) == pytest.approx(0.55, abs=0.2)
    assert manifest["cache_hits"] == 60 - damaged
    assert manifest["cache"]["damaged"] == damaged
    assert f"{damaged} damaged cache entries" in again.stderr
    assert cli("cache", "check", "--cache", str(cache_path)).exit_code == 0  # rewritten


def test_cache_check_repair_deletes_damaged_entries(cli, cache_path: Path) -> None:
    """--repair deletes what check found; the next check is clean."""
    assert cli("run", str(GSM8K_SPEC), *LIMIT).exit_code == 0
    db = sqlite3.connect(cache_path)
    keys = [k for (k,) in db.execute("SELECT key FROM responses ORDER BY key LIMIT 3")]
    db.execute("UPDATE responses SET response = 'not json' WHERE key = ?", (keys[0],))
    db.execute("UPDATE responses SET checksum = NULL WHERE key = ?", (keys[1],))
    db.execute(
        "UPDATE responses SET response = replace(response, 'A', 'B') WHERE key = ?", (keys[2],)
    )
    db.commit()
    db.close()
    out = cli("cache", "check", "--repair", "--cache", str(cache_path))
    assert out.exit_code == 0, out.stdout
    assert "60 entries, 3 damaged" in out.stdout and "deleted 3 damaged entries" in out.stdout
    out = cli("cache", "check", "--cache", str(cache_path))
    assert out.exit_code == 0 and "57 entries, 0 damaged" in out.stdout


def test_a_truncated_cache_is_set_aside_by_repair_and_its_readable_entries_kept(
    cli, cache_path: Path
) -> None:
    """A cache cut short (a copy or a sync that stopped half way): a run refuses it in one
    line naming `cache check --repair`, and that command sets it aside and keeps what is
    readable, about half the entries; the next run is served those (before: the damage
    was found while opening, and `cache check --repair` refused the file with the same
    line, telling the user to run itself; then it kept 0 entries: SQLite refuses a file
    shorter than its header says before reading any page)."""
    assert cli("run", str(GSM8K_SPEC), *LIMIT).exit_code == 0
    data = cache_path.read_bytes()
    cache_path.write_bytes(data[: len(data) // 2])

    out = cli("run", str(GSM8K_SPEC), *LIMIT)
    assert out.exit_code == 2
    (line,) = out.stderr.strip().splitlines()
    assert f"`gradetrail cache check --repair --cache {cache_path}` sets it aside" in line

    out = cli("cache", "check", "--repair", "--cache", str(cache_path))
    assert out.exit_code == 0, out.stdout + out.stderr
    (line,) = out.stdout.strip().splitlines()
    assert line.startswith(f"cache {cache_path}: the file was damaged; set it aside as ")
    kept = int(line.split("made a new cache with the ")[1].split(" entries")[0])
    assert kept >= 25, line
    assert cli("cache", "check", "--cache", str(cache_path)).exit_code == 0

    again = cli("run", str(GSM8K_SPEC), *LIMIT, "--json")
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout)["cache_hits"] == kept


def test_repair_keeps_the_entries_only_the_write_ahead_log_holds(
    cli, cache_path: Path, tmp_path: Path
) -> None:
    """A cache copied (or left by a crash) with its last 10 entries only in its -wal, not
    yet checkpointed, and a page of older entries in its main file then zeroed: setting it
    aside (what `cache check --repair` does when the file will not open) keeps those 10 as
    well, read through the log without changing either file's bytes, and a re-run is
    served every entry it kept. Before, the damaged file was read without its log: the
    10 newest paid responses were requested again."""
    source = tmp_path / "full.sqlite"
    assert cli("run", str(GSM8K_SPEC), "--set", "dataset.limit=50").exit_code == 0
    env_cache = os.environ["GRADETRAIL_CACHE"]
    os.environ["GRADETRAIL_CACHE"] = str(source)
    try:
        assert cli("run", str(GSM8K_SPEC), *LIMIT).exit_code == 0
    finally:
        os.environ["GRADETRAIL_CACHE"] = env_cache
    with sqlite3.connect(source) as full:
        rows = full.execute("SELECT * FROM responses").fetchall()
    writer = sqlite3.connect(cache_path, isolation_level=None)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    have = {k for (k,) in writer.execute("SELECT key FROM responses")}
    newer = [row for row in rows if row[0] not in have]
    assert len(newer) == 10
    writer.executemany("INSERT INTO responses VALUES (?, ?, ?, ?, ?, ?)", newer)
    damaged = tmp_path / "copy.sqlite"  # what a copy taken now (or a crash) leaves
    damaged.write_bytes(cache_path.read_bytes())
    Path(f"{damaged}-wal").write_bytes(Path(f"{cache_path}-wal").read_bytes())
    writer.close()
    data = bytearray(damaged.read_bytes())
    old_text = next(row[3] for row in rows if row[0] in have).encode()
    page = data.index(old_text[-200:]) // 4096  # a page holding an older entry's text
    assert page > 0
    data[page * 4096 : (page + 1) * 4096] = bytes(4096)
    damaged.write_bytes(bytes(data))
    wal_bytes = Path(f"{damaged}-wal").read_bytes()

    done = set_aside(damaged)
    kept = done.kept
    with sqlite3.connect(damaged) as new:
        keys = {k for (k,) in new.execute("SELECT key FROM responses")}
    assert {row[0] for row in newer} <= keys
    assert len(keys) == kept
    (aside,) = tmp_path.glob("copy.sqlite.damaged-*.set-aside-wal")
    assert aside.read_bytes() == wal_bytes  # the log as it was
    assert not list(tmp_path.glob(".gradetrail-salvage-*"))
    os.environ["GRADETRAIL_CACHE"] = str(damaged)
    try:
        again = cli("run", str(GSM8K_SPEC), *LIMIT, "--json")
    finally:
        os.environ["GRADETRAIL_CACHE"] = env_cache
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout)["cache_hits"] == kept


def test_malformed_entries_are_misses_not_tracebacks(cli, cache_path: Path) -> None:
    """Entries that are not responses (wrong JSON, wrong shape, a blob) are re-requested."""
    first = cli("run", str(GSM8K_SPEC), "--set", "dataset.limit=4", "--json")
    db = sqlite3.connect(cache_path)
    keys = [k for (k,) in db.execute("SELECT key FROM responses ORDER BY key")]
    bad = ["{", '{"text": 5}', '{"nope": "x"}', b"\x00\xff"]
    for key, text in zip(keys, bad, strict=True):
        stored = checksum(key, text) if isinstance(text, str) else "x"
        db.execute(
            "UPDATE responses SET response = ?, checksum = ? WHERE key = ?", (text, stored, key)
        )
    db.commit()
    db.close()
    again = cli("run", str(GSM8K_SPEC), "--set", "dataset.limit=4", "--json")
    assert again.exit_code == 0, again.stderr
    manifest = json.loads(again.stdout)
    assert manifest["cache_hits"] == 0 and manifest["cache"]["damaged"] == 4
    assert _mean(again) == _mean(first)


def _old_cache(path: Path, entries: list[tuple[str, str]]) -> None:
    """A cache as gradetrail wrote it before checksums (schema 1)."""
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE responses (key TEXT PRIMARY KEY, provider TEXT NOT NULL, model TEXT "
        "NOT NULL, response TEXT NOT NULL, created_at REAL NOT NULL) WITHOUT ROWID"
    )
    db.execute("PRAGMA journal_mode=WAL")
    db.executemany("INSERT INTO responses VALUES (?, 'replay', 'm', ?, 0)", entries)
    db.commit()
    db.close()


def test_a_cache_from_before_checksums_is_upgraded_and_served(cli, cache_path: Path) -> None:
    """A schema-1 cache: its well-formed entries get checksums and are served as hits; a
    malformed one is a damaged miss; `cache stats` reads an old cache without changing it."""
    assert cli("run", str(GSM8K_SPEC), "--set", "dataset.limit=5").exit_code == 0
    db = sqlite3.connect(cache_path)
    entries = db.execute("SELECT key, response FROM responses ORDER BY key").fetchall()
    db.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{cache_path}{suffix}").unlink(missing_ok=True)
    entries[0] = (entries[0][0], "{broken")
    _old_cache(cache_path, entries)

    assert "5 entries" in cli("cache", "stats").stdout
    db = sqlite3.connect(cache_path)
    assert db.execute("PRAGMA user_version").fetchone() == (0,)  # stats changed nothing
    db.close()

    out = cli("run", str(GSM8K_SPEC), "--set", "dataset.limit=5", "--json")
    manifest = json.loads(out.stdout)
    assert manifest["cache_hits"] == 4 and manifest["cache"]["damaged"] == 1
    db = sqlite3.connect(cache_path)
    assert db.execute("PRAGMA user_version").fetchone() == (2,)
    assert db.execute("SELECT COUNT(*) FROM responses WHERE checksum IS NULL").fetchone() == (0,)
    db.close()
    assert cli("cache", "check").exit_code == 0


def test_a_cache_from_a_newer_gradetrail_is_refused_never_downgraded(cli, cache_path: Path) -> None:
    """A cache whose schema is newer than this gradetrail's (the same tables, user_version
    3) is refused by a run and by every cache command, one line, exit 2, before any call,
    and left as it was (before: a run served it and wrote user_version back to 2, so the
    newer gradetrail would take it for an old cache and upgrade it again)."""
    assert cli("run", str(GSM8K_SPEC), "--set", "dataset.limit=3").exit_code == 0
    db = sqlite3.connect(cache_path)
    db.execute("PRAGMA user_version = 3")
    db.commit()
    db.close()
    before = cache_path.read_bytes()
    for args in (
        ["run", str(GSM8K_SPEC), "--set", "dataset.limit=3"],
        ["cache", "stats"],
        ["cache", "check"],
        ["cache", "clear", "--yes"],
    ):
        out = cli(*args)
        assert out.exit_code == 2, (args, out.stdout, out.stderr)
        assert out.stderr.strip().splitlines() == [
            f"error: cache {cache_path}: written by a newer gradetrail (schema 3; this one "
            "reads up to 2); upgrade gradetrail or pass another --cache PATH"
        ], args
    assert cache_path.read_bytes() == before
    db = sqlite3.connect(cache_path)
    assert db.execute("PRAGMA user_version").fetchone() == (3,)
    assert db.execute("SELECT COUNT(*) FROM responses").fetchone() == (3,)
    db.close()


def test_cache_stats_reads_a_cache_on_a_read_only_filesystem(cli, tmp_path: Path) -> None:
    """`cache stats` on a cache closed cleanly in a directory this process cannot write (a
    read-only mount of a shared cache) counts its entries (before: SQLite could not make
    the WAL's -shm file, and the line said "not writable", exit 2); a run there is still
    refused before any call, one line."""
    cache = tmp_path / "shared" / "c.sqlite"
    spec = ["run", str(GSM8K_SPEC), "--set", "dataset.limit=3"]
    assert cli(*spec, "--cache", str(cache)).exit_code == 0
    assert sorted(p.name for p in cache.parent.iterdir()) == ["c.sqlite", "c.sqlite-key"]
    with read_only_view(cache.parent, tmp_path / "ro") as mounted:
        if not mounted:
            pytest.skip("needs a read-only bind mount (root)")
        view = tmp_path / "ro" / "c.sqlite"
        out = cli("cache", "stats", "--cache", str(view))
        assert out.exit_code == 0, out.stderr
        assert out.stdout.startswith(f"cache {view}: 3 entries, ")
        out = cli(*spec, "--cache", str(view))
        assert out.exit_code == 2
        assert out.stderr.strip().splitlines() == [
            f"error: cache {view}: not writable (Read-only file system); pass another "
            "--cache PATH or --no-cache"
        ]


@pytest.mark.parametrize("kind", ["symlink", "dangling", "hardlink", "fifo", "wal-symlink"])
def test_cache_path_is_never_followed_or_shared(cli, tmp_path: Path, kind: str) -> None:
    """A symlink (dangling too), a hard link, a FIFO at the cache path, or a symlink at
    its -wal name, is refused before any call (exit 2, one line); the target is untouched."""
    path = tmp_path / "c.sqlite"
    target = tmp_path / "victim.txt"
    if kind == "symlink":
        target.write_text("precious\n")
        path.symlink_to(target)
    elif kind == "dangling":
        path.symlink_to(target)
    elif kind == "hardlink":
        target.write_text("precious\n")
        os.link(target, path)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        target.write_text("precious\n")
        Path(f"{path}-wal").symlink_to(target)
    out = cli("run", str(GSM8K_SPEC), "--cache", str(path), "--set", "dataset.limit=2")
    assert out.exit_code == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: cache {path}")
    assert any(w in lines[0] for w in ("symlink", "hard links", "not a regular file"))
    if kind == "dangling":
        assert not target.exists()
    elif kind != "fifo":
        assert target.read_text() == "precious\n"
    assert not (tmp_path / "results").exists()


def test_processes_opening_one_new_cache_at_once_never_see_locked(tmp_path: Path) -> None:
    """4 processes x 25 rounds open a fresh file at one instant: no `database is locked`
    (before the fix, about one round in 30 failed on this machine)."""
    from bench_cache_open_race import race

    failed_rounds, failed_opens, messages = race(rounds=25, procs=4)
    assert (failed_rounds, failed_opens, messages) == (0, 0, [])


def test_a_read_only_open_writes_nothing(tmp_path: Path) -> None:
    """stats opens read-only: no WAL switch, no schema change, no claim table."""
    path = tmp_path / "c.sqlite"
    cache = ResponseCache(path)
    request = Request("replay", "m", None, None, ({"role": "user", "content": "q"},), {})
    cache.put("k", request, Response("a"))
    cache.close()
    before = path.read_bytes()
    mtime = path.stat().st_mtime_ns
    time.sleep(0.01)
    ro = ResponseCache(path, read_only=True)
    assert ro.stats().entries == 1 and ro.get("k") == Response("a")
    ro.close()
    assert path.stat().st_mtime_ns == mtime and path.read_bytes() == before
