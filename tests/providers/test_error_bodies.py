"""Error bodies under HTTP 200, read by type, code and message alike (issue 15, item 13):
the real SDKs against the local protocol server, through both protocols."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from http_support import PROTOCOLS, SECRET_KEY, gsm8k_spec, run_http
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

server = protocol_server_fixture(scope="module", name="server")
srv = fresh_protocol_server_fixture("server", name="srv")


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_KEY)


def _body_200(srv, body: object) -> None:
    """The first answer is ``body`` under status 200, the next ones real answers."""
    srv.configure(faults=[{"kind": "garbage_200", "body": json.dumps(body), "first": 1}])


RETRIED = [
    {"error": {"message": "rate limit exceeded", "code": 429}},  # the body
    {"error": {"message": "Rate limit reached for requests", "code": "rate_limit_exceeded"}},
    {"error": {"type": "rate_limit_error", "message": "slow down"}},
    {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    {"error": {"message": "The server is overloaded, try again later"}},
    {"error": {"message": "upstream failed", "code": "503"}},
    {"error": "rate limit exceeded"},  # a plain-string error
    {"error": "Internal server error"},
]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("body", RETRIED, ids=lambda b: json.dumps(b)[:50])
def test_transient_error_bodies_under_200_are_retried(srv, tmp_path, protocol, body) -> None:
    """Whether it says so by type, by code or only by message, a 200 body meaning "rate
    limited" or "overloaded" is retried, and only the real answer is cached."""
    _body_200(srv, body)
    out = run_http(gsm8k_spec(tmp_path, srv, protocol), tmp_path)
    assert out.row["state"] == "scored" and out.row["attempts"] == 2
    assert out.slept == [0.5] and out.cached == 1


PERMANENT = [
    (
        {"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}},
        "insufficient_quota",
        "You exceeded your current quota",
    ),
    ({"error": "model 'x' does not exist"}, None, "model 'x' does not exist"),
    ({"error": {"message": "bad field", "code": 400}}, "400", "bad field"),
]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("body,code,message", PERMANENT, ids=lambda b: str(b)[:40])
def test_permanent_error_bodies_keep_code_and_message(
    srv, tmp_path: Path, protocol, body, code, message
) -> None:
    """A body meaning a permanent failure is recorded at once, its code kept, and a
    plain-string ``error`` keeps its message."""
    _body_200(srv, body)
    out = run_http(gsm8k_spec(tmp_path, srv, protocol), tmp_path)
    error = out.row["error"]
    assert out.row["state"] == "provider_error" and out.row["attempts"] == 1
    assert (error["kind"], error["status"], error["code"]) == ("InvalidResponse", 200, code)
    assert error["message"].endswith(f": {message}")
    assert error["transient"] is False and out.cached == 0


def test_null_content_is_an_error_never_a_cached_empty_answer(srv, tmp_path: Path) -> None:
    """A Chat Completions answer whose message.content is null (no refusal, no tool
    calls) is a provider_error naming it, not cached: the next run asks again and scores
    the real answer (issue 15, item 19)."""
    body = {
        "id": "x",
        "object": "chat.completion",
        "model": "175b_verification",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 0, "total_tokens": 5},
    }
    _body_200(srv, body)
    spec = gsm8k_spec(tmp_path, srv, "openai_compatible", run={"max_retries": 0})
    out = run_http(spec, tmp_path)
    error = out.row["error"]
    assert out.row["state"] == "provider_error" and out.cached == 0
    assert (error["kind"], error["error_type"]) == ("InvalidResponse", "null_content")
    assert "message.content is null" in error["message"]
    again = run_http(spec, tmp_path)
    assert again.row["state"] == "scored" and again.row["score"] == 1.0 and again.cached == 1
