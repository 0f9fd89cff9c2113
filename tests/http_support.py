"""Helpers for tests of the HTTP providers against the local protocol server: a GSM8K spec
pointed at the server through either protocol, and a run through the real pipeline with
an injected clock (so backoff is checked without waiting)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

import gradetrail
from gradetrail.cache.store import ResponseCache
from gradetrail.executors.local import LocalExecutor
from gradetrail.executors.retry import RetryPolicy
from gradetrail.providers import make_provider
from gradetrail.testing import FakeClock

ROOT = Path(__file__).resolve().parents[1]
GSM8K_DATA = ROOT / "examples" / "data" / "gsm8k"
PROTOCOLS = ("openai_compatible", "anthropic")
#: the value every test puts in ANTHROPIC_API_KEY / OPENAI_API_KEY: must never be written
SECRET_KEY = "sk-test-SECRET-0123456789abcdef"


def base_url(srv: Any, protocol: str) -> str:
    """The server's base URL as the protocol's SDK expects it."""
    return srv.anthropic_base_url if protocol == "anthropic" else srv.openai_base_url


def gsm8k_spec(
    directory: Path,
    srv: Any,
    protocol: str,
    *,
    limit: int | None = 1,
    model: str = "175b_verification",
    run: dict[str, Any] | None = None,
    **model_fields: Any,
) -> gradetrail.EvalSpec:
    """The bundled GSM8K eval (first ``limit`` problems) served over ``protocol``
    (through the client ``$GT_TEST_HTTP_CLIENT`` names, ``aiohttp`` or ``sdk``, when set:
    ``GT_TEST_HTTP_CLIENT=sdk pytest tests/providers/test_http.py`` checks the SDK path)."""
    directory.mkdir(parents=True, exist_ok=True)
    fields: dict[str, Any] = {
        "provider": protocol,
        "name": model,
        "base_url": base_url(srv, protocol) if srv is not None else None,
    }
    if protocol == "openai_compatible":
        fields["api_key_required"] = False
    if os.environ.get("GT_TEST_HTTP_CLIENT"):  # run the boundary tests through one client
        fields["http_client"] = os.environ["GT_TEST_HTTP_CLIENT"]
    fields.update(model_fields)
    dataset: dict[str, Any] = {"path": str(GSM8K_DATA / "test.jsonl")}
    if limit is not None:
        dataset["limit"] = limit
    spec = {
        "name": "gsm8k-http",
        "dataset": dataset,
        "prompt": 'Solve the math word problem. End with a line "A: <answer>".\n\n'
        "Q: {{ question }}",
        "target": "{{ answer.split('####')[-1] | trim }}",
        "model": fields,
        "scorer": {"type": "numeric", "marker": "A:"},
        "run": {"max_retries": 3, **(run or {})},
    }
    path = directory / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return gradetrail.load_spec(path)


@dataclass
class HttpRun:
    """What one run produced, and what the fake clock saw slept."""

    result: gradetrail.RunResult
    rows: list[dict[str, Any]]
    slept: list[float]
    cached: int

    @property
    def row(self) -> dict[str, Any]:
        """The first row."""
        return self.rows[0]


def run_http(
    spec: gradetrail.EvalSpec, tmp_path: Path, *, rand: float = 0.5, **executor: Any
) -> HttpRun:
    """Run ``spec`` through the pipeline with a :class:`FakeClock` (full-jitter draws fixed
    at ``rand``); count what the cache holds afterwards."""
    clock = FakeClock()
    provider = make_provider(spec.model, spec.base_dir)
    provider.check_ready()
    policy = RetryPolicy(
        max_retries=spec.run.max_retries,
        timeout_s=spec.run.timeout_s,
        sample_timeout_s=spec.run.sample_timeout_s,
    )
    ex = LocalExecutor(
        provider,
        policy,
        spec.run.concurrency,
        sleep=clock.sleep,
        clock=clock.now,
        rand=lambda: rand,
        **executor,
    )
    cache_path = tmp_path / "cache.sqlite"
    result = gradetrail.run_eval(
        spec, results_root=tmp_path / "results", cache_path=cache_path, executor=ex
    )
    cache = ResponseCache(cache_path)
    try:
        cached = cache.stats().entries
    finally:
        cache.close()
    return HttpRun(result, gradetrail.read_results(result.run_dir), clock.slept, cached)


#: USD per million tokens: input, output, cache read, cache write (the tests of real
#: answer shapes, which check costs)
SHAPES_PRICE = {
    "input_per_mtok": 1.0,
    "output_per_mtok": 2.0,
    "cached_input_per_mtok": 0.1,
    "cache_write_per_mtok": 1.25,
}


def serve_once(srv: Any, body: Any, status: int = 200, headers: dict | None = None) -> None:
    """Have the protocol server answer the next request with ``body`` (``status``,
    ``headers``), through its ``answer`` fault; later requests are answered as usual."""
    rule: dict[str, Any] = {"kind": "answer", "body": body, "status": status, "first": 1}
    if headers:
        rule["headers"] = headers
    srv.configure(faults=[rule])


def run_priced(srv: Any, tmp_path: Path, protocol: str, client: str, **fields: Any) -> HttpRun:
    """A GSM8K spec against ``srv`` through ``client``, priced at :data:`SHAPES_PRICE`
    (``fields`` are more spec fields; ``run`` its run section), run by :func:`run_http`."""
    run = fields.pop("run", {})
    spec = gsm8k_spec(
        tmp_path, srv, protocol, http_client=client, price=SHAPES_PRICE, run=run, **fields
    )
    return run_http(spec, tmp_path)


def replay_accuracy(model: str, results_root: Path) -> float:
    """The bundled example's mean score for ``model`` through the replay provider."""
    spec = gradetrail.load_spec(ROOT / "examples" / "gsm8k.yaml", [f"model.name={model}"])
    result = gradetrail.run_eval(spec, results_root=results_root, use_cache=False)
    assert result.manifest.score is not None
    return result.manifest.score.mean  # type: ignore[return-value]
