"""Group commit: the claims and responses of one event-loop pass share one transaction,
and nothing about durability, errors or fallbacks changes with it."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from pathlib import Path

import pytest
from loop_support import run_on_fake_time

from gradetrail.cache.claims import CLAIM_TTL_S, Claim
from gradetrail.cache.group import MAX_WAITING
from gradetrail.cache.inflight import InFlight
from gradetrail.cache.store import ResponseCache, retry_advice
from gradetrail.errors import CacheError
from gradetrail.providers.base import Request, Response


def _request(i: int) -> Request:
    return Request(
        provider="openai",
        model="m",
        base_url=None,
        system=None,
        messages=({"role": "user", "content": f"q{i}"},),
        params={},
        sample_id=f"s{i}",
    )


def _rows(path: Path, table: str) -> int:
    with sqlite3.connect(path) as db:
        return db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]


def test_one_pass_of_claims_and_responses_is_one_transaction(tmp_path: Path) -> None:
    """32 tasks that each claim a key in one pass, then store its response in one pass,
    make two transactions (not 64); every response is committed (readable by another
    connection) by the time its ``put`` returns, and no claim is left behind."""
    cache = ResponseCache(tmp_path / "c.sqlite")
    committed_when_returned: list[bool] = []

    async def one(i: int) -> None:
        request = _request(i)
        assert await cache.group.claim(request.key()) is None
        await cache.group.put(request.key(), request, Response(f"a{i}"))
        with sqlite3.connect(tmp_path / "c.sqlite") as other:
            row = other.execute(
                "SELECT response FROM responses WHERE key = ?", (request.key(),)
            ).fetchone()
        committed_when_returned.append(row is not None)

    async def main() -> None:
        await asyncio.gather(*(one(i) for i in range(32)))

    try:
        asyncio.run(main())
        assert cache.group.commits == 2
        assert committed_when_returned == [True] * 32
        assert _rows(tmp_path / "c.sqlite", "responses") == 32
        assert _rows(tmp_path / "c.sqlite", "claims") == 0
        assert cache.get(_request(7).key()) == Response("a7")
    finally:
        cache.close()


def test_no_more_than_max_waiting_responses_wait_for_a_group(tmp_path: Path) -> None:
    """100 responses stored in one pass are written as they make MAX_WAITING (32, 64, 96),
    the last 4 at the start of the next pass: what a kill can lose beyond the responses
    whose tasks have not run stays under MAX_WAITING."""
    cache = ResponseCache(tmp_path / "c.sqlite")
    waiting_at_most: list[int] = []

    async def store(i: int) -> None:
        await cache.group.put(_request(i).key(), _request(i), Response(f"a{i}"))

    async def main() -> None:
        def watch() -> None:
            waiting_at_most.append(len(cache.group._entries))

        tasks = [asyncio.ensure_future(store(i)) for i in range(100)]
        asyncio.get_running_loop().call_soon(watch)  # after every task's first step
        await asyncio.gather(*tasks)

    try:
        asyncio.run(main())
        assert MAX_WAITING == 32
        assert cache.group.commits == 4
        assert waiting_at_most == [4]  # after the pass: only the 4 short of a group wait
        assert _rows(tmp_path / "c.sqlite", "responses") == 100
    finally:
        cache.close()


def test_a_group_written_at_max_waiting_leaves_the_pass_one_flush(tmp_path: Path) -> None:
    """64 workers that each claim a key, store its response and go on to the next key (a
    run's cold path on an instant provider) commit the 768 claims and responses of 6
    rounds in 19 transactions. Before, a group written at once as it made MAX_WAITING left
    the pass's scheduled flush in place and the next item scheduled a second one beside
    it, so most full groups were followed by a transaction of one item: 33 transactions,
    10 of them of one item."""
    cache = ResponseCache(tmp_path / "c.sqlite")

    async def worker(w: int) -> None:
        for r in range(6):
            request = _request(w * 100 + r)
            assert await cache.group.claim(request.key()) is None
            await cache.group.put(request.key(), request, Response(f"a{w}-{r}"))

    async def main() -> None:
        await asyncio.gather(*(worker(w) for w in range(64)))

    try:
        asyncio.run(main())
        assert cache.group.commits == 19
        assert _rows(tmp_path / "c.sqlite", "responses") == 64 * 6
        assert _rows(tmp_path / "c.sqlite", "claims") == 0
    finally:
        cache.close()


def test_a_grouped_claim_sees_a_response_or_another_process_claim(tmp_path: Path) -> None:
    """In one grouped transaction, a key already cached is answered with its response, a
    key claimed by another live process with its claim, a free key is claimed."""
    path = tmp_path / "c.sqlite"
    other, mine = ResponseCache(path), ResponseCache(path)
    cached, held, free = _request(1), _request(2), _request(3)
    try:
        other.put(cached.key(), cached, Response("kept"))
        assert other.claim(held.key()) is None

        async def main() -> list[object]:
            return list(
                await asyncio.gather(*(mine.group.claim(r.key()) for r in (cached, held, free)))
            )

        found = asyncio.run(main())
        assert mine.group.commits == 1
        assert found[0] == Response("kept")
        assert isinstance(found[1], Claim) and found[1].owner == other.owner
        assert found[2] is None and mine.holder(free.key()) is None
        assert isinstance(other.holder(free.key()), Claim)
    finally:
        other.close()
        mine.close()


def test_a_failed_group_falls_back_one_by_one_and_loses_nothing(tmp_path: Path) -> None:
    """When the file cannot be written at all (a directory took its place), each response
    of the group goes to the run's fallback on its own (counted as unsaved, none lost) and
    each claim is refused with the CacheError a lone claim gets: the call is not made."""
    path = tmp_path / "c.sqlite"
    cache = ResponseCache(path)
    kept: list[tuple[str, str]] = []
    cache.fallback = lambda key, provider, model, text, check: kept.append((key, text)) or True
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.mkdir()

    async def store(i: int) -> None:
        await cache.group.put(_request(i).key(), _request(i), Response(f"a{i}"))

    async def main() -> list[object]:
        claims = [cache.group.claim(_request(100 + i).key()) for i in range(3)]
        return await asyncio.gather(*claims, *(store(i) for i in range(5)), return_exceptions=True)

    try:
        outcomes = asyncio.run(main())
        assert [type(o) for o in outcomes[:3]] == [CacheError] * 3
        assert outcomes[3:] == [None] * 5
        assert sorted(k for k, _ in kept) == sorted(_request(i).key() for i in range(5))
        assert (cache.unsaved, cache.lost, cache.group.commits) == (5, 0, 0)
        assert cache.write_error is not None
    finally:
        cache.close()
        shutil.rmtree(path)


def test_a_cancelled_claim_is_not_written_and_a_cancelled_put_still_is(tmp_path: Path) -> None:
    """A caller cancelled before its group is written: its claim is dropped (nobody would
    call), its response is stored all the same (it was paid for)."""
    path = tmp_path / "c.sqlite"
    cache = ResponseCache(path)
    claimed, stored = _request(1), _request(2)

    async def main() -> None:
        claim = asyncio.ensure_future(cache.group.claim(claimed.key()))
        put = asyncio.ensure_future(cache.group.put(stored.key(), stored, Response("paid")))
        await asyncio.sleep(0)  # both are waiting for the group
        claim.cancel()
        put.cancel()
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    try:
        asyncio.run(main())
        assert _rows(path, "claims") == 0
        assert cache.get(stored.key()) == Response("paid")
    finally:
        cache.close()


def test_what_waits_for_a_group_is_written_when_the_cache_closes(tmp_path: Path) -> None:
    """A loop stopped before its group's turn loses nothing: closing the cache writes it."""
    path = tmp_path / "c.sqlite"
    cache = ResponseCache(path)
    request = _request(1)
    loop = asyncio.new_event_loop()
    try:
        task = loop.create_task(cache.group.put(request.key(), request, Response("paid")))
        loop.call_soon(loop.stop)  # runs before the group's flush
        loop.run_forever()
        assert not task.done()
    finally:
        cache.close()
        loop.run_until_complete(task)  # settled by the close
        loop.close()
    reopened = ResponseCache(path)
    try:
        assert reopened.get(request.key()) == Response("paid")
    finally:
        reopened.close()


def test_claims_in_flight_are_renewed_together_while_calls_run(tmp_path: Path) -> None:
    """While calls hold claims, one renewal a beat moves every claim's heartbeat to the
    wall clock plus CLAIM_TTL_S; once no call holds one, the beat due renews nothing and
    sets no other. On the fake-time loop, with the loop's clock as the cache's wall clock,
    at exact times."""
    path = tmp_path / "c.sqlite"
    renewals: list[float] = []
    seen: dict[float, list[float]] = {}

    def beats() -> list[float]:
        with sqlite3.connect(path) as db:
            return [e for (e,) in db.execute("SELECT expires_at FROM claims ORDER BY key")]

    async def call(i: int) -> Response:
        loop = asyncio.get_running_loop()
        for t in (5.0, 15.0, 25.0):  # between the beats, due at 10, 20, 30
            await asyncio.sleep(t - loop.time())
            seen[t] = beats()
        return Response(f"a{i}")

    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        cache = ResponseCache(path, wall=loop.time)
        renew_all = cache.claims.renew_all

        def renew_and_note() -> None:
            renewals.append(loop.time())
            renew_all()

        cache.claims.renew_all = renew_and_note  # type: ignore[method-assign]
        inflight = InFlight(cache, beat_s=10.0)
        try:
            await asyncio.gather(
                *(
                    inflight.once(_request(i).key(), lambda i=i: call(i), lambda r: r)
                    for i in range(2)
                )
            )
            assert (loop.time(), inflight._held) == (25.0, 0)
            assert inflight._beat is not None  # the beat set at 20, due at 30
            await asyncio.sleep(100.0)
            assert inflight._beat is None  # nothing held at 30: no renewal scheduled since
            return beats()
        finally:
            cache.close()

    last = run_on_fake_time(main())
    assert renewals == [10.0, 20.0]
    assert seen == {
        5.0: [CLAIM_TTL_S] * 2,  # both written at 0, in one group
        15.0: [10.0 + CLAIM_TTL_S] * 2,
        25.0: [20.0 + CLAIM_TTL_S] * 2,
    }
    assert last == [20.0 + CLAIM_TTL_S] * 2  # not renewed at 30: none was held


@pytest.mark.parametrize("tasks", [1, 300])
def test_responses_grouped_or_not_read_back_identical(tmp_path: Path, tasks: int) -> None:
    """A response stored through a group reads back as the one stored alone."""
    path = tmp_path / "c.sqlite"
    cache = ResponseCache(path)
    responses = [Response(f"é{i}\udc80", "end_turn", "stop", "m") for i in range(tasks)]

    async def main() -> None:
        await asyncio.gather(
            *(cache.group.put(_request(i).key(), _request(i), r) for i, r in enumerate(responses))
        )

    try:
        asyncio.run(main())
        cache.put("alone", _request(0), responses[0])
        assert cache.get("alone") == cache.get(_request(0).key()) == responses[0]
        assert [cache.get(_request(i).key()) for i in range(tasks)] == responses
    finally:
        cache.close()


def test_a_write_lock_held_past_the_busy_timeout_is_waited_for_once(tmp_path: Path) -> None:
    """Another connection holds the cache's write lock (a `cache clear`, a program with the
    file open) past the busy timeout: the grouped write waits for it once; the responses
    of that pass and of later ones go to the run's fallback, claims fail and renewals are
    skipped, none waiting again (before: each response and claim waited the full timeout
    in turn, so a run with calls in flight hung for their number times 30 s, as long as
    the lock was held; a 400 s lock held a run at 65 of 2,000 rows for all 400 s)."""
    path = tmp_path / "c.sqlite"
    cache = ResponseCache(path, timeout_s=0.05)
    kept: list[tuple[str, ...]] = []
    cache.fallback = lambda *row: kept.append(row) is None
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    statements: list[str] = []
    cache._db.set_trace_callback(statements.append)

    async def main() -> list[object]:
        puts = [
            cache.group.put(_request(i).key(), _request(i), Response(str(i))) for i in range(10)
        ]
        claims = [cache.group.claim(_request(i).key()) for i in range(10, 15)]
        first = await asyncio.gather(*puts, *claims, return_exceptions=True)
        later = [
            cache.group.put(_request(i).key(), _request(i), Response(str(i))) for i in range(15, 20)
        ]
        return first + await asyncio.gather(*later, return_exceptions=True)

    try:
        outcomes = asyncio.run(main())
        cache.claims.renew_all()
    finally:
        cache._db.set_trace_callback(None)
        holder.execute("ROLLBACK")
        holder.close()
    assert outcomes[:10] == [None] * 10 and outcomes[15:] == [None] * 5
    assert all(
        isinstance(o, CacheError) and "database is locked" in str(o) for o in outcomes[10:15]
    )
    assert sorted(row[0] for row in kept) == sorted(
        _request(i).key() for i in (*range(10), *range(15, 20))
    )
    assert (cache.unsaved, cache.lost) == (15, 0)
    assert cache.write_error is not None  # what the run's last line says to do:
    assert retry_advice(cache.write_error) == (
        "another process held the cache's write lock too long (a `gradetrail cache clear`, "
        "or a program with the file open): once it is done, run the same command again"
    )
    assert [s for s in statements if s.startswith(("BEGIN", "UPDATE"))] == ["BEGIN IMMEDIATE"]
    cache.close()
    assert _rows(path, "responses") == 0
