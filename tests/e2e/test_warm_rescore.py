"""A fully cached HTTP run is free: no request, and not even the HTTP client's import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from http_support import PROTOCOLS, gsm8k_spec
from protocol_server import protocol_server_fixture

import gradetrail

server = protocol_server_fixture(scope="module", name="server")

SCRIPT = """
import sys, gradetrail
spec = gradetrail.load_spec(sys.argv[1])
result = gradetrail.run_eval(spec, results_root=sys.argv[2])
sdks = sorted(m for m in ("openai", "anthropic") if m in sys.modules)
print(result.manifest.cache_hits, result.manifest.score.mean, ",".join(sdks) or "-")
"""


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_cached_http_run_imports_no_sdk(server, tmp_path: Path, protocol: str, monkeypatch) -> None:
    """The cold run calls the server through the lean client (no SDK import); the warm
    re-run makes no call."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    spec = gsm8k_spec(tmp_path, server, protocol, limit=20)
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True)))
    server.reset()

    def run() -> list[str]:
        out = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(spec_file), str(tmp_path / "r")],
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.split()

    hits, mean, sdks = run()
    assert (hits, sdks) == ("0", "-")
    requests = server.stats()["total"]
    assert requests == 20
    hits, warm_mean, sdks = run()
    assert (hits, sdks, warm_mean) == ("20", "-", mean)
    assert server.stats()["total"] == requests


def test_cache_hits_are_priced_with_the_current_spec(server, tmp_path: Path) -> None:
    """A price set after responses were cached applies to them: the re-run costs $0 and
    reports what the hits would have cost at that price; dropping the price drops it."""
    spec = gsm8k_spec(tmp_path, server, "openai_compatible", limit=5)
    cold = gradetrail.run_eval(spec, results_root=tmp_path / "r")
    assert cold.manifest.cost_usd is None  # no price for this model name
    rows = gradetrail.read_results(cold.run_dir)
    tokens_in = sum(r["input_tokens"] for r in rows)
    tokens_out = sum(r["output_tokens"] for r in rows)
    assert tokens_in > 0 and tokens_out > 0
    price = {"input_per_mtok": 1.0, "output_per_mtok": 2.0}
    priced = gsm8k_spec(tmp_path, server, "openai_compatible", limit=5, price=price)
    warm = gradetrail.run_eval(priced, results_root=tmp_path / "r")
    assert warm.manifest.cache_hits == 5
    assert warm.manifest.cost_usd == 0.0
    expected = (tokens_in * 1.0 + tokens_out * 2.0) / 1e6
    assert warm.manifest.cost_usd_cached == pytest.approx(expected)
    unpriced = gradetrail.run_eval(spec, results_root=tmp_path / "r")
    assert unpriced.manifest.cost_usd is None and unpriced.manifest.cost_usd_cached is None
