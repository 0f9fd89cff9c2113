"""Dataset memory benchmark: peak RSS of loading, and of warm-running, a large dataset
(issue 11: a 1,000,000-row Parquet dataset warm-runs with peak RSS under 500 MB).

1. ``load_samples`` alone, in a fresh process, for each format (median of --repeat).
2. Whole ``gradetrail run`` processes, warm (every response a cache hit; the ``python``
   provider answered each question in one cold run that filled the cache first), for
   each format: peak RSS (``ru_maxrss``, the figure ``/usr/bin/time -v`` prints), wall
   and CPU (user + sys) medians of --run-repeat.
3. The same warm run over the first --floor-rows rows: the fixed cost (interpreter,
   imports, pyarrow), so ``(peak - floor) / rows`` is what a row costs.

The rows: ``id`` ``s<i>``, ``question`` "What is i + i?", ``answer`` 2i, as Parquet, JSONL
and CSV (the same questions, so one cold run's cache serves every format).

The cold run of a million rows takes minutes: ``--workdir DIR`` keeps the data and the
cache there between invocations (made on the first), so each invocation can time a few
warm runs under the benchmark lock. Prints the load average before and after: on a
loaded machine the times are inflated, the memory figures are not.

Usage: python bench/bench_dataset_memory.py [--rows 1000000] [--repeat 3] [--run-repeat 3]
       [--formats parquet,jsonl,csv] [--floor-rows 1000] [--workdir DIR] [--no-run]
       [--no-load]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

LOAD = """
import sys
from gradetrail.datasets import load_samples
samples = load_samples(sys.argv[1])
assert len(samples) == int(sys.argv[2]), len(samples)
"""

APP = '''
def answer(request):
    """The sum asked for: 'What is 7 + 7?' -> 'A: 14'."""
    a = int(request.prompt.split("What is ", 1)[1].split(" +", 1)[0])
    return f"A: {a + a}"
'''

SPEC = (
    "name: mem\ndataset: {{path: {data}}}\nprompt: '{{{{ question }}}}'\n"
    "target: '{{{{ answer }}}}'\nmodel: {{provider: python, name: sum, function: "
    "'sum_app:answer'}}\nscorer: {{type: numeric, marker: 'A:'}}\nrun: {{concurrency: 64}}\n"
)


@dataclass
class Measure:
    wall_s: float
    cpu_s: float
    rss_mb: float


FIELDS = ("wall_s", "cpu_s", "rss_mb")


def measure(args: list[str], env: dict[str, str], cwd: Path | None = None) -> Measure:
    """Run one process under ``/usr/bin/time -v``: wall, user + sys CPU, peak RSS."""
    start = time.perf_counter()
    proc = subprocess.run(
        ["/usr/bin/time", "-v", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    fields = {}
    for line in proc.stderr.splitlines():
        key, _, value = line.strip().rpartition(": ")
        fields[key] = value
    cpu = float(fields["User time (seconds)"]) + float(fields["System time (seconds)"])
    return Measure(wall, cpu, int(fields["Maximum resident set size (kbytes)"]) / 1024)


def write_data(workdir: Path, rows: int) -> dict[str, Path]:
    """``data.parquet``, ``data.jsonl`` and ``data.csv`` of ``rows`` rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    workdir.mkdir(parents=True, exist_ok=True)
    ids = [f"s{i}" for i in range(rows)]
    questions = [f"What is {i} + {i}?" for i in range(rows)]
    answers = [2 * i for i in range(rows)]
    pq.write_table(
        pa.table({"id": ids, "question": questions, "answer": answers}),
        workdir / "data.parquet",
    )
    with (workdir / "data.jsonl").open("w") as f:
        for row in zip(ids, questions, answers, strict=True):
            f.write(json.dumps(dict(zip(("id", "question", "answer"), row, strict=True))) + "\n")
    with (workdir / "data.csv").open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(("id", "question", "answer"))
        out.writerows(zip(ids, questions, answers, strict=True))
    (workdir / "sum_app.py").write_text(APP)
    for fmt in ("parquet", "jsonl", "csv"):
        (workdir / f"spec-{fmt}.yaml").write_text(SPEC.format(data=f"data.{fmt}"))
    (workdir / "rows").write_text(str(rows))
    return {fmt: workdir / f"data.{fmt}" for fmt in ("parquet", "jsonl", "csv")}


def prepared(workdir: Path, rows: int, env: dict[str, str]) -> dict[str, Path]:
    """The data files of ``rows`` rows in ``workdir`` and a cache holding every answer:
    made (a cold run) unless an earlier invocation left them."""
    marker = workdir / "rows"
    if marker.exists() and marker.read_text() == str(rows) and (workdir / "warm").exists():
        return {fmt: workdir / f"data.{fmt}" for fmt in ("parquet", "jsonl", "csv")}
    paths = write_data(workdir, rows)
    cold = measure(run_cmd(workdir, "parquet"), env, workdir)
    print(f"cold run (fills the cache), {rows:,} rows: {cold.wall_s:.1f} s, {cold.rss_mb:.0f} MB")
    (workdir / "warm").write_text("")
    return paths


def run_cmd(workdir: Path, fmt: str) -> list[str]:
    return [
        *(sys.executable, "-m", "gradetrail", "run", str(workdir / f"spec-{fmt}.yaml")),
        *("--results-root", str(workdir / "results"), "--json"),
    ]


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def warm(workdir: Path, fmt: str, rows: int, repeat: int, env: dict[str, str]) -> Measure:
    runs = [measure(run_cmd(workdir, fmt), env, workdir) for _ in range(repeat)]
    med = Measure(*(statistics.median(getattr(r, k) for r in runs) for k in FIELDS))
    print(
        f"gradetrail run, warm, {rows:,} {fmt} rows: peak RSS median {med.rss_mb:.0f} MB "
        f"(runs: {', '.join(f'{r.rss_mb:.0f}' for r in runs)}), wall {med.wall_s:.1f} s, "
        f"CPU {med.cpu_s:.1f} s ({1e6 * med.cpu_s / rows:.0f} us a row), {repeat} runs, "
        f"load {loadavg()}"
    )
    return med


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="load_samples runs a format.")
    parser.add_argument("--run-repeat", type=int, default=3, help="Warm runs a format.")
    parser.add_argument("--formats", default="parquet,jsonl", help="Formats to warm-run.")
    parser.add_argument("--floor-rows", type=int, default=1000, help="0: no floor run.")
    parser.add_argument("--workdir", type=Path, help="Keep data and cache here (reused).")
    parser.add_argument("--no-run", action="store_true", help="Measure loading only.")
    parser.add_argument("--no-load", action="store_true", help="Skip load_samples alone.")
    args = parser.parse_args()
    print(f"load average {loadavg()}, {os.cpu_count()} cores")
    keep = args.workdir is not None
    root = args.workdir or Path(tempfile.mkdtemp(prefix="gt-bench-mem-"))
    try:
        env = {**os.environ, "GRADETRAIL_CACHE": str(root / "cache.sqlite")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPATH"] = os.pathsep.join([str(root / "big"), str(root / "floor")])
        formats = [f for f in args.formats.split(",") if f]
        paths = prepared(root / "big", args.rows, env)
        if not args.no_load:
            for fmt, path in paths.items():
                runs = [
                    measure([sys.executable, "-c", LOAD, str(path), str(args.rows)], env)
                    for _ in range(args.repeat)
                ]
                print(
                    f"load_samples {fmt:8} {args.rows:,} rows: peak RSS median "
                    f"{statistics.median(r.rss_mb for r in runs):.0f} MB, wall median "
                    f"{statistics.median(r.wall_s for r in runs):.2f} s ({args.repeat} runs)"
                )
        if args.no_run:
            return
        floor = {}
        if args.floor_rows:
            prepared(root / "floor", args.floor_rows, env)
            for fmt in formats:
                floor[fmt] = warm(root / "floor", fmt, args.floor_rows, args.run_repeat, env)
        for fmt in formats:
            big = warm(root / "big", fmt, args.rows, args.run_repeat, env)
            if fmt in floor:
                per_row = (big.rss_mb - floor[fmt].rss_mb) * 2**20 / (args.rows - args.floor_rows)
                print(
                    f"  {fmt}: {big.rss_mb - floor[fmt].rss_mb:.0f} MB over the "
                    f"{args.floor_rows:,}-row run ({per_row:.0f} bytes a row); target < 500 MB"
                )
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
        print(f"load average {loadavg()}")


if __name__ == "__main__":
    main()
