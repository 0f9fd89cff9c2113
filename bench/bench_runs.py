"""Whole-process benchmarks of `gradetrail run`, one per row of issue 16's table.

Every figure is one `gradetrail run` process under ``/usr/bin/time -v`` (wall, user +
system CPU, peak RSS), the median of ``--repeat`` runs (at least 3). The local protocol
server (tests/protocol_server.py) runs in its own process, started outside the timed one,
so its CPU is not counted. The interpreter writes its bytecode cache as on a user's
machine: ``PYTHONDONTWRITEBYTECODE`` is removed from the children's environment (and a
first untimed run fills ``__pycache__``).

Scenarios (1,319 GSM8K test problems unless said otherwise):

- ``startup``: start-up to the first request: from the moment this script starts the
  ``gradetrail run`` process (the a64 run: 100 ms latency, 64 in flight, cache off) to the
  first request's arrival at the server (the server's ``arrivals`` stats, same clock).
  Beside it the ideal: a bare ``python -c pass`` (process start and exit), a bare
  ``aiohttp`` request (a process that imports aiohttp and POSTs one chat completion),
  timed the same way, and the libraries alone (start to exit of a process that parses a
  typer command and uses Jinja2's sandbox, PyYAML, asyncio and sqlite3 once: what a run
  imports before its first request, without gradetrail's own code). Target 0.5 s.
- ``a16`` / ``a64``: ``openai_compatible`` against the server at 100 ms latency, 16 / 64
  in flight, cache off. Ideal: ceil(1319 / C) x 0.1 s (8.3 s / 2.1 s). Also prints the
  most requests the server saw in flight, and from the server's arrivals: when the first
  request arrived, how long after it the 64th did (the ramp), and how long the process
  ran after the last request arrived (the tail: the last responses, write-out, summary,
  exit).
- ``c16`` / ``c64``: the same at 0 ms latency: the harness's own cost, as CPU ms a sample
  (the whole process's user + system CPU over 1,319).
- ``warm``: the HTTP spec again with every response cached (no request is made).
- ``rescore``: the same cached responses with a changed scorer (a new ``abs_tol`` each
  run, so each is a new run directory and every score is recomputed).
- ``rows``: warm runs of 1,319 (GSM8K, replay), 13,190 (GSM8K x 10 epochs, replay) and
  100,000 rows (a synthetic replay dataset): time and peak RSS against the row count.

The ideal of a warm run is ~0 s; the table prints the figure itself. The load average
(1 minute) is printed before each scenario: on a shared machine, quote ratios and the
load beside them.

    python bench/bench_runs.py [--repeat 3] [--only startup a64 c64 warm ...] [--rows 100000]
        [--work DIR]  # reuse DIR: fill the cache outside the benchmark lock, then time warm
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from bench_rescore import synthetic  # noqa: E402 - one synthetic dataset for both benches
from protocol_server import ServerHandle, running_server  # noqa: E402

SPEC = ROOT / "examples" / "gsm8k.yaml"
N = 1319
SCENARIOS = ("startup", "a16", "a64", "c16", "c64", "warm", "rescore", "rows")
#: the bare aiohttp request of the start-up ideal: argv[1] is the chat completions URL
BARE_AIOHTTP = """
import asyncio, sys
import aiohttp

async def main():
    body = {"model": "175b_verification", "messages": [{"role": "user", "content": "1+1"}]}
    async with aiohttp.ClientSession() as session:
        async with session.post(sys.argv[1], json=body) as resp:
            await resp.read()

asyncio.run(main())
"""
# the floor of gradetrail's start-up: the libraries a run imports before its first
# request (a typer command parsed, which builds its pydantic adapters; Jinja2's sandbox,
# PyYAML, asyncio, sqlite3), imported and used once, no gradetrail code
LIBRARIES_ONLY = """
import asyncio, sqlite3
import jinja2.sandbox, pydantic, typer, yaml

app = typer.Typer()

@app.command()
def main(spec: str, concurrency: int = 1) -> None:
    yaml.safe_load("a: 1")
    jinja2.sandbox.ImmutableSandboxedEnvironment().from_string("{{ x }}").render(x=spec)

app(["s.yaml", "--concurrency", "64"], standalone_mode=False)
"""
_TIME_FIELDS = {
    "wall": re.compile(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)"),
    "user": re.compile(r"User time \(seconds\): (\S+)"),
    "sys": re.compile(r"System time \(seconds\): (\S+)"),
    "rss_kb": re.compile(r"Maximum resident set size \(kbytes\): (\d+)"),
}


@dataclass
class Measure:
    """One process: wall and CPU seconds, peak RSS in MB, its --json summary."""

    wall: float
    cpu: float
    rss_mb: float
    summary: dict
    started: float = 0.0  # time.time() just before the process was started
    ended: float = 0.0  # time.time() once it had exited


def _seconds(text: str) -> float:
    parts = [float(p) for p in text.split(":")]
    return sum(p * 60**i for i, p in enumerate(reversed(parts)))


def timed(args: list[str], env: dict[str, str], cwd: Path) -> Measure:
    """Run ``gradetrail ARGS --json`` under /usr/bin/time -v."""
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "gradetrail", *args, "--json"]
    started = time.time()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    ended = time.time()
    if proc.returncode != 0:
        sys.exit(f"gradetrail failed ({proc.returncode}): {proc.stderr[-2000:]}")
    measure = measured(proc.stderr, json.loads(proc.stdout), started, ended)
    if measure is None:
        sys.exit(f"no /usr/bin/time -v figures in: {proc.stderr[-500:]}")
    return measure


def measured(stderr: str, summary: dict, started: float, ended: float) -> Measure | None:
    """The figures ``/usr/bin/time -v`` wrote to a process's ``stderr`` (wall, user +
    system CPU seconds, peak RSS), with ``summary`` and the process's start and end (epoch
    seconds); None when they are not there."""
    got = {k: p.search(stderr) for k, p in _TIME_FIELDS.items()}
    if not all(got.values()):
        return None
    values = {k: m.group(1) for k, m in got.items() if m}
    return Measure(
        wall=_seconds(values["wall"]),
        cpu=float(values["user"]) + float(values["sys"]),
        rss_mb=int(values["rss_kb"]) / 1024,
        summary=summary,
        started=started,
        ended=ended,
    )


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def report(name: str, runs: list[Measure], ideal: float | None, extra: str = "") -> dict:
    """Print the medians of ``runs``; return them."""
    wall = statistics.median(m.wall for m in runs)
    cpu = statistics.median(m.cpu for m in runs)
    rss = statistics.median(m.rss_mb for m in runs)
    rows = runs[0].summary.get("n_samples", 0) * runs[0].summary.get("epochs", 1)
    line = f"{name:34s} wall {wall:6.2f} s  CPU {cpu:6.2f} s"
    if rows:
        line += f" ({1000 * cpu / rows:5.2f} ms a row)"
    line += f"  peak RSS {rss:5.0f} MB"
    if ideal:
        line += f"  ideal {ideal:.1f} s: {wall / ideal:.2f}x"
    walls = ", ".join(f"{m.wall:.2f}" for m in runs)
    print(f"{line}{extra}  [{walls}; {load()}]", flush=True)
    return {"name": name, "wall_s": wall, "cpu_s": cpu, "rss_mb": rss, "ideal_s": ideal}


def http_args(srv: ServerHandle, concurrency: int, *more: str) -> list[str]:
    sets = [*srv.openai_compatible_overrides, f"run.concurrency={concurrency}"]
    return [
        "run",
        str(SPEC),
        *(arg for value in sets for arg in ("--set", value)),
        *more,
    ]


def latency_case(
    srv: ServerHandle, c: int, latency: float, repeat: int, env: dict, work: Path
) -> dict:
    """a16/a64 (latency 0.1) or c16/c64 (latency 0): cache off."""
    srv.configure(latency=latency)
    args = [*http_args(srv, c), "--no-cache", "--results-root", str(work / "r")]
    runs, seen, first, ramp, tail = [], [], [], [], []
    for _ in range(repeat):
        srv.reset(config=False)
        runs.append(timed(args, env, work))
        stats = srv.stats()
        seen.append(stats["max_in_flight"])
        arrivals = stats["arrivals"]
        first.append(arrivals[0] - runs[-1].started)
        ramp.append(arrivals[min(c, len(arrivals)) - 1] - arrivals[0])
        tail.append(runs[-1].ended - arrivals[-1])
        assert runs[-1].summary["counts"] == {"scored": N}, runs[-1].summary["counts"]
    ideal = math.ceil(N / c) * latency if latency else None
    name = f"{'a' if latency else 'c'}{c}: {latency * 1000:.0f} ms, {c} in flight"
    extra = (
        f"  server saw {max(seen)} in flight; first request at "
        f"{statistics.median(first):.2f} s, {c} in flight {1000 * statistics.median(ramp):.0f}"
        f" ms after it, exit {statistics.median(tail):.2f} s after the last"
    )
    return report(name, runs, ideal, extra)


def first_arrival(srv: ServerHandle, cmd: list[str], env: dict, work: Path) -> float:
    """Seconds from starting ``cmd`` to the first request's arrival at ``srv`` (the
    process then runs to its end, which must be a success)."""
    srv.reset(config=False)
    started = time.time()
    proc = subprocess.run(cmd, env=env, cwd=work, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{cmd[:4]} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    arrivals = srv.stats()["arrivals"]
    if not arrivals:
        sys.exit(f"{cmd[:4]} made no request")
    return arrivals[0] - started


def startup_case(srv: ServerHandle, repeat: int, env: dict, work: Path) -> dict:
    """Start-up to the first request of the a64 run, beside the ideal (see the module
    docstring)."""
    srv.configure(latency=0.1)
    gradetrail = [sys.executable, "-m", "gradetrail"]
    gradetrail += [*http_args(srv, 64), "--no-cache", "--results-root", str(work / "s")]
    bare = [sys.executable, "-c", BARE_AIOHTTP, srv.openai_base_url + "/chat/completions"]
    firsts = [first_arrival(srv, gradetrail, env, work) for _ in range(repeat)]
    bares = [first_arrival(srv, bare, env, work) for _ in range(repeat)]
    passes, libraries = [], []
    for _ in range(repeat):
        for code, times in (("pass", passes), (LIBRARIES_ONLY, libraries)):
            started = time.time()
            subprocess.run([sys.executable, "-c", code], env=env, check=True)
            times.append(time.time() - started)
    got, ideal = statistics.median(firsts), statistics.median(bares)
    line = (
        f"{'start-up to the first request (a64)':34s} {got:6.3f} s  target 0.5 s  ideal: "
        f"python -c pass {statistics.median(passes):.3f} s, a bare aiohttp request "
        f"{ideal:.3f} s ({got / ideal:.2f}x), the libraries alone "
        f"{statistics.median(libraries):.3f} s"
    )
    runs = ", ".join(f"{f:.3f}" for f in firsts)
    print(f"{line}  [{runs}; {load()}]", flush=True)
    return {
        "name": "startup",
        "first_request_s": got,
        "python_pass_s": statistics.median(passes),
        "bare_aiohttp_s": ideal,
        "libraries_only_s": statistics.median(libraries),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    ap.add_argument("--rows", type=int, default=100_000, help="rows of the large warm run")
    ap.add_argument(
        "--work",
        type=Path,
        help="keep the work directory (cache, datasets, results) here and reuse it: a first "
        "invocation fills the cache (its cold runs), so one under the benchmark lock runs "
        "only warm processes",
    )
    args = ap.parse_args()
    repeat = max(3, args.repeat)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    print(
        f"{os.cpu_count()} CPUs, python {sys.version.split()[0]}, {load()}; bytecode cache "
        f"on (PYTHONDONTWRITEBYTECODE unset); medians of {repeat}",
        flush=True,
    )
    work = args.work or Path(tempfile.mkdtemp(prefix="gt-bench-runs-"))
    work.mkdir(parents=True, exist_ok=True)
    env["GRADETRAIL_CACHE"] = str(work / "cache.sqlite")
    results: list[dict] = []
    try:
        with running_server(latency=0.0) as srv:
            timed([*http_args(srv, 64), "--no-cache", "--results-root", str(work / "r")], env, work)
            subprocess.run([sys.executable, "-c", "import aiohttp"], env=env, check=True)
            if "startup" in args.only:
                results.append(startup_case(srv, repeat, env, work))
            for name, c, latency in (("a16", 16, 0.1), ("a64", 64, 0.1), ("c16", 16, 0.0)):
                if name in args.only:
                    results.append(latency_case(srv, c, latency, repeat, env, work))
            if "c64" in args.only:
                results.append(latency_case(srv, 64, 0.0, repeat, env, work))
            srv.configure(latency=0.0)
            warm = [*http_args(srv, 64), "--results-root", str(work / "w")]
            if {"warm", "rescore"} & set(args.only):
                timed(warm, env, work)  # fills the cache
            if "warm" in args.only:
                runs = [timed(warm, env, work) for _ in range(repeat)]
                assert all(m.summary["cache_hits"] == N for m in runs)
                results.append(report("warm: 1,319 cached, HTTP spec", runs, None))
            if "rescore" in args.only:
                runs = [
                    timed([*warm, "--set", f"scorer.abs_tol={(i + 1) / 1e6:f}"], env, work)
                    for i in range(repeat)
                ]
                assert all(m.summary["cache_hits"] == N for m in runs)
                results.append(report("re-score: changed scorer, 1,319", runs, None))
        if "rows" in args.only:
            results += rows_case(args.rows, repeat, env, work)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(results, indent=2))


def rows_case(rows: int, repeat: int, env: dict, work: Path) -> list[dict]:
    """Warm runs of 1,319, 13,190 and ``rows`` rows (each filled by one cold run first)."""
    out = []
    cases = [
        (f"{N:,} rows warm (GSM8K, replay)", ["run", str(SPEC)]),
        (f"{10 * N:,} rows warm (GSM8K x 10 epochs)", ["run", str(SPEC), "--set", "run.epochs=10"]),
        (f"{rows:,} rows warm (synthetic, replay)", ["run", str(synthetic(work, rows))]),
    ]
    for name, run_args in cases:
        args = [*run_args, "--results-root", str(work / "rows")]
        timed(args, env, work)  # cold: fills the cache
        runs = [timed(args, env, work) for _ in range(repeat)]
        out.append(report(name, runs, None))
    return out


if __name__ == "__main__":
    main()
