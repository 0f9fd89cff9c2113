"""Viewer benchmark: pages of a 100,000-sample run over real HTTP.

Builds two synthetic 100,000-sample runs with `gradetrail run` (replay provider, responses of
about 600 characters, a third of them wrong), serves the viewer from a thread
(uvicorn, loopback, a free port) and times GET requests with the standard library's
http.client:

- the first page of the run on a freshly started viewer (nothing cached: the issue's
  target is under 1 s), repeated on new servers, and its score chart (an image the
  page loads on its own);
- the same page again (warm), the runs page, a sample page;
- the failures filter and a sort by latency once the row index is built, and the time
  the index takes to build (the background build a first page starts);
- the diff page of two such runs (a second model wrong on other samples): the first
  request joins them and runs the gate, later ones are served from its cache.

Every figure is the median of --repeat runs; the load average is printed beside them
(the machine may be shared). Usage: python bench/bench_view.py [--rows 100000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
FILLER = (
    "First work out how many there are in each group, then add the groups together, "
    "checking each step against the question before moving on. "
)


def build_run(workdir: Path, rows: int) -> Path:
    """A results root holding one complete synthetic run of ``rows`` samples."""
    with (workdir / "data.jsonl").open("w") as d, (workdir / "rec.jsonl").open("w") as r:
        for i in range(rows):
            d.write(json.dumps({"id": f"s{i}", "question": f"What is {i} + {i}?", "answer": 2 * i}))
            d.write("\n")
            answer = 2 * i if i % 3 else 2 * i + 1
            other = 2 * i if i % 4 else 2 * i + 1  # a second model, wrong on other samples
            r.write(json.dumps({"id": f"s{i}", "m": _text(i, answer), "m2": _text(i, other)}))
            r.write("\n")
    spec = workdir / "synthetic.yaml"
    spec.write_text(
        "name: synthetic\ndataset: {path: data.jsonl}\nprompt: 'Q: {{ question }}'\n"
        "target: '{{ answer }}'\n"
        "model: {provider: replay, name: m, recordings: {path: rec.jsonl}}\n"
        "scorer: {type: numeric, marker: 'A:'}\nrun: {concurrency: 64}\n"
    )
    results = workdir / "results"
    for model in ("m", "m2"):
        cmd = [sys.executable, "-m", "gradetrail", "run", str(spec), "--set", f"model.name={model}"]
        cmd += ["--results-root", str(results), "--cache", str(workdir / "cache.sqlite")]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"gradetrail run failed: {proc.stderr.strip()}")
    return results


def _text(i: int, answer: int) -> str:
    return f"{FILLER * 4}{i} + {i} = {answer}\nA: {answer}"


def get(url: str, path: str) -> float:
    """Seconds for one GET of ``path`` (body read); exits on a non-200 answer."""
    where = urlsplit(url)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=120)
    start = time.perf_counter()
    conn.request("GET", path)
    response = conn.getresponse()
    response.read()
    took = time.perf_counter() - start
    conn.close()
    if response.status != 200:
        sys.exit(f"GET {path}: HTTP {response.status}")
    return took


def median_ms(values: list[float]) -> str:
    """``median ms (min-max)``."""
    low, high = min(values) * 1000, max(values) * 1000
    return f"{statistics.median(values) * 1000:7.0f} ms  ({low:.0f}-{high:.0f})"


def main() -> int:
    """Print the figures; return the exit code."""
    from gradetrail.view.server import BackgroundServer

    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        results = build_run(Path(tmp), args.rows)
        runs = {}
        for path in results.iterdir():
            runs[json.loads((path / "manifest.json").read_text())["requested_model"]] = path.name
        run, other = runs["m"], runs["m2"]
        size = (results / run / "results.jsonl").stat().st_size
        print(
            f"built {args.rows:,} rows ({size / 1e6:.0f} MB results.jsonl) in "
            f"{time.perf_counter() - start:.0f} s"
        )
        cold, chart, index_build = [], [], []
        for _ in range(args.repeat):
            with BackgroundServer(results) as url:
                cold.append(get(url, f"/runs/{run}"))
                chart.append(get(url, f"/runs/{run}/scores.svg"))
                t = time.perf_counter()
                get(url, f"/runs/{run}?f=failures")  # waits for (or builds) the index
                index_build.append(time.perf_counter() - t)
        figures = {"first page, fresh viewer (cold)": cold}
        figures["its score chart (samples.jsonl, cold)"] = chart
        figures["index build + failures page (once per file)"] = index_build
        with BackgroundServer(results) as url:
            get(url, f"/runs/{run}?f=failures")
            pages = {
                "first page (warm)": f"/runs/{run}",
                "failures filter, page 1": f"/runs/{run}?f=failures",
                "failures filter, page 600": f"/runs/{run}?f=failures&page=600",
                "sorted by latency, descending": f"/runs/{run}?sort=latency&dir=desc",
                "runs page": "/",
                "sample page": f"/runs/{run}/sample?id=s{args.rows * 7 // 9}",
            }
            for label, path in pages.items():
                figures[label] = [get(url, path) for _ in range(args.repeat)]
            diff = f"/diff?a={run}&b={other}"
            figures["diff of two runs (diff_runs + the gate, first)"] = [get(url, diff)]
            figures["diff of two runs (cached)"] = [get(url, diff) for _ in range(args.repeat)]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"viewer over {args.rows:,} rows, median of {args.repeat} (min-max); load average {load}")
    for label, values in figures.items():
        print(f"  {label:<46} {median_ms(values)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
