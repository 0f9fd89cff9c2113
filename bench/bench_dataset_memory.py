"""Dataset memory benchmark: peak RSS of loading, and of warm-running, a large Parquet
dataset (issue 11: a 1,000,000-row Parquet dataset warm-runs under 500 MB).

1. ``load_samples`` alone on the Parquet file, in a fresh process (median of --repeat);
   the same rows as JSONL for comparison.
2. A whole ``gradetrail run`` process over it, cold (fills a fresh cache; the ``python``
   provider answers each question) and then warm (every response a cache hit): peak RSS
   of the warm process (``ru_maxrss``, the figure ``/usr/bin/time -v`` prints).

Prints the load average beside the figures: on a loaded machine the times are not
comparable, the memory figures are.

Usage: python bench/bench_dataset_memory.py [--rows 1000000] [--repeat 3] [--run-repeat 3]
       [--no-run]
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


def peak(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Run one process under ``/usr/bin/time -v``; return (wall s, peak RSS MB)."""
    start = time.perf_counter()
    proc = subprocess.run(
        ["/usr/bin/time", "-v", *args], env=env, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    line = next(x for x in proc.stderr.splitlines() if "Maximum resident set size" in x)
    return wall, int(line.rsplit(":", 1)[1]) / 1024


def write_data(workdir: Path, rows: int) -> tuple[Path, Path]:
    """``data.parquet`` and ``data.jsonl``: id, question 'What is i + i?', answer 2i."""
    import pyarrow as pa
    import pyarrow.parquet as pq

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
    return workdir / "data.parquet", workdir / "data.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--run-repeat", type=int, default=3, help="Warm runs to time.")
    parser.add_argument("--no-run", action="store_true", help="Measure loading only.")
    args = parser.parse_args()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} cores")
    tmp = Path(tempfile.mkdtemp(prefix="gt-bench-mem-"))
    try:
        env = {**os.environ, "GRADETRAIL_CACHE": str(tmp / "cache.sqlite")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        parquet, jsonl = write_data(tmp, args.rows)
        for path in (parquet, jsonl):
            runs = [
                peak([sys.executable, "-c", LOAD, str(path), str(args.rows)], env)
                for _ in range(args.repeat)
            ]
            print(
                f"load_samples {path.suffix[1:]:8} {args.rows:,} rows: peak RSS median "
                f"{statistics.median(r[1] for r in runs):.0f} MB, wall median "
                f"{statistics.median(r[0] for r in runs):.2f} s ({args.repeat} runs)"
            )
        if args.no_run:
            return
        (tmp / "sum_app.py").write_text(APP)
        (tmp / "spec.yaml").write_text(
            "name: mem\ndataset: {path: data.parquet}\nprompt: '{{ question }}'\n"
            "target: '{{ answer }}'\nmodel: {provider: python, name: sum, function: "
            "'sum_app:answer'}\nscorer: {type: numeric, marker: 'A:'}\nrun: {concurrency: 64}\n"
        )
        env["PYTHONPATH"] = str(tmp)
        cmd = [sys.executable, "-m", "gradetrail", "run", str(tmp / "spec.yaml")]
        cmd += ["--results-root", str(tmp / "results"), "--json"]
        wall, rss = peak(cmd, env)
        print(
            f"gradetrail run, cold, {args.rows:,} Parquet rows: peak RSS {rss:.0f} MB, {wall:.1f} s"
        )
        warm = [peak(cmd, env) for _ in range(args.run_repeat)]
        print(
            f"gradetrail run, warm, {args.rows:,} Parquet rows: peak RSS median "
            f"{statistics.median(r[1] for r in warm):.0f} MB (target < 500 MB), wall median "
            f"{statistics.median(r[0] for r in warm):.1f} s ({args.run_repeat} runs)"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
