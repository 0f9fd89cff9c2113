"""What a ``kill -9`` of a cold cached run loses, and what its resume pays twice (issue 29).

"Batching writes must not widen what a crash can lose": this measures, for each source
tree, how many responses the server answered (paid for) that a ``kill -9`` leaves nowhere
durable, and how many requests the next run of the same spec then sends again.

For each tree and each kill instant (seconds after the run's first request reached the
server; default 1, 2 and 3 s), interleaved (A, B, A, B ...):

1. a cold run (``gradetrail run`` from that tree, ``PYTHONPATH=TREE``, bytecode on) of
   ``--rows`` synthetic rows (:func:`bench_scale.http_dataset`) through
   ``openai_compatible`` against the local protocol server at 0 ms latency, 256 in
   flight, with a new cache file and a new results root, is killed with ``SIGKILL`` at
   that instant;
2. once the server has no request in flight, it counts: ``answered`` (the server's 200
   answers, each one paid for), ``cached`` (rows in the cache file's ``responses``
   table, read with sqlite3), ``pending`` (lines of ``pending-cache.jsonl`` in the run
   directory, responses kept for a cache that could not take them) and ``results``
   (lines of the run directory's ``results.jsonl``). ``lost`` = answered - cached -
   pending: responses paid for that are stored nowhere, i.e. what the kill lost. It
   includes the responses the server had sent that the client had not read yet (in its
   socket buffers): with each response committed as it arrives, ``lost`` is at most the
   requests in flight (256); a write batch that widens the loss shows as ``lost`` above
   that;
3. the same command runs again to completion (same cache, same results root) and the
   server counts the requests it sends; ``paid twice`` = those whose request (the
   server's fingerprint: sha256 of the path and the canonical JSON body) the killed run
   had already sent. ``again`` is run 2's request count beside the ``rows - cached`` it
   should need.

    python bench/bench_kill.py OLD_TREE [NEW_TREE] [--rows 20000] [--at 1 2 3] [--repeat 1]

Prints one line per kill and, per tree, the medians over the kills.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench_scale import http_dataset, http_run, load, sampled, tree_env, warm_up  # noqa: E402
from protocol_server import ServerHandle, running_server  # noqa: E402


def cached_rows(cache: Path) -> int:
    """Rows in the cache file's ``responses`` table (0 if there is no file)."""
    if not cache.exists():
        return 0
    db = sqlite3.connect(f"file:{cache}?mode=ro", uri=True, timeout=30)
    try:
        return int(db.execute("SELECT COUNT(*) FROM responses").fetchone()[0])
    finally:
        db.close()


def lines_in(root: Path, name: str) -> int:
    """Lines of ``name`` in the run directories under ``root``."""
    total = 0
    for path in root.glob(f"*/{name}"):
        with path.open("rb") as fh:
            total += sum(1 for line in fh if line.strip())
    return total


def wait_first_arrival(srv: ServerHandle, proc: subprocess.Popen, timeout: float = 60) -> float:
    """The server's clock time of the first request (polling its stats)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"the run ended ({proc.returncode}) before its first request")
        arrivals = srv.stats()["arrivals"]
        if arrivals:
            return arrivals[0]
        time.sleep(0.02)
    sys.exit(f"no request within {timeout} s")


def one_kill(
    srv: ServerHandle, tree: Path, work: Path, spec: Path, rows: int, at: float, tag: str
) -> dict:
    """Kill a cold run ``at`` s after its first request; count; resume; count again."""
    cache = work / f"{tag}.sqlite"
    root = work / tag
    args = http_run(srv, spec, 256, "--cache", str(cache), "--results-root", str(root))
    cmd = [sys.executable, "-m", "gradetrail", *args, "--json"]
    env = tree_env(tree)
    srv.reset(config=False)
    with open(work / f"{tag}.log", "wb") as log:
        proc = subprocess.Popen(cmd, env=env, cwd=work, stdout=log, stderr=log)
        first = wait_first_arrival(srv, proc)
        time.sleep(max(0.0, first + at - time.time()))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed_at = time.time() - first
    if proc.returncode != -signal.SIGKILL:
        sys.exit(f"the run ended ({proc.returncode}) before the kill at {at} s: use more --rows")
    before = srv.settled_stats(0)
    answered = int(before["statuses"].get("200", 0))
    sent = set(before["fingerprints"])
    got = {
        "at": at,
        "killed_at": killed_at,
        "sent": int(before["total"]),
        "answered": answered,
        "not_200": {k: v for k, v in before["statuses"].items() if k != "200"},
        "cached": cached_rows(cache),
        "pending": lines_in(root, "pending-cache.jsonl"),
        "results": lines_in(root, "results.jsonl"),
    }
    got["lost"] = answered - got["cached"] - got["pending"]
    srv.reset(config=False)
    again = sampled(args, env, work)
    after = srv.settled_stats(0)
    got["again"] = int(after["total"])
    got["needed"] = rows - got["cached"]
    got["paid_twice"] = sum(n for fp, n in after["fingerprints"].items() if fp in sent)
    got["resume_hits"] = int(again.summary.get("cache_hits", 0))
    got["resume_counts"] = again.summary.get("counts")
    got["resume_wall"] = again.wall
    shutil.rmtree(root, ignore_errors=True)
    for companion in ("", "-wal", "-shm", "-key"):
        Path(f"{cache}{companion}").unlink(missing_ok=True)
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trees", type=Path, nargs="+", help="source trees (checkouts' roots)")
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--at", type=float, nargs="+", default=[1.0, 2.0, 3.0])
    ap.add_argument("--repeat", type=int, default=1, help="kills at each instant")
    args = ap.parse_args()
    names = ["old", "new"] if len(args.trees) == 2 else [f"t{i}" for i in range(len(args.trees))]
    trees = dict(zip(names, (t.resolve() for t in args.trees), strict=True))
    work = Path(tempfile.mkdtemp(prefix="gt-bench-kill-"))
    print(
        f"{os.cpu_count()} CPUs; {args.rows:,} rows, 256 in flight, 0 ms server, cache on (a "
        f"new file each kill), SIGKILL at {args.at} s after the first request; {load()}",
        flush=True,
    )
    for name, tree in trees.items():
        print(f"  {name}: {tree}", flush=True)
    results: dict[str, list[dict]] = {name: [] for name in trees}
    try:
        spec = http_dataset(work, args.rows)
        with running_server(latency=0.0) as srv:
            warm_up(srv, trees, work)
            for i in range(args.repeat):
                for at in args.at:
                    for name, tree in trees.items():
                        tag = f"{name}-{at:g}-{i}"
                        got = one_kill(srv, tree, work, spec, args.rows, at, tag)
                        results[name].append(got)
                        print(
                            f"{name:4s} kill at {got['killed_at']:.2f} s: sent {got['sent']:6d}"
                            f" answered {got['answered']:6d} cached {got['cached']:6d} pending "
                            f"{got['pending']:4d} results {got['results']:6d} | LOST "
                            f"{got['lost']:5d} | resume sent {got['again']:6d} (needed "
                            f"{got['needed']:6d}), PAID TWICE {got['paid_twice']:5d}; resume "
                            f"hits {got['resume_hits']}, {got['resume_counts']}"
                            f"{'; not 200: ' + str(got['not_200']) if got['not_200'] else ''}"
                            f"  [{load()}]",
                            flush=True,
                        )
        for name, runs in results.items():
            lost = [r["lost"] for r in runs]
            twice = [r["paid_twice"] for r in runs]
            print(
                f"{name}: what a kill can lose (answered, not cached): median "
                f"{statistics.median(lost):g}, max {max(lost)} | paid twice on resume: median "
                f"{statistics.median(twice):g}, max {max(twice)}  ({len(runs)} kills, 256 in "
                f"flight; {load()})",
                flush=True,
            )
        print(json.dumps(results, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
