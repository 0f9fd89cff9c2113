"""Both HTTP clients, the lean aiohttp one and the official SDK's, send the same request
bodies and give identical rows: answers, token counts, stop reasons, every error class
with its status, type, code, message and retry decision, and the same backoff."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
from http_support import PROTOCOLS, SECRET_KEY, gsm8k_spec, run_http
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

server = protocol_server_fixture(scope="module", name="server")
srv = fresh_protocol_server_fixture("server", name="srv")

#: (name, server config, spec overrides): one case per kind of answer
CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("answers", {}, {"limit": 12}),
    ("truncated", {}, {"limit": 3, "params": {"max_tokens": 5, "stop": ["\n\n\n"]}}),
    ("no usage, dated alias", {"faults": [{"kind": "no_usage"}, {"kind": "alias"}]}, {}),
    ("429 then answer", {"faults": [{"kind": "rate_limit", "first": 1, "retry_after": 2}]}, {}),
    ("retry-after-ms", {"faults": [{"kind": "429", "first": 1, "retry_after_ms": 1500}]}, {}),
    ("quota", {"faults": [{"kind": "quota", "status": 429}]}, {}),
    ("500s", {"faults": [{"kind": "server_error"}]}, {"run": {"max_retries": 2}}),
    ("overloaded", {"faults": [{"kind": "overloaded", "first": 2}]}, {}),
    ("error under 200", {"faults": [{"kind": "error_200", "first": 1}]}, {}),
    ("not JSON", {"faults": [{"kind": "garbage_200", "body": "<html>oops"}]}, {}),
    (
        "401 echoing the key",
        {"faults": [{"kind": "error", "status": 401, "message": f"bad key {SECRET_KEY}"}]},
        {},
    ),
    (
        "422, x-should-retry",
        {"faults": [{"kind": "error", "status": 422, "headers": {"x-should-retry": "true"}}]},
        {"run": {"max_retries": 1}},
    ),
    ("unknown model", {}, {"model": "no-such-model"}),
    ("dropped connection", {"faults": [{"kind": "drop"}]}, {"run": {"max_retries": 1}}),
]


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET_KEY)
    monkeypatch.delenv("GT_TEST_HTTP_CLIENT", raising=False)


def through(
    srv: Any, tmp_path: Path, protocol: str, client: str, config: dict, fields: dict
) -> tuple[list[dict], list[float], dict[str, int]]:
    """Rows (latency dropped), backoff slept and request fingerprints of one run."""
    srv.reset()
    if config:
        srv.configure(**config)
    # one request at a time: faults that hit "the first N" hit the same samples each time
    fields = {"limit": 2, **fields, "run": {"concurrency": 1, **fields.get("run", {})}}
    spec = gsm8k_spec(tmp_path / client, srv, protocol, http_client=client, **fields)
    out = run_http(spec, tmp_path / client)
    rows = [{k: v for k, v in row.items() if k != "latency_s"} for row in out.rows]
    return rows, out.slept, srv.stats()["fingerprints"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(("case", "config", "fields"), CASES, ids=[c[0] for c in CASES])
def test_lean_client_and_sdk_give_identical_rows(
    srv, tmp_path: Path, protocol: str, case: str, config: dict, fields: dict
) -> None:
    """The same server behaviour gives the same rows, sleeps and request bodies through
    ``http_client: aiohttp``, ``http_client: sdk`` and ``auto`` (which, for this plain
    ``http://`` server, is asyncio's own streams: PlainHttpTransport)."""
    lean = through(srv, tmp_path, protocol, "aiohttp", config, fields)
    sdk = through(srv, tmp_path, protocol, "sdk", config, fields)
    plain = through(srv, tmp_path, protocol, "auto", config, fields)
    assert lean[0] == sdk[0] == plain[0]
    assert lean[1] == sdk[1] == plain[1]
    assert lean[2] == sdk[2] == plain[2]
    assert SECRET_KEY not in str(lean[0])


def test_http_client_is_not_part_of_the_identity(srv, tmp_path: Path) -> None:
    """Switching the client re-uses the cache and the run directory: it decides how a
    request is sent, not what is asked."""
    lean = run_http(gsm8k_spec(tmp_path, srv, "openai_compatible", http_client="aiohttp"), tmp_path)
    sdk = run_http(gsm8k_spec(tmp_path, srv, "openai_compatible", http_client="sdk"), tmp_path)
    assert lean.result.run_dir == sdk.result.run_dir
    assert sdk.row["cached"] is True and srv.stats()["total"] == 1


@pytest.mark.parametrize("client", ["aiohttp", "sdk", "auto"])
def test_both_clients_take_the_proxy_from_the_environment(
    srv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client: str
) -> None:
    """``HTTP_PROXY`` routes every request through the proxy it names (here a port nobody
    answers on: connection errors, and the server sees nothing), unless ``NO_PROXY``
    exempts the server's host. ``auto`` then takes aiohttp, which reads the proxy."""
    with socket.socket() as dead:  # bound, never listening: a connection is refused
        dead.bind(("127.0.0.1", 0))
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{dead.getsockname()[1]}")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        fields = {"http_client": client, "limit": 2, "run": {"max_retries": 0}}
        proxied = run_http(gsm8k_spec(tmp_path / "a", srv, "openai_compatible", **fields), tmp_path)
        assert [row["state"] for row in proxied.rows] == ["provider_error"] * 2
        assert "cannot reach" in proxied.row["error"]["message"]
        assert srv.stats()["total"] == 0
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        direct = run_http(gsm8k_spec(tmp_path / "b", srv, "openai_compatible", **fields), tmp_path)
        assert [row["state"] for row in direct.rows] == ["scored"] * 2
        assert srv.stats()["total"] == 2
