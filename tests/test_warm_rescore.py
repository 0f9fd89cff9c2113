"""A fully cached HTTP run is free: no request, and not even the SDK import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from http_support import PROTOCOLS, gsm8k_spec
from protocol_server import protocol_server_fixture

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
    """The cold run imports the SDK and calls the server; the warm re-run does neither."""
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

    sdk = "anthropic" if protocol == "anthropic" else "openai"
    hits, mean, sdks = run()
    assert (hits, sdks) == ("0", sdk)
    requests = server.stats()["total"]
    assert requests == 20
    hits, warm_mean, sdks = run()
    assert (hits, sdks, warm_mean) == ("20", "-", mean)
    assert server.stats()["total"] == requests
