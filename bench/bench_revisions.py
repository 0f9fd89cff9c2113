"""Two source trees of gradetrail side by side, interleaved in one session: is a change
(a redesign, say) slower?

Each scenario runs whole ``gradetrail run`` processes from tree A, then tree B, then A
again, ``--repeat`` times (interleaved, so the machine's load falls on both alike); each
process under ``/usr/bin/time -v`` as in :mod:`bench_runs` (whose helpers and protocol
server this uses), with the bytecode cache on (``PYTHONDONTWRITEBYTECODE`` removed) and a
first untimed run of each tree to fill it. Prints each scenario's medians for both trees,
the ratio B / A of wall time and of CPU time, and the load average.

Scenarios: ``c64`` (0 ms latency, 64 in flight, cache off: the harness's own CPU),
``cold`` (the same with the cache on, each run filling a new cache file: what a cache
write costs), ``a64`` (100 ms latency: ratio to the ideal), ``warm`` (every response cached),
``rescore`` (cached responses, a changed scorer) and ``rows`` (13,190 rows warm, replay).

    python bench/bench_revisions.py OLD_TREE NEW_TREE [--repeat 5] [--only c64 warm ...]

A tree is a checkout's root (``git worktree add /tmp/old main`` makes one).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench_runs import SPEC, N, http_args, load, timed  # noqa: E402
from protocol_server import running_server  # noqa: E402

SCENARIOS = ("c64", "cold", "a64", "warm", "rescore", "rows")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    args = ap.parse_args()
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE",)}
    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    work = Path(tempfile.mkdtemp(prefix="gt-bench-revisions-"))
    envs = {
        name: {**base, "PYTHONPATH": str(tree), "GRADETRAIL_CACHE": str(work / f"{name}.sqlite")}
        for name, tree in trees.items()
    }
    print(f"{os.cpu_count()} CPUs, medians of {args.repeat}, interleaved; {load()}", flush=True)
    try:
        with running_server(latency=0.0) as srv:
            cases = {
                "c64": (0.0, [*http_args(srv, 64), "--no-cache"], None),
                "cold": (0.0, [*http_args(srv, 64)], "cache"),
                "a64": (0.1, [*http_args(srv, 64), "--no-cache"], None),
                "warm": (0.0, [*http_args(srv, 64)], None),
                "rescore": (0.0, [*http_args(srv, 64)], "scorer.abs_tol"),
                "rows": (0.0, ["run", str(SPEC), "--set", "run.epochs=10"], None),
            }
            for name in args.only:
                latency, run_args, vary = cases[name]
                srv.configure(latency=latency)
                measures: dict[str, list] = {"old": [], "new": []}
                for tree in measures:  # untimed: bytecode, and the cache for warm runs
                    timed([*run_args, "--results-root", str(work / tree)], envs[tree], work)
                for i in range(args.repeat):
                    for tree in measures:
                        more = ["--set", f"{vary}={(i + 1) / 1e6:f}"] if vary else []
                        if vary == "cache":  # a new, empty cache file: every row a miss
                            more = ["--cache", str(work / f"cold-{tree}-{i}.sqlite")]
                        root = ["--results-root", str(work / tree)]
                        measures[tree].append(timed([*run_args, *more, *root], envs[tree], work))
                _print(name, measures)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _print(name: str, measures: dict[str, list]) -> None:
    wall = {t: statistics.median(m.wall for m in runs) for t, runs in measures.items()}
    cpu = {t: statistics.median(m.cpu for m in runs) for t, runs in measures.items()}
    rows = N * (10 if name == "rows" else 1)
    print(
        f"{name:8s} old wall {wall['old']:6.2f} s CPU {cpu['old']:6.2f} s | new wall "
        f"{wall['new']:6.2f} s CPU {cpu['new']:6.2f} s | new/old wall "
        f"{wall['new'] / wall['old']:.3f} CPU {cpu['new'] / cpu['old']:.3f} "
        f"({1000 * cpu['new'] / rows:.2f} ms CPU a row new)  [{load()}]",
        flush=True,
    )


if __name__ == "__main__":
    main()
