"""Large cold and warm runs through the real HTTP provider and the cache (issue 29).

Every run is one ``gradetrail run`` process (``python -m gradetrail`` with
``PYTHONPATH=TREE``, bytecode cache on) against the local protocol server
(tests/protocol_server.py, in its own process, 0 ms latency), with the
``openai_compatible`` provider and the cache on. The dataset is synthetic: ``ROWS`` GSM8K
test questions cycled, each prompt made distinct by its row id (``Problem p17. ... Q:
...``), so every row is its own request and cache entry and the server answers each with
a recorded solution (a realistic response size); the numeric scorer scores it.

While a process runs, its resident set (``VmRSS`` in ``/proc/PID/status``) is sampled
every 0.5 s; its peak RSS and CPU come from ``wait4`` (the kernel's ``ru_maxrss``, as
``/usr/bin/time -v`` reports it). Printed per run: rows/s, wall, CPU, peak RSS, and RSS at
10 %, 50 % and 90 % of the run's wall time (flat in the row count, or growing). The
server's CPU a row (``/proc/PID/stat`` around each run) is printed beside gradetrail's,
with the rows a second the two CPU figures allow on this machine's cores together: a
ceiling no client can pass while the server shares its machine.

Scenario ``million`` (issue 29): 1,000,000 rows, 256 in flight, a new cache file and a
new results root, run to the end (17 min or more a run on 2 cores: ~1,000 rows/s idle,
~180 rows/s at load 9). One tree or several, interleaved (A, B, A, B ...)::

    python bench/bench_scale.py /work/base29                  # one tree, one run
    python bench/bench_scale.py OLD NEW --repeat 3             # interleaved
    python bench/bench_scale.py OLD --rows 100000 --concurrency 64

``bench/bench_revisions.py`` uses these helpers for its ``cold100k``, ``warm100k`` and
``million`` scenarios.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from bench_protocol_server import process_cpu_seconds  # noqa: E402
from protocol_server import ServerHandle, running_server  # noqa: E402

GSM8K = ROOT / "examples" / "data" / "gsm8k" / "test.jsonl"
SPEC_TEXT = """\
name: scale
dataset: {path: data.jsonl}
prompt: |
  Problem {{ id }}. Solve the math word problem. End with a line "A: <answer>".

  Q: {{ question }}
target: '{{ answer }}'
model:
  provider: openai_compatible
  name: 175b_verification
  base_url: http://127.0.0.1:9/v1
  api_key_required: false
scorer: {type: numeric, marker: 'A:'}
run: {concurrency: 64}
"""


def http_dataset(work: Path, rows: int) -> Path:
    """Write ``rows`` synthetic rows and their spec under ``work/scale-ROWS``; return the
    spec (reused when it is already there). The spec's ``base_url`` is a placeholder:
    :func:`http_run` points it at the server."""
    folder = work / f"scale-{rows}"
    spec = folder / "scale.yaml"
    if spec.exists():
        return spec
    folder.mkdir(parents=True, exist_ok=True)
    with GSM8K.open(encoding="utf-8") as fh:
        problems = [json.loads(line) for line in fh if line.strip()]
    with (folder / "data.jsonl").open("w", encoding="utf-8") as out:
        for i in range(rows):
            p = problems[i % len(problems)]
            answer = p["answer"].split("####")[-1].strip()
            out.write(json.dumps({"id": f"p{i}", "question": p["question"], "answer": answer}))
            out.write("\n")
    spec.write_text(SPEC_TEXT)
    return spec


def http_run(srv: ServerHandle, spec: Path, concurrency: int, *more: str) -> list[str]:
    """``gradetrail`` arguments: run ``spec`` against ``srv`` with ``concurrency`` in flight."""
    return [
        "run",
        str(spec),
        "--set",
        f"model.base_url={srv.openai_base_url}",
        "--set",
        f"run.concurrency={concurrency}",
        *more,
    ]


@dataclass
class Sampled:
    """One process: wall and CPU seconds, peak RSS (MB), RSS samples, its --json summary."""

    wall: float
    cpu: float
    rss_mb: float
    summary: dict
    samples: list[tuple[float, float]] = field(default_factory=list)  # (seconds, MB)
    started: float = 0.0  # time.time() just before the process started
    ended: float = 0.0
    server_cpu: float = 0.0  # CPU seconds the protocol server spent during the run

    def rss_at(self, fraction: float) -> float:
        """The RSS sample nearest ``fraction`` of the wall time (MB; 0 with no sample)."""
        if not self.samples:
            return 0.0
        at = fraction * self.wall
        return min(self.samples, key=lambda s: abs(s[0] - at))[1]

    @property
    def rows(self) -> int:
        return int(self.summary.get("n_samples", 0)) * int(self.summary.get("epochs", 1) or 1)


def _vm_rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def sampled(
    args: list[str],
    env: dict[str, str],
    cwd: Path,
    interval: float = 0.5,
    progress: float | None = None,
) -> Sampled:
    """Run ``python -m gradetrail ARGS --json``, sampling its RSS every ``interval`` s (and
    every ``progress`` s, if given, printing the time so far and the RSS)."""
    cmd = [sys.executable, "-m", "gradetrail", *args, "--json"]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.time()
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=err)
        samples: list[tuple[float, float]] = []
        next_report = progress or 0.0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            rss = _vm_rss_mb(proc.pid)
            if rss is not None:
                samples.append((time.perf_counter() - t0, rss))
                if progress and samples[-1][0] >= next_report:
                    next_report += progress
                    print(f"    {samples[-1][0]:6.0f} s  RSS {rss:5.0f} MB  [{load()}]", flush=True)
            time.sleep(interval)
        wall = time.perf_counter() - t0
        ended = time.time()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            sys.exit(f"gradetrail failed ({proc.returncode}): {err.read()[-2000:].decode()}")
        summary = json.loads(out.read())
    return Sampled(
        wall=wall,
        cpu=usage.ru_utime + usage.ru_stime,
        rss_mb=usage.ru_maxrss / 1024,
        summary=summary,
        samples=samples,
        started=started,
        ended=ended,
    )


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f} {os.getloadavg()[2]:.1f}"


def line(name: str, runs: list[Sampled]) -> str:
    """One tree's medians over ``runs``."""
    med = statistics.median
    wall = med(m.wall for m in runs)
    rows = runs[0].rows
    client, server = med(m.cpu for m in runs) / rows, med(m.server_cpu for m in runs) / rows
    both = ""
    if server:  # measured (cold_runs): with the ceiling the two CPU figures allow
        ceiling = (os.cpu_count() or 1) / (client + server)
        both = f"  server CPU {1000 * server:.2f} ms a row (both: at most {ceiling:.0f} rows/s)"
    return (
        f"{name:5s} {med(m.rows / m.wall for m in runs):7.0f} rows/s  wall {wall:7.1f} s  "
        f"CPU {med(m.cpu for m in runs):7.1f} s ({1000 * med(m.cpu for m in runs) / rows:.2f} ms"
        f" a row)  peak RSS {med(m.rss_mb for m in runs):6.0f} MB  RSS at 10/50/90 % "
        f"{med(m.rss_at(0.1) for m in runs):5.0f} / {med(m.rss_at(0.5) for m in runs):5.0f} / "
        f"{med(m.rss_at(0.9) for m in runs):5.0f} MB{both}  [walls "
        + ", ".join(f"{m.wall:.1f}" for m in runs)
        + f"; {load()}]"
    )


def tree_env(tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": str(tree)}


def cold_runs(
    srv: ServerHandle,
    trees: dict[str, Path],
    work: Path,
    rows: int,
    concurrency: int,
    repeat: int,
    progress: float | None = None,
) -> dict[str, list[Sampled]]:
    """``repeat`` cold runs of each tree, interleaved: each with a new, empty cache file and
    a new results root (both deleted after the run)."""
    spec = http_dataset(work, rows)
    srv.configure(latency=0.0)
    runs: dict[str, list[Sampled]] = {name: [] for name in trees}
    for i in range(repeat):
        for name, tree in trees.items():
            cache = work / f"cold-{name}-{i}.sqlite"
            root = work / f"cold-{name}-{i}"
            srv.reset(config=False)
            more = ["--cache", str(cache), "--results-root", str(root)]
            args = http_run(srv, spec, concurrency, *more)
            pid = srv.process.pid if srv.process is not None else None
            before = process_cpu_seconds(pid) if pid is not None else 0.0
            m = sampled(args, tree_env(tree), work, progress=progress)
            m.server_cpu = process_cpu_seconds(pid) - before if pid is not None else 0.0
            assert m.summary["cache_hits"] == 0, m.summary["cache_hits"]
            assert m.summary["counts"] == {"scored": rows}, m.summary["counts"]
            runs[name].append(m)
            print(f"  {name} run {i + 1}: {m.rows / m.wall:.0f} rows/s, {m.wall:.1f} s", flush=True)
            shutil.rmtree(root, ignore_errors=True)
            for companion in ("", "-wal", "-shm", "-key"):
                Path(f"{cache}{companion}").unlink(missing_ok=True)
    return runs


def warm_up(srv: ServerHandle, trees: dict[str, Path], work: Path) -> None:
    """One untimed 200-row run of each tree (cache off): fills ``__pycache__``."""
    spec = http_dataset(work, 200)
    for name, tree in trees.items():
        args = http_run(srv, spec, 64, "--no-cache", "--results-root", str(work / f"w-{name}"))
        sampled(args, tree_env(tree), work)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trees", type=Path, nargs="+", help="source trees (checkouts' roots)")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument(
        "--progress", type=float, default=60.0, help="print the RSS every N s of a run (0: never)"
    )
    ap.add_argument("--work", type=Path, help="work directory (kept; default: a temporary one)")
    args = ap.parse_args()
    names = ["old", "new"] if len(args.trees) == 2 else [f"t{i}" for i in range(len(args.trees))]
    trees = dict(zip(names, (t.resolve() for t in args.trees), strict=True))
    work = args.work or Path(tempfile.mkdtemp(prefix="gt-bench-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    print(
        f"{os.cpu_count()} CPUs, python {sys.version.split()[0]}; {args.rows:,} rows, "
        f"{args.concurrency} in flight, 0 ms server, cache on (new file each run), bytecode "
        f"on; {args.repeat} run(s) a tree, interleaved; {load()}",
        flush=True,
    )
    for name, tree in trees.items():
        print(f"  {name}: {tree}", flush=True)
    try:
        http_dataset(work, args.rows)
        with running_server(latency=0.0) as srv:
            warm_up(srv, trees, work)
            runs = cold_runs(
                srv, trees, work, args.rows, args.concurrency, args.repeat, args.progress
            )
        for name, measured in runs.items():
            print(line(name, measured), flush=True)
        if len(runs) == 2:
            old, new = runs.values()
            ratio = statistics.median(m.wall for m in new) / statistics.median(m.wall for m in old)
            print(f"new/old wall {ratio:.3f}", flush=True)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
