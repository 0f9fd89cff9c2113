"""Benchmark ``--executor ray`` against the local executor on this machine.

Every case runs the 1,319 GSM8K test problems of the bundled spec through the local
protocol server (``openai_compatible``), a fresh response cache per run:

(a) **Latency-bound**: server latency 100 ms, 64 in flight in total; local vs Ray with 2
    workers. Target: Ray's wall within 1.3x of local's. The wall is the whole
    ``run_eval`` call (plan, cache, workers' start, run, their shutdown), for both.
(b) **Harness overhead**: server latency 0; local, Ray with 1 worker and with 2:
    samples/s and the driver's CPU per sample (this process: cache, scoring, results,
    the retry loop and throttle, Ray's driver side; the workers' CPU is on other
    processes), so the share that scales with workers is visible.
(c) **Warm run**: ``gradetrail run --executor ray`` as a process with every response
    cached, vs the same with the local executor. Target: under 1 s, Ray never started.
(d) **Ray start-up**: a cold ``gradetrail run --executor ray`` (local Ray started on
    demand) on 20 samples: process wall, ``ray.init`` (starting the local cluster) and
    workers up, from the manifest.

Cases (a) and (b) run on a local Ray started in this process before each Ray run and
left to settle until its prestarted worker processes are idle (as on a cluster that is
up: the run pays for its workers, not for the cluster); (a) also runs on a cluster whose
idle processes an earlier run used up, so that its workers start new processes
("new processes"). (d) measures a cluster started on demand. Each case runs
``--repeat`` times (median and best printed); the machine's load average is printed
beside the figures, because the machine may be shared. Each Ray figure also gives
``start_s`` (from the first cache miss to every worker ready) and ``waited_s`` (how much
of it the first call waited for).

    python bench/bench_ray.py [--repeat 3] [--cases a,b,c,d]
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
from gradetrail.executors.ray import RayOptions  # noqa: E402
from gradetrail.executors.ray_cluster import LOCAL_OBJECT_STORE_BYTES  # noqa: E402

N = 1319
CONCURRENCY = 64


def load() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def spec_for(srv: ServerHandle, limit: int | None = None) -> Any:
    """The bundled GSM8K spec served by ``srv`` over Chat Completions."""
    overrides = [*srv.openai_compatible_overrides, f"run.concurrency={CONCURRENCY}"]
    if limit is not None:
        overrides.append(f"dataset.limit={limit}")
    return gradetrail.load_spec(ROOT / "examples" / "gsm8k.yaml", overrides)


def one_run(spec: Any, work: Path, executor: Any) -> dict[str, Any]:
    """One run with a fresh cache: its whole wall (the ``run_eval`` call), the driver's
    CPU and the executor's figures."""
    cache = work / f"cache-{time.monotonic_ns()}.sqlite"
    cpu0, t0 = time.process_time(), time.perf_counter()
    result = gradetrail.run_eval(
        spec, results_root=work / f"r-{time.monotonic_ns()}", cache_path=cache, executor=executor
    )
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    assert result.manifest.counts == {"scored": N}, result.manifest.counts
    ex = result.manifest.executor or {}
    return {
        "wall": wall,
        "cpu_ms_per_sample": 1000 * cpu / N,
        "start_s": ex.get("start_s") or 0.0,
        "waited_s": ex.get("waited_s") or 0.0,
        "served": [w["served"] for w in ex.get("per_worker", [])],
    }


def median(runs: list[dict[str, Any]], key: str) -> float:
    """The median of ``key`` over ``runs``."""
    return statistics.median(r[key] for r in runs)


def report(name: str, runs: list[dict[str, Any]], local: float | None) -> dict[str, Any]:
    """Print and return one case's figures (``local``: the local wall to compare with)."""
    wall = median(runs, "wall")
    out = {
        "case": name,
        "wall_median_s": round(wall, 3),
        "wall_best_s": round(min(r["wall"] for r in runs), 3),
        "x_local": round(wall / local, 2) if local else None,
        "start_s_median": round(median(runs, "start_s"), 3),
        "waited_s_median": round(median(runs, "waited_s"), 3),
        "samples_per_s": round(N / wall, 1),
        "driver_cpu_ms_per_sample": round(median(runs, "cpu_ms_per_sample"), 3),
        "served_per_worker": runs[-1]["served"],
        "load": load(),
    }
    print(json.dumps(out), flush=True)
    return out


def _idle_workers() -> int:
    """Ray worker processes descended from this process that are up and idle."""
    me, parents, titles = os.getpid(), {}, {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                titles[int(entry.name)] = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])

    def mine(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == me:
                return True
        return False

    return sum(1 for pid, title in titles.items() if title.startswith(b"ray::IDLE") and mine(pid))


def settled_ray(ray: Any) -> None:
    """Start a local Ray (as the executor would) and wait until its prestarted worker
    processes are idle, at most 30 s."""
    ray.init(
        address="local",
        include_dashboard=False,
        object_store_memory=LOCAL_OBJECT_STORE_BYTES,
        log_to_driver=False,
        logging_level="ERROR",
    )
    want = int(ray.cluster_resources().get("CPU", 1))
    deadline = time.monotonic() + 30
    while _idle_workers() < want and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)


def ray_runs(spec: Any, work: Path, workers: int, repeat: int, fresh: bool) -> list[dict]:
    """``repeat`` Ray runs, each on a settled local Ray (``fresh``) or all on one whose
    idle processes the first run used up (the first run is not counted then)."""
    import ray

    runs = []
    if not fresh:
        settled_ray(ray)
        one_run(spec, work, RayOptions(workers=workers))  # uses the idle processes up
    try:
        for _ in range(repeat):
            if fresh:
                settled_ray(ray)
            try:
                runs.append(one_run(spec, work, RayOptions(workers=workers)))
            finally:
                if fresh:
                    ray.shutdown()
    finally:
        if not fresh:
            ray.shutdown()
    return runs


def run_cases(srv: ServerHandle, repeat: int, work: Path, cases: str) -> list[dict[str, Any]]:
    """Cases (a) and (b)."""
    figures = []
    plan = [(0.1, ["local", (2, True), (2, False)])] if "a" in cases else []
    plan += [(0.0, ["local", (1, True), (2, True)])] if "b" in cases else []
    for latency, kinds in plan:
        srv.configure(latency=latency)
        spec = spec_for(srv)
        local = None
        for kind in kinds:
            prefix = f"latency {latency * 1000:.0f} ms, "
            if kind == "local":
                runs = [one_run(spec, work, None) for _ in range(repeat)]
                local = report(prefix + "local", runs, None)["wall_median_s"]
                continue
            workers, fresh = kind
            runs = ray_runs(spec, work, workers, repeat, fresh)
            name = f"ray {workers} worker{'s' * (workers > 1)}" + (
                "" if fresh else ", new processes"
            )
            figures.append(report(prefix + name, runs, local))
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


def warm_and_start_up(srv: ServerHandle, repeat: int, work: Path, cases: str) -> list[dict]:
    """Cases (c) and (d), as processes."""
    srv.configure(latency=0.0)
    sets = srv.openai_compatible_overrides
    spec_args = [
        str(ROOT / "examples" / "gsm8k.yaml"),
        *(arg for value in sets for arg in ("--set", value)),
    ]
    figures = []
    if "c" in cases:
        cache = work / "warm.sqlite"
        cli([*spec_args, "--cache", str(cache)], work)  # fill the cache
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
    if "d" in cases:
        rows = []
        for i in range(repeat):
            cold = work / f"cold-{i}.sqlite"
            args = [*spec_args, "--set", "dataset.limit=20", "--cache", str(cold)]
            wall, manifest = cli([*args, "--executor", "ray"], work)
            ex = manifest["executor"]
            rows.append((wall, ex["connect_s"], ex["start_s"], ex["waited_s"]))
        out = {
            "case": "Ray start-up (cold process, local Ray on demand, 20 samples)",
            "process_wall_median_s": round(statistics.median(r[0] for r in rows), 3),
            "ray_init_median_s": round(statistics.median(r[1] for r in rows), 3),
            "workers_ready_after_first_miss_median_s": round(
                statistics.median(r[2] for r in rows), 3
            ),
            "first_call_waited_median_s": round(statistics.median(r[3] for r in rows), 3),
            "load": load(),
        }
        print(json.dumps(out), flush=True)
        figures.append(out)
    return figures


def main() -> None:
    """Run the chosen cases and print one JSON line per figure."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cases", default="a,b,c,d", help="which of a, b, c, d to run")
    args = parser.parse_args()

    print(json.dumps({"load_before": load(), "cpus": os.cpu_count()}), flush=True)
    with tempfile.TemporaryDirectory() as tmp, running_server(latency=0.0) as srv:
        work = Path(tmp)
        run_cases(srv, args.repeat, work, args.cases)
        if "c" in args.cases or "d" in args.cases:
            warm_and_start_up(srv, args.repeat, work, args.cases)


if __name__ == "__main__":
    main()
