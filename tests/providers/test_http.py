"""The HTTP providers at the HTTP boundary: the real ``openai`` and ``anthropic`` SDKs
against the local protocol server, one test per fault class, through both protocols.

Each test checks the row's state, its attempts and error detail, what the retry engine
slept (on an injected clock) and what the cache holds (never an error)."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from http_support import PROTOCOLS, ROOT, SECRET_KEY, gsm8k_spec, run_http
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

from gradetrail.executors.retry import MAX_RETRY_AFTER_S
from gradetrail.providers._http import parse_retry_after
from gradetrail.providers.served import served_model_matches

server = protocol_server_fixture(scope="module", name="server")
srv = fresh_protocol_server_fixture("server", name="srv")


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both SDKs find a key; the value is one no output may ever contain."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_KEY)


# --------------------------------------------------------------------------------------
# 429 and quota


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_rate_limit_retry_after_is_honoured_and_only_the_answer_cached(
    srv, tmp_path: Path, protocol: str
) -> None:
    """Two 429s with Retry-After: 3 are waited out exactly (3 s each), the third attempt
    is scored, and the cache holds that one answer."""
    srv.configure(faults=[{"kind": "rate_limit", "first": 2, "retry_after": 3}])
    out = run_http(gsm8k_spec(tmp_path, srv, protocol), tmp_path)
    assert out.row["state"] == "scored" and out.row["score"] == 1.0
    assert out.row["attempts"] == 3
    assert out.slept == [3.0, 3.0]
    assert out.cached == 1
    assert srv.stats()["statuses"] == {"429": 2, "200": 1}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_retry_after_ms_wins_over_retry_after(srv, tmp_path: Path, protocol: str) -> None:
    """retry-after-ms: 1500 is more precise than retry-after: 3, so 1.5 s is waited."""
    srv.configure(faults=[{"kind": "429", "first": 1, "retry_after": 3, "retry_after_ms": 1500}])
    out = run_http(gsm8k_spec(tmp_path, srv, protocol), tmp_path)
    assert out.row["attempts"] == 2 and out.slept == [1.5]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    "header",
    [{"retry_after": 999999999}, {"retry_after_ms": "1e309"}, {"retry_after": "1e400"}],
    ids=["seconds", "ms-inf", "seconds-inf"],
)
def test_an_absurd_retry_after_is_capped_everywhere(
    srv, tmp_path: Path, protocol: str, header: dict
) -> None:
    """One 429 asking to wait 31 years (or for ever) waits at most MAX_RETRY_AFTER_S, in
    the retry's backoff and in the pause shared by every new attempt (before: the shared
    pause took the raw value and froze the run for good)."""
    srv.configure(faults=[{"kind": "rate_limit", "first": 1, "retry_after": None, **header}])
    out = run_http(gsm8k_spec(tmp_path, srv, protocol), tmp_path)
    assert out.row["state"] == "scored" and out.row["attempts"] == 2
    assert out.slept and max(out.slept) <= MAX_RETRY_AFTER_S
    assert sum(out.slept) <= 2 * MAX_RETRY_AFTER_S


@pytest.fixture(scope="module")
def elsewhere():  # noqa: ANN201
    """A second protocol server: the host a hostile endpoint redirects to."""
    from protocol_server import running_server

    with running_server() as other:
        yield other


@pytest.mark.parametrize("client", ["aiohttp", "sdk"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("status", [302, 307, 308])
def test_an_api_call_is_never_redirected(
    srv, elsewhere, tmp_path: Path, protocol: str, client: str, status: int
) -> None:
    """An endpoint that answers a redirect to another host: the prompt (and key) is never
    re-sent there and no answer from it is cached; the row is a permanent provider error
    naming the redirect (before: 307/308 re-sent the prompt, and 302's GET answer was
    cached as the model's)."""
    path = "/v1/messages" if protocol == "anthropic" else "/v1/chat/completions"
    target = elsewhere.base_url + path
    elsewhere.reset()
    srv.configure(
        faults=[
            {
                "kind": "garbage_200",
                "status": status,
                "body": "{}",
                "headers": {"location": target},
            }
        ]
    )
    spec = gsm8k_spec(tmp_path, srv, protocol, http_client=client)
    out = run_http(spec, tmp_path)
    assert out.row["state"] == "provider_error", out.row
    assert "redirect" in out.row["error"]["message"]
    assert out.row["attempts"] == 1
    assert out.cached == 0
    assert elsewhere.stats()["total"] == 0


def _answer_with(protocol: str, content: object) -> str:
    """A complete 200 answer whose text is ``content`` (any JSON value)."""
    import json

    if protocol == "anthropic":
        body = {
            "id": "msg_x", "type": "message", "role": "assistant", "model": "175b_verification",
            "content": [{"type": "text", "text": content}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }  # fmt: skip
    else:
        body = {
            "id": "chatcmpl-x", "object": "chat.completion", "model": "175b_verification",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": content},
                 "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }  # fmt: skip
    return json.dumps(body)


@pytest.mark.parametrize("client", ["aiohttp", "sdk"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("content", [18, {"answer": 18}, True, [{"type": "text", "text": 18}]])
def test_non_text_content_is_an_invalid_response_never_coerced(
    srv, tmp_path: Path, protocol: str, client: str, content: object
) -> None:
    """A text that is a number, an object, a boolean (or a content part whose text is
    one) is an invalid response, never cached, instead of being coerced (before: 18
    became "18" and an object was cached as its Python repr)."""
    if protocol == "anthropic" and isinstance(content, list):
        pytest.skip("content parts are OpenAI's")
    body = _answer_with(protocol, content)
    srv.configure(faults=[{"kind": "garbage_200", "body": body}])
    spec = gsm8k_spec(tmp_path, srv, protocol, http_client=client, run={"max_retries": 0})
    out = run_http(spec, tmp_path)
    assert out.row["state"] == "provider_error", out.row
    assert out.row["error"]["kind"] == "InvalidResponse"
    assert "not text" in out.row["error"]["message"]
    assert out.cached == 0


@pytest.mark.parametrize("gzipped", [False, True], ids=["plain", "gzip-bomb"])
def test_an_answer_over_the_size_bound_is_a_recorded_error_never_cached(
    srv, tmp_path: Path, gzipped: bool
) -> None:
    """An answer larger than MAX_ANSWER_BYTES once decompressed (sent as is, or as a
    small gzip bomb) is a permanent InvalidResponse naming the bound, never cached or
    written as a row's text (before: a 500 MB answer used 3 GB and wrote a 1 GB row and
    cache entry)."""
    from gradetrail.providers._transport import MAX_ANSWER_BYTES

    pad = {"kind": "pad", "chars": MAX_ANSWER_BYTES + 1024, "gzip": gzipped}
    srv.configure(faults=[pad])
    spec = gsm8k_spec(tmp_path, srv, "openai_compatible", http_client="aiohttp")
    out = run_http(spec, tmp_path)
    assert out.row["state"] == "provider_error", out.row["state"]
    assert out.row["error"]["kind"] == "InvalidResponse"
    assert "larger than" in out.row["error"]["message"]
    assert out.row["attempts"] == 1 and out.cached == 0


def test_a_huge_error_message_is_bounded() -> None:
    """A provider error's message is kept to MAX_ERROR_CHARS characters (before: a 20 MB
    message made a 21 MB manifest)."""
    from gradetrail.errors import MAX_ERROR_CHARS, ServerError

    error = ServerError("x" * 20_000_000, status=500)
    assert len(str(error)) <= MAX_ERROR_CHARS + 100
    assert "characters omitted" in str(error)


def _echoes(protocol: str) -> dict[str, tuple[int, str]]:
    """Answers that echo the API key in every field a provider controls: ``name ->
    (status, body)``."""
    import json

    key = SECRET_KEY
    forms = {"whole": key, "upper": key.upper(), "partial": key[1:-1]}
    out = {}
    for form, echoed in forms.items():
        error = {"error": {"type": echoed, "code": echoed, "message": echoed}}
        if protocol == "anthropic":
            error = {"type": "error", "error": {"type": echoed, "message": echoed}}
            ok = {
                "id": "msg_x", "type": "message", "role": "assistant", "model": echoed,
                "content": [{"type": "text", "text": f"A: 18 {echoed}"}],
                "stop_reason": echoed, "usage": {"input_tokens": 1, "output_tokens": 1},
            }  # fmt: skip
        else:
            ok = {
                "id": "chatcmpl-x", "object": "chat.completion", "model": echoed,
                "choices": [{"index": 0, "finish_reason": echoed,
                             "message": {"role": "assistant", "content": f"A: 18 {echoed}"}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }  # fmt: skip
        out[f"error-{form}"] = (400, json.dumps(error))
        out[f"answer-{form}"] = (200, json.dumps(ok))
        out[f"not-json-{form}"] = (200, f"<html>{echoed}</html>")
    return out


@pytest.mark.parametrize("client", ["aiohttp", "sdk"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_provider_echoing_the_key_in_every_field_never_gets_it_stored(
    srv, tmp_path: Path, protocol: str, client: str
) -> None:
    """A provider that echoes the API key (whole, upper-cased, or missing a character at
    each end) in an error's type, code and message, in a non-JSON 200 body, and in the
    answer's text, served model and stop reason: the key, in any of these forms, is found
    nowhere the run writes (results, manifest, log, cache) (before: stored as sent)."""
    for name, (status, body) in _echoes(protocol).items():
        srv.configure(faults=[{"kind": "garbage_200", "status": status, "body": body}])
        where = tmp_path / name
        keyed = {"api_key_env": "OPENAI_API_KEY"} if protocol == "openai_compatible" else {}
        run = {"max_retries": 0}
        spec = gsm8k_spec(where, srv, protocol, http_client=client, run=run, **keyed)
        run_http(spec, where)
        written = b"".join(p.read_bytes() for p in where.rglob("*") if p.is_file())
        for form in (SECRET_KEY, SECRET_KEY.upper(), SECRET_KEY[1:-1], SECRET_KEY[2:-2]):
            assert form.encode() not in written, (name, form)


def test_exhausted_quota_429_is_permanent(srv, tmp_path: Path) -> None:
    """OpenAI's 429 insufficient_quota is recorded at once with the provider's type and
    code, nothing slept, nothing cached."""
    srv.configure(faults=[{"kind": "quota"}])
    out = run_http(gsm8k_spec(tmp_path, srv, "openai_compatible"), tmp_path)
    assert out.row["state"] == "provider_error" and out.row["attempts"] == 1
    error = out.row["error"]
    assert error["kind"] == "RateLimited" and error["status"] == 429
    assert error["error_type"] == "insufficient_quota" and error["code"] == "insufficient_quota"
    assert error["transient"] is False
    assert error["message"].startswith("429 insufficient_quota: You exceeded your current quota")
    assert out.slept == [] and out.cached == 0


@pytest.mark.parametrize(("status", "kind"), [(400, "BadRequest"), (429, "RateLimited")])
def test_anthropic_credit_exhausted_is_permanent(
    srv, tmp_path: Path, status: int, kind: str
) -> None:
    """Anthropic's "credit balance is too low" (a 400, or a 429) is never retried."""
    srv.configure(faults=[{"kind": "quota", "status": status}])
    out = run_http(gsm8k_spec(tmp_path, srv, "anthropic"), tmp_path)
    error = out.row["error"]
    assert (error["kind"], error["status"], error["transient"]) == (kind, status, False)
    assert error["error_type"] == "invalid_request_error"
    assert "credit balance is too low" in error["message"]
    assert out.row["attempts"] == 1 and out.slept == [] and out.cached == 0


# --------------------------------------------------------------------------------------
# 5xx and overloaded


@pytest.mark.parametrize(
    ("protocol", "error_type"), [("openai_compatible", "server_error"), ("anthropic", "api_error")]
)
def test_server_errors_back_off_then_are_recorded(
    srv, tmp_path: Path, protocol: str, error_type: str
) -> None:
    """A 500 on every attempt: max_retries + 1 attempts with exponential full-jitter
    waits (draw 0.5: 0.5, 1, 2 s), then a ServerError row; nothing cached."""
    srv.configure(faults=[{"kind": "server_error"}])
    out = run_http(gsm8k_spec(tmp_path, srv, protocol), tmp_path)
    assert out.row["state"] == "provider_error" and out.row["attempts"] == 4
    error = out.row["error"]
    assert (error["kind"], error["status"], error["error_type"]) == ("ServerError", 500, error_type)
    assert error["transient"] is True
    assert out.slept == [0.5, 1.0, 2.0]
    assert out.cached == 0


@pytest.mark.parametrize(("protocol", "status"), [("openai_compatible", 503), ("anthropic", 529)])
def test_overloaded_is_retried_and_lowers_the_in_flight_limit(
    srv, tmp_path: Path, protocol: str, status: int
) -> None:
    """An overloaded answer (OpenAI 503, Anthropic 529 overloaded_error) is retried; the
    second attempt is scored."""
    srv.configure(faults=[{"kind": "overloaded", "first": 1}])
    out = run_http(gsm8k_spec(tmp_path, srv, protocol), tmp_path)
    assert out.row["state"] == "scored" and out.row["attempts"] == 2
    assert out.slept == [0.5] and out.cached == 1
    assert srv.stats()["statuses"] == {str(status): 1, "200": 1}


# --------------------------------------------------------------------------------------
# bodies that are not answers


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_error_body_under_200_is_retried_never_cached(srv, tmp_path: Path, protocol: str) -> None:
    """An error body under 200 whose type says the server failed is an InvalidResponse
    that is retried; only the real answer is cached."""
    srv.configure(faults=[{"kind": "error_200", "first": 1}])
    out = run_http(gsm8k_spec(tmp_path, srv, protocol), tmp_path)
    assert out.row["state"] == "scored" and out.row["attempts"] == 2
    assert out.slept == [0.5] and out.cached == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_permanent_error_body_under_200_is_recorded(srv, tmp_path: Path, protocol: str) -> None:
    """An invalid_request_error body under 200 is a permanent InvalidResponse keeping the
    provider's error type."""
    srv.configure(faults=[{"kind": "error_200", "type": "invalid_request_error"}])
    out = run_http(gsm8k_spec(tmp_path, srv, protocol), tmp_path)
    error = out.row["error"]
    assert (error["kind"], error["status"], error["error_type"]) == (
        "InvalidResponse",
        200,
        "invalid_request_error",
    )
    assert error["message"].startswith("200 answer is an error: invalid_request_error: ")
    assert out.row["attempts"] == 1 and out.cached == 0


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_unparseable_body_is_an_invalid_response(srv, tmp_path: Path, protocol: str) -> None:
    """A 200 whose body is not JSON is recorded as InvalidResponse quoting its start."""
    srv.configure(faults=[{"kind": "garbage_200", "body": "<html>gateway page"}])
    out = run_http(gsm8k_spec(tmp_path, srv, protocol), tmp_path)
    error = out.row["error"]
    assert error["kind"] == "InvalidResponse" and error["transient"] is False
    assert error["message"] == "200 answer is not JSON: '<html>gateway page'"
    assert out.row["attempts"] == 1 and out.slept == [] and out.cached == 0


# --------------------------------------------------------------------------------------
# stalls, drops, dead endpoints


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_stalled_attempt_times_out_and_is_retried(srv, tmp_path: Path, protocol: str) -> None:
    """A server that accepts and stalls is cut at timeout_s; the retry is scored."""
    srv.configure(faults=[{"kind": "stall", "seconds": 60, "first": 1}])
    # the retry must answer within timeout_s too: 0.3 s was short for one round trip on a
    # loaded 2-core machine (a third attempt then failed the test)
    spec = gsm8k_spec(tmp_path, srv, protocol, run={"timeout_s": 2.0})
    out = run_http(spec, tmp_path)
    assert out.row["state"] == "scored" and out.row["attempts"] == 2
    assert out.slept == [0.5] and out.cached == 1


def test_sample_ceiling_bounds_a_stalling_server_in_wall_clock_time(srv, tmp_path: Path) -> None:
    """With every attempt stalling, the per-sample ceiling (0.6 s) ends the sample as a
    ProviderTimeout after about that long, however many attempts remain."""
    srv.configure(faults=[{"kind": "stall", "seconds": 30}])
    spec = gsm8k_spec(
        tmp_path,
        srv,
        "openai_compatible",
        run={"timeout_s": 0.25, "sample_timeout_s": 0.6, "max_retries": 10},
    )
    import gradetrail

    result = gradetrail.run_eval(spec, results_root=tmp_path / "r", use_cache=False)
    row = gradetrail.read_results(result.run_dir)[0]
    assert row["state"] == "provider_error" and row["error"]["kind"] == "ProviderTimeout"
    # reached, or a backoff it has no room for not started (the jitter decides which)
    assert row["error"]["message"].startswith("sample ceiling of 0.6 s ")
    # attempts of 0.25 s each within a 0.6 s ceiling: at most three start (backoff is random)
    assert 1 <= row["attempts"] <= 3


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_dropped_connection_is_a_retried_connection_error(
    srv, tmp_path: Path, protocol: str
) -> None:
    """A connection dropped without an answer is retried; when it keeps happening, the
    row names the endpoint and that the server disconnected."""
    srv.configure(faults=[{"kind": "drop"}])
    out = run_http(gsm8k_spec(tmp_path, srv, protocol, run={"max_retries": 1}), tmp_path)
    error = out.row["error"]
    assert error["kind"] == "ProviderConnectionError" and error["transient"] is True
    assert error["message"].startswith(f"cannot reach {srv.base_url}")
    assert "disconnected" in error["message"].lower()
    assert out.row["attempts"] == 2 and out.slept == [0.5] and out.cached == 0


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_dead_base_url_ends_in_rows_naming_the_connection_error(
    tmp_path: Path, protocol: str
) -> None:
    """Nobody listening: every sample is a provider_error row naming the URL and the
    refused connection, after its retries (with run.fail_fast off; by default the first
    five such rows stop the run: tests/engine/test_failfast.py)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}" + ("/v1" if protocol == "openai_compatible" else "")
    run = {"concurrency": 2, "fail_fast": 0}
    spec = gsm8k_spec(tmp_path, None, protocol, limit=6, base_url=url, run=run)
    out = run_http(spec, tmp_path)
    assert [r["state"] for r in out.rows] == ["provider_error"] * 6
    for row in out.rows:
        assert row["error"]["kind"] == "ProviderConnectionError"
        assert row["error"]["message"].startswith(f"cannot reach {url}: ")
        assert "connect" in row["error"]["message"].lower()
        assert row["attempts"] == 4
    assert out.result.manifest.status == "complete"


# --------------------------------------------------------------------------------------
# keys, auth, bad requests


@pytest.mark.parametrize(("protocol", "env"), [("anthropic", "ANTHROPIC_API_KEY")])
def test_rejected_key_is_an_auth_error_naming_the_variable(
    srv, tmp_path: Path, protocol: str, env: str
) -> None:
    """A 401 is a permanent AuthError whose message says which variable holds the key."""
    srv.configure(api_key="the-right-key")
    out = run_http(gsm8k_spec(tmp_path, srv, protocol), tmp_path)
    error = out.row["error"]
    assert (error["kind"], error["status"], error["transient"]) == ("AuthError", 401, False)
    assert error["message"] == (
        f"401 authentication_error: invalid x-api-key; check the key in {env}"
    )
    assert out.row["attempts"] == 1 and out.cached == 0


def test_placeholder_key_rejected_says_no_key_was_sent(srv, tmp_path: Path) -> None:
    """With api_key_required: false, a 401 says the placeholder was sent and what to set,
    not to 'check' a variable that holds nothing."""
    srv.configure(api_key="the-right-key")
    out = run_http(gsm8k_spec(tmp_path, srv, "openai_compatible"), tmp_path)
    message = out.row["error"]["message"]
    assert message.startswith("401 ")
    assert message.endswith(
        "; no key was sent (model.api_key_required is false, so 'EMPTY' was): name the "
        "key's variable in model.api_key_env"
    )
    assert ".;" not in message


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_key_never_reaches_results_manifest_log_or_cache(
    srv, tmp_path: Path, protocol: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Even when the server echoes the key in its error, no file the run writes holds it
    (results, samples, manifest, log, cache)."""
    monkeypatch.setenv("PROBE_KEY", SECRET_KEY)
    srv.configure(
        faults=[
            {"kind": "error", "status": 401, "message": f"Incorrect API key provided: {SECRET_KEY}"}
        ]
    )
    spec = gsm8k_spec(tmp_path, srv, protocol, limit=2, api_key_env="PROBE_KEY")
    out = run_http(spec, tmp_path)
    assert out.row["error"]["message"].startswith("401 ")
    assert "Incorrect API key provided: ***" in out.row["error"]["message"]
    srv.reset()
    run_http(gsm8k_spec(tmp_path / "ok", srv, protocol, limit=2, api_key_env="PROBE_KEY"), tmp_path)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    names = {p.name for p in written}
    assert "log.jsonl" in names and "cache.sqlite" in names
    for path in written:
        assert SECRET_KEY.encode() not in path.read_bytes(), path
        assert b"SECRET" not in path.read_bytes(), path


@pytest.mark.parametrize(
    ("protocol", "error_type", "code"),
    [
        ("openai_compatible", "invalid_request_error", "model_not_found"),
        ("anthropic", "not_found_error", None),
    ],
)
def test_unknown_model_is_a_permanent_bad_request(
    srv, tmp_path: Path, protocol: str, error_type: str, code: str | None
) -> None:
    """A 404 for a model the server does not know is a BadRequest with the provider's own
    error type and code, after one attempt."""
    out = run_http(gsm8k_spec(tmp_path, srv, protocol, model="no-such-model"), tmp_path)
    error = out.row["error"]
    assert (error["kind"], error["status"], error["error_type"], error["code"]) == (
        "BadRequest",
        404,
        error_type,
        code,
    )
    assert out.row["attempts"] == 1 and out.slept == [] and out.cached == 0


def test_422_is_permanent_and_x_should_retry_overrides_the_status(srv, tmp_path: Path) -> None:
    """A 422 is recorded at once; the same 422 sent with x-should-retry: true is retried."""
    srv.configure(faults=[{"kind": "error", "status": 422, "times": 1}])
    out = run_http(gsm8k_spec(tmp_path / "a", srv, "openai_compatible"), tmp_path / "a")
    assert out.row["error"]["kind"] == "BadRequest" and out.row["error"]["status"] == 422
    assert out.row["attempts"] == 1
    srv.reset()
    retry = {"kind": "error", "status": 422, "times": 1, "headers": {"x-should-retry": "true"}}
    srv.configure(faults=[retry])
    out = run_http(gsm8k_spec(tmp_path / "b", srv, "openai_compatible"), tmp_path / "b")
    assert out.row["state"] == "scored" and out.row["attempts"] == 2


def test_missing_key_fails_before_the_sdk_is_imported(tmp_path: Path) -> None:
    """`gradetrail run` without the key's variable exits 1 before any call, printing one
    line that names the variable, without importing the SDK (``-X importtime`` lists every
    module the process imported; no wall-clock bound, which a loaded machine breaks)."""
    spec = gsm8k_spec(tmp_path, None, "anthropic", base_url="http://127.0.0.1:9")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "gradetrail", "run", spec.source, "--no-cache"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=30,
    )
    assert proc.returncode == 1
    imports = [line for line in proc.stderr.splitlines() if line.startswith("import time:")]
    printed = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    assert printed == [
        "error: ANTHROPIC_API_KEY is not set; export ANTHROPIC_API_KEY=<your API key> "
        "(or name another variable in model.api_key_env)"
    ]
    modules = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in imports}
    assert "gradetrail" in modules and "yaml" in modules
    assert not modules & {"anthropic", "openai", "httpx", "httpx2", "aiohttp"}
    assert proc.stdout == ""
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    ("provider", "key_env", "set_vars", "hint"),
    [
        (
            "openai_compatible",
            "OPENAI_APIKEY",
            {"OPENAI_API_KEY": "sk-secret-123"},
            "; OPENAI_API_KEY is set: name it in model.api_key_env if it holds the key",
        ),
        (
            "anthropic",
            None,
            {"ANTHROPIC_KEY": "ak-secret-456"},
            "; ANTHROPIC_KEY is set: name it in model.api_key_env if it holds the key",
        ),
        (
            "anthropic",
            None,
            {"OPENAI_API_KEY": "sk-secret-123"},
            "; OPENAI_API_KEY is set, which is for model.provider: openai",
        ),
    ],
)
def test_a_missing_key_names_a_set_variable_that_looks_meant(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    provider: str,
    key_env: str | None,
    set_vars: dict[str, str],
    hint: str,
) -> None:
    """First contact: the key is in a variable whose name is close to the one read (a
    typo in model.api_key_env, ANTHROPIC_KEY), or only the other SDK's key is set (the
    wrong provider): the one line names that variable, never its value."""
    from cli_support import run_cli

    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_APIKEY", "ANTHROPIC_KEY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in set_vars.items():
        monkeypatch.setenv(name, value)
    fields = {"api_key_env": key_env, "api_key_required": True} if key_env else {}
    spec = gsm8k_spec(tmp_path, None, provider, base_url="http://127.0.0.1:9", **fields)
    out = run_cli("run", spec.source, "--no-cache", "--results-root", str(tmp_path / "r"))
    assert out.code == 1
    (line,) = out.err_lines
    assert line.endswith(hint) and " is not set; export " in line
    assert not any(value in line for value in set_vars.values())


# --------------------------------------------------------------------------------------
# what a response carries


@pytest.mark.parametrize("client", ["aiohttp", "sdk"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    "value", [float("nan"), float("inf"), float("-inf"), -5000, 10**15, 1.5], ids=repr
)
def test_a_hostile_usage_count_is_zero_never_a_crash_or_negative_cost(
    srv, tmp_path: Path, protocol: str, client: str, value: float
) -> None:
    """NaN, Infinity, a negative, an absurd or a fractional token count in ``usage`` is
    not a count: the answer is scored and cached (a re-run pays nothing again), its
    tokens count 0 and its cost is never negative (before: NaN and Infinity crashed the
    whole run with a traceback, every re-run paid and crashed again, and -5000 made the
    cost negative)."""
    field = "completion_tokens" if protocol == "openai_compatible" else "output_tokens"
    srv.configure(faults=[{"kind": "usage", "usage": {field: value}}])
    price = {"input_per_mtok": 1.0, "output_per_mtok": 4.0}
    spec = gsm8k_spec(tmp_path, srv, protocol, http_client=client, price=price)
    out = run_http(spec, tmp_path)
    assert out.row["state"] == "scored", out.row
    assert out.row["output_tokens"] == 0
    assert out.cached == 1
    cost = out.result.manifest.cost_usd
    assert cost is not None and cost >= 0
    log = (out.result.run_dir / "log.jsonl").read_text()
    assert '"event":"invalid_usage"' in log


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_missing_usage_counts_zero_tokens_with_a_warning(
    srv, tmp_path: Path, protocol: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An answer without usage is scored with zero tokens and a logged warning (stderr
    and the run's log), not an error."""
    srv.configure(faults=[{"kind": "no_usage"}])
    with caplog.at_level(logging.WARNING, logger="gradetrail.providers"):
        out = run_http(gsm8k_spec(tmp_path, srv, protocol, limit=3), tmp_path)
    assert [r["state"] for r in out.rows] == ["scored"] * 3
    assert all(r["input_tokens"] == r["output_tokens"] == 0 for r in out.rows)
    warnings = [r.getMessage() for r in caplog.records if r.name == "gradetrail.providers"]
    assert len(warnings) == 1 and "carried no usage" in warnings[0]
    log = (out.result.run_dir / "log.jsonl").read_text()
    assert '"event":"missing_usage"' in log and '"responses":3' in log


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_served_model_alias_is_recorded_and_accepted(srv, tmp_path: Path, protocol: str) -> None:
    """A dated snapshot served for its alias is recorded per row and in the manifest, and
    passes require_served_model."""
    srv.configure(faults=[{"kind": "alias", "suffix": "-20250101"}])
    spec = gsm8k_spec(tmp_path, srv, protocol, limit=2, require_served_model=True)
    out = run_http(spec, tmp_path)
    assert [r["served_model"] for r in out.rows] == ["175b_verification-20250101"] * 2
    assert [r["state"] for r in out.rows] == ["scored"] * 2
    assert out.result.manifest.served_models == {"175b_verification-20250101": 2}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_served_model_mismatch_is_an_error_when_required(
    srv, tmp_path: Path, protocol: str
) -> None:
    """Another model than the requested one (or its snapshot) is a permanent BadRequest
    under require_served_model, never cached; without the flag it is only recorded."""
    srv.configure(faults=[{"kind": "alias", "served_model": "6b_finetuning"}])
    strict = run_http(
        gsm8k_spec(tmp_path / "s", srv, protocol, require_served_model=True), tmp_path / "s"
    )
    error = strict.row["error"]
    assert (error["kind"], error["error_type"], error["code"]) == (
        "BadRequest",
        "served_model_mismatch",
        "6b_finetuning",
    )
    assert strict.row["attempts"] == 1 and strict.cached == 0
    lax = run_http(gsm8k_spec(tmp_path / "l", srv, protocol), tmp_path / "l")
    assert lax.row["state"] == "scored" and lax.row["served_model"] == "6b_finetuning"


def test_served_model_rule() -> None:
    """Exact names and the documented alias-to-snapshot forms match; other models don't."""
    assert served_model_matches("gpt-4o", "gpt-4o")
    assert served_model_matches("gpt-4o", "gpt-4o-2024-08-06")
    assert served_model_matches("claude-sonnet-4-5", "claude-sonnet-4-5-20250929")
    assert served_model_matches("claude-3-5-sonnet-latest", "claude-3-5-sonnet-20241022")
    assert served_model_matches("claude-sonnet-4-0", "claude-sonnet-4-20250514")
    assert not served_model_matches("gpt-4o", "gpt-4o-mini")
    assert not served_model_matches("gpt-4o", "gpt-4o-mini-2024-07-18")
    assert not served_model_matches("gpt-4o", None)


def test_retry_after_header_forms() -> None:
    """retry-after-ms (ms), retry-after in seconds or as an HTTP date; junk is None."""
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25
    assert parse_retry_after({"retry-after": "7"}) == 7.0
    date = "Wed, 21 Oct 2015 07:28:00 GMT"
    assert parse_retry_after({"retry-after": date}, now=1445412470.0) == 10.0
    assert parse_retry_after({"retry-after": date}, now=1445412490.0) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({"retry-after": "999999999"}) == MAX_RETRY_AFTER_S
    assert parse_retry_after({"retry-after-ms": "1e309"}) == MAX_RETRY_AFTER_S
    assert parse_retry_after({"retry-after-ms": "nan"}) is None
    assert parse_retry_after({}) is None


def test_the_price_table_is_packaged() -> None:
    """prices.json is tracked and not git-ignored inside the package directory, so hatch's
    wheel target (packages = ["gradetrail"]) ships it (a built wheel lists it)."""
    config = (ROOT / "pyproject.toml").read_text()
    assert 'packages = ["gradetrail"]' in config
    path = "gradetrail/data/prices.json"
    ignored = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT)
    assert ignored.returncode == 1
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", path], cwd=ROOT)
    assert tracked.returncode == 0


def test_requests_per_minute_cap_paces_the_run(srv, tmp_path: Path) -> None:
    """run.requests_per_minute: 60 starts one request a second after the first: four
    samples wait 1 s three times (on the injected clock), all scored."""
    spec = gsm8k_spec(tmp_path, srv, "openai_compatible", limit=4, run={"concurrency": 4})
    out = run_http(spec, tmp_path, requests_per_minute=60)
    assert [r["state"] for r in out.rows] == ["scored"] * 4
    assert out.slept == [1.0, 1.0, 1.0]
    assert srv.stats()["total"] == 4


def test_spec_rate_cap_reaches_the_default_executor(srv, tmp_path: Path) -> None:
    """run.requests_per_minute in the spec reaches the executor a run builds by default,
    and paces it: at 60 a minute four samples wait 1 s three times (on the injected clock:
    wall-clock gaps between arrivals break on a loaded machine)."""
    from gradetrail.engine.runner import _executor, plan_run

    run = {"requests_per_minute": 60, "concurrency": 4}
    spec = gsm8k_spec(tmp_path, srv, "openai_compatible", limit=4, run=run)
    default = _executor(plan_run(spec), None)
    assert (default.requests_per_minute, default.tokens_per_minute) == (60, None)
    out = run_http(spec, tmp_path, requests_per_minute=default.requests_per_minute)
    assert [r["state"] for r in out.rows] == ["scored"] * 4
    assert out.slept == [1.0, 1.0, 1.0]
    assert srv.stats()["total"] == 4


def test_a_long_retry_after_holds_no_sample_past_its_ceiling(srv, tmp_path: Path) -> None:
    """A 429 asking for 600 s with run.sample_timeout_s: 5: the sample that got it ends at
    once, and the samples after it are not sent into the server's pause, each ending as a
    transient ProviderTimeout a re-run retries; nothing is slept (before: the next sample
    waited the whole 600 s, and so the run did)."""
    srv.configure(faults=[{"kind": "rate_limit", "retry_after": 600, "first": 1}])
    run = {"concurrency": 1, "sample_timeout_s": 5, "fail_fast": 0}
    out = run_http(gsm8k_spec(tmp_path, srv, "openai_compatible", limit=3, run=run), tmp_path)
    assert out.slept == [] and srv.stats()["total"] == 1
    errors = [row["error"] for row in out.rows]
    assert [(e["kind"], e["transient"]) for e in errors] == [("ProviderTimeout", True)] * 3
    assert errors[0]["message"] == (
        "sample ceiling of 5 s leaves no room for a 600 s wait after 1 attempts; last error: "
        "429 requests: Rate limit reached for requests. Please try again later."
    )
    assert errors[1]["message"] == (
        "sample ceiling of 5 s leaves no room for the server's 600 s Retry-After pause; not "
        "sent after 0 attempts"
    )
    assert [row["attempts"] for row in out.rows] == [1, 0, 0]
