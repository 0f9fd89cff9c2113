"""A batch's results file is read line by line off the download, never whole: a results
file can be gigabytes. Measured with tracemalloc around a batched run whose answers are
padded to 200,000 characters each (a results file of 8 MB), through the real SDKs
against the protocol server's batch APIs."""

from __future__ import annotations

import asyncio
import tracemalloc
from pathlib import Path

import pytest
from http_support import SECRET_KEY, gsm8k_spec
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

import gradetrail
from gradetrail.engine.batching import BatchOptions
from gradetrail.providers import make_provider
from gradetrail.rundir.batches import BatchLedger
from gradetrail.testing import FakeClock

server = protocol_server_fixture(scope="module", name="server")
srv = fresh_protocol_server_fixture("server", name="srv")


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_KEY)


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_results_are_streamed_not_held_whole(srv, tmp_path: Path, protocol: str) -> None:
    """40 answers of 200,000 characters (8 MB of results) read back through the batch
    API client: the Python memory it takes at its peak stays under 2 MB (before: the
    whole file, its list of lines and their parsed objects were held at once: 24.6 MB
    through openai, 16.2 MB through anthropic; now 1.5 MB)."""
    srv.configure(faults=[{"kind": "pad", "chars": 200_000}])
    srv.batches(polls=0)
    spec = gsm8k_spec(tmp_path / "spec", srv, protocol, limit=40)
    clock = FakeClock()
    batch = BatchOptions(sleep=clock.sleep, clock=clock.now, max_requests=40)
    result = gradetrail.run_eval(
        spec, results_root=tmp_path / "results", cache_path=tmp_path / "c.sqlite", batch=batch
    )
    assert result.manifest.counts == {"scored": 40}
    (batch_id,) = BatchLedger.read(result.run_dir).batch_ids()
    api = make_provider(spec.model, tmp_path).batch_api()

    async def read_all() -> int:
        # no request of this mapping: each line is read, parsed and dropped
        lines = [r async for r in api.results(batch_id, {}, [])]
        await api.aclose()
        return len(lines)

    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        assert asyncio.run(read_all()) == 0
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert api.unreadable == 0
    assert peak < 2_000_000, peak
