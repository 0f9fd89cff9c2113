"""Filling a cache: SQLite's default checkpoint interval against gradetrail's.

Each round fills a new cache file with ``--rows`` responses as a run at ``--concurrency``
calls in flight does (a claim written before each call, the response on a later pass
of the event loop, both through the cache's grouped transactions), then closes it.
Configurations alternate within each round, so a busy machine weighs on both alike.

For each ``wal_autocheckpoint`` (SQLite's default of 1,000 frames, and
:data:`gradetrail.cache.store.WAL_AUTOCHECKPOINT_PAGES`), it prints the median seconds to
fill and to close (the last checkpoint runs at close), and the read and write system
calls of the whole round from ``/proc/self/io`` (``syscr``, ``syscw``: repeatable where
seconds are not), with the load average.

Usage: python bench/bench_sqlite.py [--rows 20000] [--repeat 5] [--concurrency 256]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gradetrail.cache import store  # noqa: E402 - after the path is set
from gradetrail.providers.base import Request, Response  # noqa: E402

SQLITE_DEFAULT = 1000


def _io() -> tuple[int, int]:
    """(read system calls, write system calls) of this process so far (Linux)."""
    fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(fields["syscr"]), int(fields["syscw"])


async def _fill(cache: store.ResponseCache, rows: int, concurrency: int) -> None:
    """Claim, then store, ``rows`` responses of about a GSM8K answer's size, at most
    ``concurrency`` at a time, each stored on a later loop pass than its claim."""
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with gate:
            request = Request("openai", "m", None, None, ({"role": "user", "content": str(i)},), {})
            key = request.key()
            await cache.group.claim(key)
            await asyncio.sleep(0)  # the response arrives on a later pass
            text = f"Step {i}: " + "the answer is reasoned out here. " * 10 + f"#### {i}"
            await cache.group.put(key, request, Response(text, "end_turn", "stop", "m", 120, 80))

    await asyncio.gather(*(one(i) for i in range(rows)))


def round_(folder: Path, pages: int, rows: int, concurrency: int) -> tuple[float, float, int, int]:
    """One fill and close of a new cache with ``wal_autocheckpoint`` = ``pages``;
    returns (fill seconds, close seconds, read calls, write calls)."""
    store.WAL_AUTOCHECKPOINT_PAGES = pages
    path = folder / f"c{pages}.sqlite"
    reads, writes = _io()
    cache = store.ResponseCache(path)
    start = time.perf_counter()
    asyncio.run(_fill(cache, rows, concurrency))
    filled = time.perf_counter()
    cache.close()
    closed = time.perf_counter()
    reads2, writes2 = _io()
    for name in (path.name, f"{path.name}-wal", f"{path.name}-shm", f"{path.name}-key"):
        (folder / name).unlink(missing_ok=True)
    return filled - start, closed - filled, reads2 - reads, writes2 - writes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=256)
    args = parser.parse_args()
    chosen = store.WAL_AUTOCHECKPOINT_PAGES
    configs = (SQLITE_DEFAULT, chosen)
    results: dict[int, list[tuple[float, float, int, int]]] = {c: [] for c in configs}
    with tempfile.TemporaryDirectory(prefix="gt-bench-sqlite-") as tmp:
        for n in range(args.repeat + 1):  # the first round warms the page cache: not kept
            for pages in configs if n % 2 else reversed(configs):
                result = round_(Path(tmp), pages, args.rows, args.concurrency)
                if n:
                    results[pages].append(result)
    store.WAL_AUTOCHECKPOINT_PAGES = chosen
    print(f"{args.rows:,} responses, {args.concurrency} in flight, {args.repeat} rounds")
    for pages, runs in results.items():
        fill, close, reads, writes = (statistics.median(r[k] for r in runs) for k in range(4))
        us = fill / args.rows * 1e6
        print(
            f"wal_autocheckpoint {pages:>5}: fill {fill:.3f} s ({us:.0f} us a response), "
            f"close {close * 1000:.1f} ms, {reads / args.rows:.2f} reads and "
            f"{writes / args.rows:.2f} writes a response"
        )
    print("load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
