"""Benchmark gradetrail's HTTP providers (default client: the lean aiohttp one) against
the local protocol server.

Three figures, each over the 1,319 GSM8K test problems through the bundled spec
(``examples/gsm8k.yaml`` with the provider switched to HTTP), a fresh response cache per
run (so every response is also written to SQLite, as in a real run):

1. **Latency-bound**: server latency 100 ms, concurrency 64. The ideal wall time is
   ceil(1319 / 64) x 0.1 s = 2.1 s; the target is within 1.25x of it (2.63 s).
2. **Harness overhead**: server latency 0, concurrency 64: samples per second, and the
   run's CPU milliseconds per sample (everything: SDK, HTTP, cache, scoring, results).
3. **Rate limit**: the server accepts N requests a second and answers 429 with
   Retry-After beyond it; the run must score every sample at an achieved rate of at least
   80% of N (the adaptive in-flight limit converges instead of hammering).

"run wall" is the run's own wall time (``manifest.wall_time_s``: from the first request
to the last result written); "total" adds planning (loading the dataset, rendering 1,319
prompts, importing the SDK). Each case runs ``--repeat`` times; the best and the median
are printed, because the machine may be shared.

    python bench/bench_http.py [--repeat 3] [--protocols openai_compatible anthropic]
        [--rate 100] [--rate-latency 0.1]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from protocol_server import ServerHandle, running_server  # noqa: E402

import gradetrail  # noqa: E402
from gradetrail.executors.local import LocalExecutor  # noqa: E402
from gradetrail.executors.retry import RetryPolicy  # noqa: E402
from gradetrail.providers import make_provider  # noqa: E402

N_SAMPLES = 1319
CONCURRENCY = 64


def spec_for(srv: ServerHandle, protocol: str, extra: list[str] | None = None) -> Any:
    """The bundled GSM8K spec served over ``protocol`` by ``srv``."""
    url = srv.anthropic_base_url if protocol == "anthropic" else srv.openai_base_url
    overrides = [
        f"model.provider={protocol}",
        f"model.base_url={url}",
        f"run.concurrency={CONCURRENCY}",
    ]
    if protocol == "openai_compatible":
        overrides.append("model.api_key_required=false")
    return gradetrail.load_spec(ROOT / "examples" / "gsm8k.yaml", overrides + (extra or []))


def one_run(spec: Any, workdir: Path) -> dict[str, Any]:
    """Run ``spec`` once with a fresh cache; return its figures."""
    cache = workdir / f"cache-{time.monotonic_ns()}.sqlite"
    provider = make_provider(spec.model, spec.base_dir)
    executor = LocalExecutor(
        provider,
        RetryPolicy(
            max_retries=spec.run.max_retries,
            timeout_s=spec.run.timeout_s,
            sample_timeout_s=spec.run.sample_timeout_s,
        ),
        spec.run.concurrency,
    )
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    result = gradetrail.run_eval(
        spec, results_root=workdir / "results", cache_path=cache, executor=executor
    )
    total = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    m = result.manifest
    assert m.score is not None
    return {
        "run_wall_s": m.wall_time_s,
        "total_s": total,
        "cpu_ms_per_sample": 1000 * cpu / N_SAMPLES,
        "scored": m.counts.get("scored", 0),
        "correct": round((m.score.mean or 0) * m.score.n),
        "throttle": executor.throttle_stats(),
    }


def summarize(name: str, runs: list[dict[str, Any]], ideal: float | None = None) -> dict:
    """Print best and median of ``runs``; return them."""
    walls = [r["run_wall_s"] for r in runs]
    best, median = min(walls), statistics.median(walls)
    line = f"{name:42s} run wall best {best:6.3f} s, median {median:6.3f} s"
    if ideal is not None:
        line += f"  (ideal {ideal:.2f} s: best {best / ideal:.2f}x, median {median / ideal:.2f}x)"
    else:
        line += f"  ({N_SAMPLES / best:6.0f} samples/s best, {N_SAMPLES / median:6.0f} median)"
    cpu = statistics.median(r["cpu_ms_per_sample"] for r in runs)
    total = statistics.median(r["total_s"] for r in runs)
    line += f"  total {total:.2f} s, CPU {cpu:.2f} ms/sample"
    line += f"  scored {runs[0]['scored']}, correct {runs[0]['correct']}"
    print(line, flush=True)
    return {"name": name, "best_s": best, "median_s": median, "runs": walls, "ideal_s": ideal}


def latency_case(srv: ServerHandle, protocol: str, latency: float, repeat: int, work: Path):
    """Figures 1 and 2: the whole dataset at a fixed server latency."""
    srv.configure(latency=latency)
    spec = spec_for(srv, protocol)
    one_run(spec, work)  # warm: first-run imports, page cache
    runs = [one_run(spec, work) for _ in range(repeat)]
    ideal = math.ceil(N_SAMPLES / CONCURRENCY) * latency if latency else None
    return summarize(f"{protocol} latency {latency * 1000:.0f} ms, c={CONCURRENCY}", runs, ideal)


def rate_case(protocol: str, rate: float, latency: float, work: Path) -> dict[str, Any]:
    """Figure 3: the server accepts ``rate`` requests a second; 429 + Retry-After beyond."""
    with running_server(latency=latency, rate_limit=rate) as srv:
        spec = spec_for(srv, protocol)
        out = one_run(spec, work)
        stats = srv.stats()
    achieved = N_SAMPLES / out["run_wall_s"]
    t = out["throttle"]
    print(
        f"{protocol} rate limit {rate:.0f}/s (latency {latency * 1000:.0f} ms): scored "
        f"{out['scored']}/{N_SAMPLES} in {out['run_wall_s']:.2f} s = {achieved:.1f} "
        f"samples/s = {achieved / rate:.0%} of the limit; server answered "
        f"{stats['rate_limited']} 429s to {stats['total']} requests; in-flight limit "
        f"{CONCURRENCY} -> lowest {t.lowest:.0f}, now {t.limit:.1f} ({t.decreases} decreases), "
        f"Retry-After pauses {t.paused_s:.2f} s",
        flush=True,
    )
    return {
        "name": f"{protocol} rate {rate}",
        "scored": out["scored"],
        "achieved_per_s": achieved,
        "fraction_of_limit": achieved / rate,
        "rate_limited": stats["rate_limited"],
        "requests": stats["total"],
    }


def main() -> None:
    """Run the three cases for each protocol and print a JSON summary."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--protocols", nargs="+", default=["openai_compatible", "anthropic"])
    ap.add_argument("--rate", type=float, default=100.0, help="server requests/s for case 3")
    ap.add_argument("--rate-latency", type=float, default=0.1, help="server latency, case 3")
    ap.add_argument("--skip-rate", action="store_true", help="skip case 3")
    ap.add_argument("--skip-latency", action="store_true", help="skip cases 1 and 2")
    args = ap.parse_args()
    os.environ.setdefault("ANTHROPIC_API_KEY", "bench-key")
    print(
        f"{N_SAMPLES} GSM8K problems, {os.cpu_count()} CPUs, python {sys.version.split()[0]}, "
        f"load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    summary: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gt-bench-http-") as tmp:
        work = Path(tmp)
        with running_server() as srv:
            for protocol in [] if args.skip_latency else args.protocols:
                summary.append(latency_case(srv, protocol, 0.1, args.repeat, work))
                summary.append(latency_case(srv, protocol, 0.0, args.repeat, work))
        if not args.skip_rate:
            for protocol in args.protocols:
                summary.append(rate_case(protocol, args.rate, args.rate_latency, work))
    print(json.dumps(summary, indent=2, default=str))


if __name__ == "__main__":
    main()
