"""Cached input tokens read the same, and unmistakably, for both providers (issue 15,
item 14): the real SDKs against the local protocol server, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cli_support import run_cli
from http_support import PROTOCOLS, gsm8k_spec
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

server = protocol_server_fixture(scope="module", name="server")
srv = fresh_protocol_server_fixture("server", name="srv")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_input_total_and_its_cached_part(srv, tmp_path: Path, monkeypatch, protocol) -> None:
    """The server counts the prompt's words as tokens and reports 5 of them as cache
    reads: every row says input = the whole prompt, of which 5 cached, in both protocols,
    and the summary says so in words."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-xyz")
    srv.configure(cache_read_tokens=5)
    spec = gsm8k_spec(tmp_path, srv, protocol, limit=2)
    spec_path = tmp_path / "spec.yaml"
    results = tmp_path / "results"
    out = run_cli(
        "run", str(spec_path), "--cache", str(tmp_path / "c.sqlite"), "--results-root", str(results)
    )
    assert out.code == 0, out.err
    (run_dir,) = results.iterdir()
    rows = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    raw = yaml.safe_load(spec_path.read_text())
    data = Path(raw["dataset"]["path"]).read_text().splitlines()[:2]
    words = [
        len(raw["prompt"].replace("{{ question }}", json.loads(line)["question"]).split())
        for line in data
    ]
    assert [r["input_tokens"] for r in rows] == words
    assert [r["cached_input_tokens"] for r in rows] == [5, 5]
    outs = sum(r["output_tokens"] for r in rows)
    assert f"tokens      {sum(words)} in (of which 10 cached), {outs} out" in out.out
    assert spec.model.provider == protocol
