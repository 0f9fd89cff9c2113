"""Benchmark ``--executor ray`` against the local executor on this machine.

Every case runs the 1,319 GSM8K test problems of the bundled spec through the local
protocol server (``openai_compatible``), a fresh response cache per run:

(a) **Latency-bound**: server latency 100 ms, 64 in flight in total; local vs Ray with 2
    workers. Target: Ray's run wall within 1.3x of local's. Ray's run wall includes
    starting its workers (printed apart, as "workers up").
(b) **Harness overhead**: server latency 0; local, Ray with 1 worker and with 2:
    samples/s and the driver's CPU per sample (this process: cache, scoring, results,
    the retry loop and throttle, Ray's driver side; the workers' CPU is on other
    processes), so the share that scales with workers is visible.
(c) **Warm run**: ``gradetrail run --executor ray`` as a process with every response
    cached, vs the same with the local executor. Target: under 1 s, Ray never started.
(d) **Ray start-up**: a cold ``gradetrail run --executor ray`` (local Ray started on
    demand) on 20 samples: process wall, ``ray.init`` (starting the local cluster) and
    workers up, from the manifest.

Cases (a) and (b) start one local Ray in this process first (as the executor would), so
each run pays for its workers but not for a cluster; (d) measures the cluster itself.
Each case runs ``--repeat`` times (median and best printed); the machine's load average
is printed beside the figures, because the machine may be shared.

    python bench/bench_ray.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
# the same settings the executor gives a local Ray it starts: loopback, no usage stats
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from protocol_server import ServerHandle, running_server  # noqa: E402

import gradetrail  # noqa: E402
from gradetrail.executors.ray import LOCAL_OBJECT_STORE_BYTES, RayOptions  # noqa: E402

N = 1319
CONCURRENCY = 64


def load() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def spec_for(srv: ServerHandle, limit: int | None = None) -> Any:
    """The bundled GSM8K spec served by ``srv`` over Chat Completions."""
    overrides = [
        "model.provider=openai_compatible",
        f"model.base_url={srv.openai_base_url}",
        "model.api_key_required=false",
        f"run.concurrency={CONCURRENCY}",
    ]
    if limit is not None:
        overrides.append(f"dataset.limit={limit}")
    return gradetrail.load_spec(ROOT / "examples" / "gsm8k.yaml", overrides)


def one_run(spec: Any, work: Path, executor: Any) -> dict[str, Any]:
    """One run with a fresh cache; its wall time, driver CPU and executor figures."""
    cache = work / f"cache-{time.monotonic_ns()}.sqlite"
    cpu0 = time.process_time()
    result = gradetrail.run_eval(
        spec, results_root=work / f"r-{time.monotonic_ns()}", cache_path=cache, executor=executor
    )
    cpu = time.process_time() - cpu0
    assert result.manifest.counts == {"scored": N}, result.manifest.counts
    ex = result.manifest.executor or {}
    return {
        "wall": result.manifest.wall_time_s,
        "cpu_ms_per_sample": 1000 * cpu / N,
        "workers_up": ex.get("start_s") or 0.0,
        "served": [w["served"] for w in ex.get("per_worker", [])],
    }


def median(runs: list[dict[str, Any]], key: str) -> float:
    """The median of ``key`` over ``runs``."""
    return statistics.median(r[key] for r in runs)


def report(name: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Print and return one case's figures."""
    wall = median(runs, "wall")
    up = median(runs, "workers_up")
    out = {
        "case": name,
        "wall_median_s": round(wall, 3),
        "wall_best_s": round(min(r["wall"] for r in runs), 3),
        "workers_up_median_s": round(up, 3),
        "samples_per_s": round(N / wall, 1),
        "samples_per_s_after_workers_up": round(N / (wall - up), 1) if up else None,
        "driver_cpu_ms_per_sample": round(median(runs, "cpu_ms_per_sample"), 3),
        "served_per_worker": runs[-1]["served"],
        "load": load(),
    }
    print(json.dumps(out), flush=True)
    return out


def run_cases(srv: ServerHandle, repeat: int, work: Path) -> list[dict[str, Any]]:
    """Cases (a) and (b)."""
    figures = []
    for latency, cases in ((0.1, ("local", 2)), (0.0, ("local", 1, 2))):
        srv.configure(latency=latency)
        spec = spec_for(srv)
        for case in cases:
            runs = []
            for _ in range(repeat):
                executor = None if case == "local" else RayOptions(workers=case)
                runs.append(one_run(spec, work, executor))
            name = f"latency {latency * 1000:.0f} ms, " + (
                "local" if case == "local" else f"ray {case} worker{'s' * (case > 1)}"
            )
            figures.append(report(name, runs))
    return figures


def cli(args: list[str], cwd: Path) -> tuple[float, dict[str, Any]]:
    """Run ``gradetrail run`` as a process; its wall time and manifest."""
    results = cwd / f"results-{time.monotonic_ns()}"  # one run directory to read back
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "gradetrail", "run", *args, "--results-root", str(results)],
        cwd=cwd,
        check=True,
        capture_output=True,
    )
    wall = time.perf_counter() - t0
    manifest = json.loads(next(results.glob("*/manifest.json")).read_text())
    return wall, manifest


def warm_and_start_up(srv: ServerHandle, repeat: int, work: Path) -> list[dict[str, Any]]:
    """Cases (c) and (d), as processes."""
    srv.configure(latency=0.0)
    spec_args = [
        str(ROOT / "examples" / "gsm8k.yaml"),
        "--set",
        "model.provider=openai_compatible",
        "--set",
        f"model.base_url={srv.openai_base_url}",
        "--set",
        "model.api_key_required=false",
    ]
    cache = work / "warm.sqlite"
    cli([*spec_args, "--cache", str(cache)], work)  # fill the cache
    figures = []
    for kind in ("local", "ray"):
        walls = []
        for _ in range(repeat):
            extra = ["--executor", "ray"] if kind == "ray" else []
            wall, manifest = cli([*spec_args, "--cache", str(cache), *extra], work)
            walls.append(wall)
            assert manifest["cache_hits"] == N
        out = {
            "case": f"warm run, {kind}",
            "process_wall_median_s": round(statistics.median(walls), 3),
            "process_wall_best_s": round(min(walls), 3),
            "executor": manifest["executor"],
            "load": load(),
        }
        print(json.dumps(out), flush=True)
        figures.append(out)
    rows = []
    for i in range(repeat):
        cold = work / f"cold-{i}.sqlite"
        args = [*spec_args, "--set", "dataset.limit=20", "--cache", str(cold), "--executor", "ray"]
        wall, manifest = cli(args, work)
        rows.append((wall, manifest["executor"]["connect_s"], manifest["executor"]["start_s"]))
    out = {
        "case": "Ray start-up (cold process, local Ray on demand, 20 samples)",
        "process_wall_median_s": round(statistics.median(r[0] for r in rows), 3),
        "ray_init_median_s": round(statistics.median(r[1] for r in rows), 3),
        "workers_up_median_s": round(statistics.median(r[2] for r in rows), 3),
        "load": load(),
    }
    print(json.dumps(out), flush=True)
    figures.append(out)
    return figures


def main() -> None:
    """Run every case and print one JSON line per figure."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    import ray

    print(json.dumps({"load_before": load(), "cpus": os.cpu_count()}), flush=True)
    with tempfile.TemporaryDirectory() as tmp, running_server(latency=0.0) as srv:
        work = Path(tmp)
        ray.init(
            address="local",
            include_dashboard=False,
            object_store_memory=LOCAL_OBJECT_STORE_BYTES,
            log_to_driver=False,
            logging_level="ERROR",
        )
        try:
            run_cases(srv, args.repeat, work)
        finally:
            ray.shutdown()
        warm_and_start_up(srv, args.repeat, work)


if __name__ == "__main__":
    main()
