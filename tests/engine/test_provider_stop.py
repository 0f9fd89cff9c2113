"""An error that every later request of a run would repeat (a refused key, no access to
the model, an unknown model, a server without the memory to load it) stops the run at its
first row, one line saying what to fix, exit 3 like a quota's stop, resumable; through
both HTTP clients (the lean one and the official SDKs) against the local protocol server.
A moderation 403 stays one sample's error, and an Anthropic 429 for a request that can
never fit its per-minute limit is that row's error, never retried."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_support import run_cli
from http_support import SECRET_KEY, gsm8k_spec
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

from gradetrail.providers._http import classify_status

server = protocol_server_fixture(scope="module", name="server")
srv = fresh_protocol_server_fixture("server", name="srv")

CLIENTS = ("aiohttp", "sdk")


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_KEY)


def _run(srv: Any, tmp_path: Path, protocol: str, client: str, **run: Any) -> Any:
    spec = gsm8k_spec(
        tmp_path, srv, protocol, limit=4, http_client=client, run={"concurrency": 1, **run}
    )
    out = run_cli(
        "run",
        spec.source,
        "--cache",
        str(tmp_path / "cache.sqlite"),
        "--results-root",
        str(tmp_path / "r"),
    )
    (run_dir,) = (tmp_path / "r").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    return out, manifest, rows


STOPS = [
    (  # Anthropic's 401 for a wrong key
        "anthropic",
        401,
        {
            "type": "error",
            "error": {"type": "authentication_error", "message": "invalid x-api-key"},
        },
        "error: stopped: the provider refused the API key (AuthError: 401 authentication_error: "
        "invalid x-api-key; check the key in ANTHROPIC_API_KEY); set a valid key, then run "
        "the same command again",
    ),
    (  # Anthropic's 403: the key may not use this model
        "anthropic",
        403,
        {
            "type": "error",
            "error": {
                "type": "permission_error",
                "message": "Your API key does not have permission to use the specified resource.",
            },
        },
        "error: stopped: the provider refused this key access to the model or endpoint "
        "(AuthError: 403 permission_error:",
    ),
    (  # OpenAI's 404 for a misspelt model
        "openai",
        404,
        {
            "error": {
                "message": "The model `gpt-5.2-proo` does not exist or you do not have access "
                "to it.",
                "type": "invalid_request_error",
                "param": None,
                "code": "model_not_found",
            }
        },
        "error: stopped: the provider does not serve this model (or nothing answers at this "
        "URL) (BadRequest: 404 invalid_request_error: The model `gpt-5.2-proo` does not",
    ),
    (  # Ollama's OpenAI-compatible 500 when the model does not fit in memory
        "openai_compatible",
        500,
        {
            "error": {
                "message": "model requires more system memory (7.5 GiB) than is available "
                "(5.2 GiB)",
                "type": "api_error",
            }
        },
        "error: stopped: the provider has too little memory to load the model (ServerError: "
        "500 api_error: model requires more system memory (7.5 GiB) than is available (5.2 "
        "GiB)); free memory on the server, or pick a smaller model (or quantization), then run",
    ),
]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("protocol", "status", "body", "line"), STOPS, ids=range(len(STOPS)))
def test_an_error_every_request_would_repeat_stops_the_run_at_its_first_row(
    srv, tmp_path: Path, client: str, protocol: str, status: int, body: dict, line: str
) -> None:
    """The first request's 401/403/404/memory-500 stops the run there: one request sent
    (before: 5, fail-fast's rows, each 500 retried), exit 3, one line saying what to fix,
    the manifest interrupted with that reason; once fixed the same command completes it."""
    srv.configure(faults=[{"kind": "answer", "body": body, "status": status}])
    out, manifest, rows = _run(srv, tmp_path, protocol, client, max_retries=2)
    assert out.code == 3, out.err
    (error,) = [e for e in out.err_lines if e.startswith("error:")]
    assert error.startswith(line), error
    assert srv.stats()["total"] == 1
    assert manifest["status"] == "interrupted"
    assert manifest["stop_reason"] == error.removeprefix("error: ")
    assert len(rows) == 1 and rows[0]["error"]["transient"] is False
    assert rows[0]["error"]["stops_run"] in ("key", "access", "model", "memory")

    srv.configure(faults=[])  # fixed
    again, manifest, rows = _run(srv, tmp_path, protocol, client)
    assert again.code == 0, again.err
    assert manifest["status"] == "complete" and manifest["counts"] == {"scored": 4}


@pytest.mark.parametrize("client", CLIENTS)
def test_a_moderation_403_stays_one_samples_error(srv, tmp_path: Path, client: str) -> None:
    """OpenRouter's 403 for a flagged prompt refuses that prompt, not the key: the run
    goes on and the other three samples are scored."""
    body = {
        "error": {
            "code": 403,
            "message": "This model needs moderation and the input was flagged.",
            "metadata": {"reasons": ["violence"], "flagged_input": "How do I..."},
        }
    }
    srv.configure(faults=[{"kind": "answer", "body": body, "status": 403, "first": 1}])
    out, manifest, rows = _run(srv, tmp_path, "openai_compatible", client)
    assert "stopped" not in out.err
    assert manifest["status"] == "complete"
    assert manifest["counts"] == {"scored": 3, "provider_error": 1}
    assert "stops_run" not in rows[0]["error"]


def _anthropic_tpm_429(kind: str, limit: int) -> dict:
    return {
        "type": "error",
        "error": {
            "type": "rate_limit_error",
            "message": f"This request would exceed the rate limit for your organization "
            f"(0dccdde6) of {limit:,} {kind} tokens per minute. For details, refer to: "
            "https://docs.anthropic.com/en/api/rate-limits. Please reduce the prompt length "
            "or the maximum tokens requested, or try again later.",
        },
    }


@pytest.mark.parametrize("client", CLIENTS)
def test_an_anthropic_429_for_a_request_larger_than_the_limit_is_the_rows_error(
    srv, tmp_path: Path, client: str
) -> None:
    """Refused for input tokens a minute while the bucket is full (remaining = limit):
    this request alone is larger than the limit, so it is recorded at once (1 attempt,
    BadRequest, saying so) and the run goes on (before: retried run.max_retries times,
    each waiting the Retry-After)."""
    headers = {
        "retry-after": "16",
        "x-should-retry": "true",
        "anthropic-ratelimit-input-tokens-limit": "30000",
        "anthropic-ratelimit-input-tokens-remaining": "30000",
    }
    rule = {
        "kind": "answer",
        "body": _anthropic_tpm_429("input", 30_000),
        "status": 429,
        "headers": headers,
        "first": 1,
    }
    srv.configure(faults=[rule])
    out, manifest, rows = _run(srv, tmp_path, "anthropic", client, max_retries=3)
    assert out.code == 0, out.err
    assert manifest["counts"] == {"scored": 3, "provider_error": 1}
    error = rows[0]["error"]
    assert (rows[0]["attempts"], error["kind"], error["transient"]) == (1, "BadRequest", False)
    assert "asks more than the whole limit of 30,000 input tokens a minute" in error["message"]
    assert srv.stats()["total"] == 4


def test_anthropic_429_never_fits_reads_max_tokens_and_the_headers() -> None:
    """max_tokens above the output-tokens-a-minute limit never fits (Anthropic counts
    max_tokens against it); a bucket not full (remaining < limit) is a limit to wait out."""
    from gradetrail.providers.anthropic import never_fits

    out = _anthropic_tpm_429("output", 8_000)["error"]["message"]
    assert "max_tokens 16,000" in (never_fits(out, {}, 16_000) or "")
    assert never_fits(out, {}, 1_024) is None
    inp = _anthropic_tpm_429("input", 30_000)["error"]["message"]
    partly = {
        "Anthropic-Ratelimit-Input-Tokens-Limit": "30000",
        "Anthropic-Ratelimit-Input-Tokens-Remaining": "1200",
    }
    assert never_fits(inp, partly, 1_024) is None
    assert never_fits("Number of requests has exceeded your per-minute rate limit", {}, 9) is None


def test_a_404_about_something_else_is_one_requests_error() -> None:
    """The Responses API's 404 for a reasoning item sent back by id is that conversation's
    error, not an unknown model; a bare "Not Found" (no route at the URL) and a 404 naming
    the model stop the run."""
    item = {"error": {"message": "Item with id 'rs_1' not found.", "type": "invalid_request_error"}}
    assert classify_status(404, {}, item, model="gpt-5").stops_run is None
    assert classify_status(404, {}, {"detail": "Not Found"}, model="m").stops_run == "model"
    named = {"error": {"message": "model: claude-sonet-4-5", "type": "not_found_error"}}
    assert classify_status(404, {}, named, model="claude-sonet-4-5").stops_run == "model"
    ollama = {"error": "model 'llama9' not found, try pulling it first"}
    assert classify_status(404, {}, ollama, model="llama9").stops_run == "model"
    told_to_retry = classify_status(401, {"x-should-retry": "true"}, {"error": "expired"})
    assert told_to_retry.stops_run is None


#: an answer schema OpenAI's strict mode refuses (no additionalProperties: false)
LOOSE_SCHEMA = {"type": "object", "properties": {"answer": {"type": "number"}}}
ANTHROPIC_SCHEMA_400 = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "tools.0.custom.input_schema: JSON schema is invalid. It must match JSON "
        "Schema draft 2020-12 (https://json-schema.org/draft/2020-12). Learn more about tool "
        "use at https://docs.claude.com/en/docs/tool-use.",
    },
}


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("protocol", ["openai_compatible", "openai_responses", "anthropic"])
def test_a_refused_answer_schema_stops_the_run_at_its_first_row(
    srv, tmp_path: Path, client: str, protocol: str
) -> None:
    """A response_format schema the API refuses at call time (OpenAI's 400 'Invalid schema
    for response_format', code invalid_json_schema on the Responses API; Anthropic's 400
    for its forced answer tool's input_schema) is in every request: the run stops at the
    first row, one request sent (before: 5 rows and up to 20 requests, fail-fast's), exit
    3, one line naming the schema problem; fixed, the same command completes the run."""
    if protocol == "anthropic":
        srv.configure(faults=[{"kind": "answer", "body": ANTHROPIC_SCHEMA_400, "status": 400}])
    fmt = {"name": "answer", "schema": LOOSE_SCHEMA}
    fields: dict[str, Any] = {"response_format": fmt}
    if protocol == "openai_responses":
        fields["api_key_required"] = False
    spec = gsm8k_spec(
        tmp_path, srv, protocol, limit=4, http_client=client, run={"concurrency": 4}, **fields
    )
    args = ("--cache", str(tmp_path / "cache.sqlite"), "--results-root", str(tmp_path / "r"))
    out = run_cli("run", spec.source, *args)
    assert out.code == 3, out.err
    (error,) = [e for e in out.err_lines if e.startswith("error:")]
    assert error.startswith(
        "error: stopped: the provider refused the JSON schema of model.response_format "
        "(BadRequest: 400 invalid_request_error: "
    ), error
    assert (
        "input_schema: JSON schema is invalid"
        if protocol == "anthropic"
        else (
            "Invalid schema for response_format 'answer': In context=(), 'additionalProperties' "
            "is required to be supplied and to be false."
        )
    ) in error
    assert "fix model.response_format.schema as its message says" in error
    assert srv.stats()["total"] <= 4  # those in flight land; nothing more is started
    (run_dir,) = (tmp_path / "r").iterdir()
    rows = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert rows and all(r["error"]["stops_run"] == "schema" for r in rows)

    srv.configure(faults=[])  # fixed: a schema the API takes
    strict = {**LOOSE_SCHEMA, "required": ["answer"], "additionalProperties": False}
    spec = gsm8k_spec(
        tmp_path,
        srv,
        protocol,
        limit=4,
        http_client=client,
        **{**fields, "response_format": {"name": "answer", "schema": strict}},
    )
    again = run_cli("run", spec.source, *args)
    assert again.code == 0, again.err


def test_a_refused_tool_schema_is_not_the_answer_schema() -> None:
    """'Invalid schema for function ...' may be one row's own tools: it stays that row's
    error; the answer schema's refusal, with or without OpenAI's code, stops the run."""
    tool = {
        "error": {
            "message": "Invalid schema for function 'get_weather': In context=(), "
            "'additionalProperties' is required to be supplied and to be false.",
            "type": "invalid_request_error",
            "code": "invalid_function_parameters",
        }
    }
    assert classify_status(400, {}, tool).stops_run is None
    chat = {"error": {"message": "Invalid schema for response_format 'x': ...", "code": None}}
    assert classify_status(400, {}, chat).stops_run == "schema"
    coded = {"error": {"message": "bad", "code": "invalid_json_schema"}}
    assert classify_status(400, {}, coded).stops_run == "schema"
