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

Issue 29's scenarios besides ``a64`` and ``warm``:

- ``startup``: from starting the a64 process (100 ms, 64 in flight, cache off) to the first
  request's arrival at the server (:func:`bench_runs.first_arrival`, one clock).
- ``cold100k``: 100,000 synthetic rows (:func:`bench_scale.http_dataset`: GSM8K questions
  cycled, each prompt distinct) through ``openai_compatible`` and the 0 ms server, 64 in
  flight, cache on, a new cache file and results root each run: rows/s, peak RSS, RSS at
  10/50/90 % of the run.
- ``warm100k``: the same 100,000 rows with every response cached: each tree fills its own
  cache file once, untimed (cache keys may differ between trees), then every timed run
  must be all hits.
- ``replay100k``: the workload the issue's cold and warm 100,000-row figures were filed
  with (:func:`bench_rescore.synthetic`: a replay provider, the numeric scorer, 64 in
  flight): each run fills a new cache file (cold), then runs again on it (warm, every
  row a hit).
- ``million``: 1,000,000 of those rows, 256 in flight, cache on (a new file each run), run
  to the end, RSS sampled every 0.5 s (a run takes 17 min or more on 2 cores, ~90 min
  at load 9: use ``--repeat 1``, or ``bench/bench_scale.py`` for one tree).

The load average (1, 5, 15 min) is printed with each scenario's line.

    python bench/bench_revisions.py OLD_TREE NEW_TREE [--repeat 5] [--only c64 warm ...]
    python bench/bench_revisions.py OLD NEW --repeat 3 --only startup a64 warm cold100k warm100k
    python bench/bench_revisions.py OLD NEW --repeat 3 --only replay100k
    python bench/bench_revisions.py OLD NEW --repeat 1 --only million

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

from bench_rescore import synthetic  # noqa: E402
from bench_runs import SPEC, N, first_arrival, http_args, timed  # noqa: E402
from bench_scale import (  # noqa: E402
    Sampled,
    cold_runs,
    http_dataset,
    http_run,
    load,
    sampled,
    warm_up,
)
from bench_scale import line as scale_line  # noqa: E402
from protocol_server import ServerHandle, running_server  # noqa: E402

SCENARIOS = ("c64", "cold", "a64", "warm", "rescore", "rows")
SCALE = ("startup", "cold100k", "warm100k", "replay100k", "million")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument(
        "--only",
        nargs="+",
        choices=(*SCENARIOS, *SCALE),
        default=[*SCENARIOS, "startup", "cold100k", "warm100k"],
        help="scenarios (default: all but million)",
    )
    ap.add_argument(
        "--scale-rows",
        type=int,
        default=100_000,
        help="rows of cold100k / warm100k (smaller only to try the script out)",
    )
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
                if name in SCALE:
                    scale_case(name, srv, trees, envs, work, args.repeat, args.scale_rows)
                    continue
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


def scale_case(
    name: str,
    srv: ServerHandle,
    trees: dict[str, Path],
    envs: dict[str, dict[str, str]],
    work: Path,
    repeat: int,
    scale_rows: int = 100_000,
) -> None:
    """``startup``, ``cold100k``, ``warm100k`` or ``million`` (see the module docstring)."""
    if name == "startup":
        srv.configure(latency=0.1)
        firsts: dict[str, list[float]] = {"old": [], "new": []}
        for tree in firsts:  # untimed: bytecode
            timed(
                [*http_args(srv, 64), "--no-cache", "--results-root", str(work / tree)],
                envs[tree],
                work,
            )
        for _ in range(repeat):
            for tree in firsts:
                cmd = [sys.executable, "-m", "gradetrail", *http_args(srv, 64), "--no-cache"]
                cmd += ["--results-root", str(work / tree)]
                firsts[tree].append(first_arrival(srv, cmd, envs[tree], work))
        old, new = (statistics.median(firsts[t]) for t in ("old", "new"))
        runs = "; ".join(f"{t} " + ", ".join(f"{v:.3f}" for v in firsts[t]) for t in firsts)
        print(
            f"{name:8s} start to first request: old {old:.3f} s | new {new:.3f} s | new/old "
            f"{new / old:.3f}  [{runs}; {load()}]",
            flush=True,
        )
        return
    srv.configure(latency=0.0)
    if name == "replay100k":
        replay_case(trees, envs, work, repeat, scale_rows)
        return
    if name in ("cold100k", "million"):
        rows, concurrency = (scale_rows, 64) if name == "cold100k" else (1_000_000, 256)
        warm_up(srv, trees, work)  # untimed: bytecode
        progress = 60.0 if name == "million" else None
        runs = cold_runs(srv, trees, work, rows, concurrency, repeat, progress)
    else:  # warm100k: each tree fills its own cache once, untimed
        rows = scale_rows
        spec = http_dataset(work, rows)
        runs = {tree: [] for tree in trees}
        args = {
            tree: http_run(
                srv,
                spec,
                64,
                "--cache",
                str(work / f"warm100k-{tree}.sqlite"),
                "--results-root",
                str(work / f"warm100k-{tree}"),
            )
            for tree in trees
        }
        for tree in trees:
            fill = sampled(args[tree], envs[tree], work)
            print(f"  {tree} fill: {fill.rows / fill.wall:.0f} rows/s (cold, untimed)", flush=True)
        for _ in range(repeat):
            for tree in trees:
                m: Sampled = sampled(args[tree], envs[tree], work)
                assert m.summary["cache_hits"] == rows, (tree, m.summary["cache_hits"])
                runs[tree].append(m)
    _report(name, f"{rows:,} rows, 0 ms server, cache on", runs)


def replay_case(
    trees: dict[str, Path], envs: dict[str, dict[str, str]], work: Path, repeat: int, rows: int
) -> None:
    """``replay100k`` (see the module docstring): cold then warm, each tree in turn."""
    folder = work / "replay100k"
    folder.mkdir(exist_ok=True)
    spec = synthetic(folder, rows)
    runs: dict[str, dict[str, list[Sampled]]] = {"cold": {t: [] for t in trees}}
    runs["warm"] = {t: [] for t in trees}
    for i in range(-1, repeat):  # the first round is untimed: bytecode
        for tree in trees:
            cache = folder / f"{tree}-{i}.sqlite"
            args = ["run", str(spec), "--cache", str(cache)]
            args += ["--results-root", str(folder / tree)]
            cold = sampled(args, envs[tree], folder)
            warm = sampled(args, envs[tree], folder)
            assert warm.summary["cache_hits"] == rows, (tree, warm.summary["cache_hits"])
            if i >= 0:
                runs["cold"][tree].append(cold)
                runs["warm"][tree].append(warm)
    for kind, measured in runs.items():
        _report(f"replay100k {kind}", f"{rows:,} rows, replay provider, cache on", measured)


def _report(name: str, what: str, runs: dict[str, list[Sampled]]) -> None:
    """Each tree's runs, then the medians' ratios new / old: wall, CPU and peak RSS."""
    print(f"{name} ({what})", flush=True)
    for tree, measured in runs.items():
        print("  " + scale_line(tree, measured), flush=True)
    ratio = {
        what: statistics.median(getattr(m, what) for m in runs["new"])
        / statistics.median(getattr(m, what) for m in runs["old"])
        for what in ("wall", "cpu", "rss_mb")
    }
    print(
        f"{name}: new/old wall {ratio['wall']:.3f}, CPU {ratio['cpu']:.3f}, "
        f"peak RSS {ratio['rss_mb']:.3f}",
        flush=True,
    )


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
