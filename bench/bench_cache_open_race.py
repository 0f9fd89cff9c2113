"""Fresh-file race stress test: several processes open one *new* cache file at once.

Each round makes a fresh directory, forks ``--procs`` processes that wait on one barrier
and then all open ``ResponseCache(dir / "cache.sqlite")`` and write one entry at the same
instant. A round fails when any process gets an error (before the fix, ``database is
locked``: the first switch of a new file to WAL is not covered by SQLite's busy timeout).
Prints failures per round and per open, and the load average (the race is timing-bound:
a loaded machine shows it more often).

Usage: python bench/bench_cache_open_race.py [--rounds 300] [--procs 4]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _open_and_write(path: str, barrier, errors) -> None:  # noqa: ANN001
    """One process: wait for the others, then open the cache and store one response."""
    from gradetrail.cache.store import ResponseCache
    from gradetrail.providers.base import Request, Response

    request = Request("replay", "m", None, None, ({"role": "user", "content": "q"},), {})
    barrier.wait()
    try:
        cache = ResponseCache(Path(path))
        cache.put(f"{os.getpid():064d}", request, Response("a"))
        cache.close()
    except Exception as exc:  # noqa: BLE001 - every failure is counted and shown
        errors.put(f"{type(exc).__name__}: {exc}")


def race(rounds: int, procs: int) -> tuple[int, int, list[str]]:
    """Run ``rounds`` rounds of ``procs`` simultaneous opens of a fresh cache file.

    Returns:
        ``(rounds with a failure, failed opens, distinct messages)``.
    """
    import gradetrail.cache.store  # noqa: F401 - imported once in the parent, shared by fork

    ctx = multiprocessing.get_context("fork")
    failed_rounds, failed_opens, messages = 0, 0, set()
    with tempfile.TemporaryDirectory(prefix="gt-race-") as tmp:
        for n in range(rounds):
            path = str(Path(tmp) / f"r{n}" / "cache.sqlite")
            barrier, errors = ctx.Barrier(procs), ctx.Queue()
            children = [
                ctx.Process(target=_open_and_write, args=(path, barrier, errors))
                for _ in range(procs)
            ]
            for child in children:
                child.start()
            for child in children:
                child.join(60)
            found = []
            while not errors.empty():
                found.append(errors.get())
            failed_rounds += bool(found)
            failed_opens += len(found)
            messages.update(found)
    return failed_rounds, failed_opens, sorted(messages)


def main() -> None:
    """Run the stress test and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--procs", type=int, default=4)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
    start = time.perf_counter()
    rounds, opens, messages = race(args.rounds, args.procs)
    wall = time.perf_counter() - start
    total = args.rounds * args.procs
    print(
        f"{args.rounds} rounds x {args.procs} processes: {rounds} rounds failed "
        f"({rounds / args.rounds:.1%}), {opens}/{total} opens failed, {wall:.1f} s"
    )
    for message in messages:
        print(f"  {message}")


if __name__ == "__main__":
    main()
