"""More shapes real APIs send, through every HTTP client (the lean aiohttp one, the
official SDKs, and ``auto``'s plain asyncio client for an ``http://`` endpoint) against
the local protocol server: each body is written here in the shape the provider documents
(or that users pasted from real calls), served once by the server's ``answer`` fault,
and the row checked. Every client must read every shape the same."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from http_support import SECRET_KEY, gsm8k_spec, run_http
from http_support import SHAPES_PRICE as PRICE
from http_support import run_priced as _run
from http_support import serve_once as _serve_once
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

server = protocol_server_fixture(scope="module", name="server")
srv = fresh_protocol_server_fixture("server", name="srv")

CLIENTS = ("aiohttp", "sdk", "auto")
SSE = {"content-type": "text/event-stream"}


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_KEY)


def _events(*chunks: dict[str, Any] | str, named: bool = False) -> str:
    """A server-sent event stream of ``chunks`` (a string goes out as it is: ``[DONE]``);
    with ``named``, each event is named by its ``type`` (as the Messages API names them)."""
    out = []
    for chunk in chunks:
        data = chunk if isinstance(chunk, str) else json.dumps(chunk)
        head = f"event: {chunk['type']}\n" if named and isinstance(chunk, dict) else ""
        out.append(f"{head}data: {data}\n\n")
    return "".join(out)


# --------------------------------------------------------------------------------------
# the Responses API: a content filter is a refusal, as on Chat Completions


@pytest.mark.parametrize("client", CLIENTS)
def test_responses_content_filter_is_an_answer_with_its_usage(
    srv, tmp_path: Path, client: str
) -> None:
    """``status: incomplete`` with ``incomplete_details.reason: content_filter`` is the
    provider withholding the output, billed: a refused answer with its tokens and cost,
    as Chat Completions' ``finish_reason: content_filter`` is, never an error row."""
    body = {
        "id": "resp_1",
        "object": "response",
        "status": "incomplete",
        "incomplete_details": {"reason": "content_filter"},
        "model": "175b_verification",
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "status": "incomplete",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Step one", "annotations": []}],
            }
        ],
        "usage": {
            "input_tokens": 40,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 2,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 42,
        },
    }
    _serve_once(srv, body)
    out = _run(srv, tmp_path, "openai_responses", client, api_key_required=False)
    row = out.row
    assert row["state"] == "scored" and row["attempts"] == 1
    assert (row["stop_reason"], row["raw_stop_reason"]) == ("content_filter", "content_filter")
    assert (row["response"], row["input_tokens"], row["output_tokens"]) == ("Step one", 40, 2)
    assert row["cost_usd"] == pytest.approx((40 * 1.0 + 2 * 2.0) / 1e6)
    assert out.result.manifest.refusals == 1 and out.cached == 1


# --------------------------------------------------------------------------------------
# streams


@pytest.mark.parametrize("client", CLIENTS)
def test_azure_stream_opening_with_a_prompt_filter_chunk(srv, tmp_path: Path, client: str) -> None:
    """Azure OpenAI opens a stream with a chunk of prompt filter results whose ``id`` and
    ``model`` are empty and ``choices`` is ``[]``: the served model is the one the
    answer's own chunks name, as in the unstreamed answer."""
    filters = {"hate": {"filtered": False, "severity": "safe"}}
    head = {"id": "chatcmpl-az1", "object": "chat.completion.chunk", "created": 1733000000}
    head["model"] = "175b_verification-2024-08-06"
    stream = _events(
        {
            "choices": [],
            "created": 0,
            "id": "",
            "model": "",
            "object": "",
            "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": filters}],
        },
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {**head, "choices": [{"index": 0, "delta": {"content": "A: 18"}}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**head, "choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 4}},
        "[DONE]",
    )
    _serve_once(srv, stream, headers=SSE)
    out = _run(srv, tmp_path, "openai_compatible", client, stream=True)
    row = out.row
    assert row["state"] == "scored" and row["score"] == 1.0
    assert row["served_model"] == "175b_verification-2024-08-06"
    assert (row["input_tokens"], row["output_tokens"]) == (50, 4)


# --------------------------------------------------------------------------------------
# OpenAI-compatible servers' own finish reasons


def _completion(message: dict, finish: str | None, usage: dict | None, **choice: Any) -> dict:
    body: dict[str, Any] = {
        "object": "chat.completion",
        "created": 1,
        "model": "175b_verification",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, **choice}],
    }
    if usage is not None:
        body["usage"] = usage
    return body


SERVER_STOPS = [
    # TGI before 2.2.1 (its OpenAI-compatible Messages API): the model's end-of-sequence
    ("eos_token", "A: 18", "end_turn", False),
    ("eos", "A: 18", "end_turn", False),  # Together AI's open models
    ("stop_sequence", "A: 18", "stop_sequence", False),  # TGI: a stop string matched
    # Mistral: the model's context window ran out, the answer cut (Anthropic's
    # model_context_window_exceeded)
    ("model_length", "Janet sells 16 - 3 - 4 = 9 eggs, so", "max_tokens", True),
    # Zhipu's GLM: the context window ran out
    ("model_context_window_exceeded", "Janet sells 16 - 3 - 4 = 9", "max_tokens", True),
    # gateways passing Gemini's and Claude's own reasons through, in their own case
    ("MAX_TOKENS", "Janet sells 16 - 3", "max_tokens", True),
    ("STOP", "A: 18", "end_turn", False),
    ("end_turn", "A: 18", "end_turn", False),
    ("max_tokens", "Janet sells", "max_tokens", True),
]

WITHHELD = [
    ("sensitive", "", "content_filter", ""),  # GLM: the output was judged sensitive
    ("SAFETY", "", "content_filter", ""),  # Gemini's, through a gateway
    ("PROHIBITED_CONTENT", "", "content_filter", ""),
    ("refusal", "I won't help with that.", "refusal", "I won't help with that."),  # Claude's
]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("raw", "text", "stop", "refusal"), WITHHELD)
def test_open_servers_withheld_answers_are_refusals(
    srv, tmp_path: Path, client: str, raw: str, text: str, stop: str, refusal: str | None
) -> None:
    """A finish reason saying the output was withheld or refused (GLM's sensitive,
    Gemini's SAFETY and kin, Claude's refusal through a gateway) is a refusal under the
    run's refusals policy (before: an ordinary answer with stop reason null, its empty
    text scored as the model's)."""
    message = {"role": "assistant", "content": text}
    _serve_once(srv, _completion(message, raw, {"prompt_tokens": 50, "completion_tokens": 9}))
    out = _run(srv, tmp_path, "openai_compatible", client, run={"refusals": "exclude"})
    row = out.row
    assert (row["stop_reason"], row["raw_stop_reason"]) == (stop, raw)
    assert row["refusal"] == refusal
    assert out.result.manifest.refusals == 1 and row["state"] == "judge_error"


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("raw", "text", "stop", "truncated"), SERVER_STOPS)
def test_open_servers_finish_reasons_are_mapped(
    srv, tmp_path: Path, client: str, raw: str, text: str, stop: str, truncated: bool
) -> None:
    """The finish reasons OpenAI-compatible servers send besides OpenAI's: an end of
    sequence is an ended turn, a matched stop string a stop sequence, and a context
    window that ran out a truncated answer, as Anthropic's is."""
    message = {"role": "assistant", "content": text}
    _serve_once(srv, _completion(message, raw, {"prompt_tokens": 50, "completion_tokens": 9}))
    out = _run(srv, tmp_path, "openai_compatible", client)
    row = out.row
    assert (row["stop_reason"], row["raw_stop_reason"]) == (stop, raw)
    assert row["truncated"] is truncated and out.result.manifest.truncated == int(truncated)


FAILED_MID_ANSWER = [
    # Mistral and OpenRouter: "error if the model finishes the request with an error"
    ("error", {}),
    (  # OpenRouter's choice carries the provider's error
        "error",
        {"error": {"code": 502, "message": "Provider disconnected unexpectedly"}},
    ),
    # DeepSeek: "the request is interrupted due to insufficient resource of the
    # inference system"
    ("insufficient_system_resource", {}),
    ("abort", {}),  # vLLM: the request was aborted mid-generation
    ("network_error", {}),  # GLM: the inference failed
]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("raw", "choice"), FAILED_MID_ANSWER, ids=range(5))
def test_an_answer_a_server_failure_cut_is_retried_never_cached(
    srv, tmp_path: Path, client: str, raw: str, choice: dict
) -> None:
    """A 200 whose finish reason says the server failed while generating holds a cut
    answer: retried (as a stream cut mid-way is), and the real answer scored and cached,
    never the part."""
    message = {"role": "assistant", "content": "Janet sells"}
    usage = {"prompt_tokens": 50, "completion_tokens": 2}
    _serve_once(srv, _completion(message, raw, usage, **choice))
    out = _run(srv, tmp_path, "openai_compatible", client)
    row = out.row
    assert row["state"] == "scored" and row["attempts"] == 2 and row["score"] == 1.0
    assert row["response"] != "Janet sells" and row["stop_reason"] == "end_turn"
    assert len(out.slept) == 1 and out.cached == 1


@pytest.mark.parametrize("client", CLIENTS)
def test_a_stream_a_server_failure_ended_is_retried_never_cached(
    srv, tmp_path: Path, client: str
) -> None:
    """Mistral's stream ends a failed generation with ``finish_reason: error`` (and
    ``[DONE]``): the part is never the answer, the retry's is."""
    head = {"id": "cmpl-1", "object": "chat.completion.chunk", "created": 1}
    head["model"] = "175b_verification"
    stream = _events(
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Janet"}}]},
        {**head, "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}]},
        "[DONE]",
    )
    _serve_once(srv, stream, headers=SSE)
    out = _run(srv, tmp_path, "openai_compatible", client, stream=True)
    row = out.row
    assert row["state"] == "scored" and row["attempts"] == 2 and row["score"] == 1.0
    assert row["response"] != "Janet" and out.cached == 1


# --------------------------------------------------------------------------------------
# the Responses API's hosted tools are billed per call


def _web_searched(query: str) -> dict[str, Any]:
    return {
        "id": "resp_ws",
        "object": "response",
        "status": "completed",
        "model": "175b_verification",
        "output": [
            {
                "type": "web_search_call",
                "id": "ws_1",
                "status": "completed",
                "action": {"type": "search", "query": query},
            },
            {
                "type": "web_search_call",
                "id": "ws_2",
                "status": "completed",
                "action": {"type": "search", "query": query + " price"},
            },
            {
                "type": "message",
                "id": "msg_ws",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "A: 18", "annotations": []}],
            },
        ],
        "usage": {"input_tokens": 100, "output_tokens": 10},
    }


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("fee", [None, 0.01])
def test_responses_web_search_calls_are_counted_and_priced_per_call(
    srv, tmp_path: Path, client: str, fee: float | None
) -> None:
    """A Responses answer's ``web_search_call`` items are server-side tool uses, billed per
    call: counted in ``server_tool_uses``; priced at ``model.price.server_tool_usd``, and
    without a known fee the cost is unknown (None), never the tokens alone."""
    _serve_once(srv, _web_searched("eggs"))
    price = dict(PRICE)
    if fee is not None:
        price["server_tool_usd"] = {"web_search_call": fee}
    spec = gsm8k_spec(
        tmp_path,
        srv,
        "openai_responses",
        http_client=client,
        price=price,
        api_key_required=False,
    )
    out = run_http(spec, tmp_path)
    row = out.row
    assert row["state"] == "scored" and row["score"] == 1.0
    assert row["server_tool_uses"] == {"web_search_call": 2}
    if fee is None:
        assert row["cost_usd"] is None
    else:
        assert row["cost_usd"] == pytest.approx((100 * 1.0 + 10 * 2.0) / 1e6 + 2 * fee)


@pytest.mark.parametrize("client", CLIENTS)
def test_an_answer_of_hosted_tool_calls_only_is_cached_and_scored_not_paid_again(
    srv, tmp_path: Path, client: str
) -> None:
    """A completed Responses answer whose output is a web search and no message (the tool
    ran, the model said nothing after it) is complete and billed: an empty answer, scored
    (0), its tokens and search priced, cached: the run again sends nothing. Before, it was
    a null_content provider_error with no cost, never cached: each run paid for it again
    (2 requests over 2 runs, cost unknown on the row)."""
    searched = _web_searched("eggs")
    searched["output"] = searched["output"][:1]  # the search, no message
    _serve_once(srv, searched)
    price = {**PRICE, "server_tool_usd": {"web_search_call": 0.01}}
    spec = gsm8k_spec(
        tmp_path, srv, "openai_responses", http_client=client, price=price, api_key_required=False
    )
    for run in range(2):
        row = run_http(spec, tmp_path).row
        assert row["state"] == "scored" and row["score"] == 0.0 and row["response"] == ""
        assert row["stop_reason"] == "end_turn" and row["cached"] is bool(run)
        assert row["server_tool_uses"] == {"web_search_call": 1}
        assert row["cost_usd"] == pytest.approx((100 * 1.0 + 10 * 2.0) / 1e6 + 0.01)
        assert srv.stats()["total"] == 1


@pytest.mark.parametrize("client", CLIENTS)
def test_an_answer_with_nothing_in_its_output_stays_an_error(
    srv, tmp_path: Path, client: str
) -> None:
    """An output with no message, refusal, function call or hosted tool item has nothing
    to score: a null_content provider_error, never cached."""
    empty = {**_web_searched("eggs"), "output": [{"type": "reasoning", "id": "rs_1"}]}
    _serve_once(srv, empty)
    spec = gsm8k_spec(tmp_path, srv, "openai_responses", http_client=client, api_key_required=False)
    out = run_http(spec, tmp_path)
    assert out.row["state"] == "provider_error" and out.cached == 0
    assert out.row["error"]["error_type"] == "null_content"


# --------------------------------------------------------------------------------------
# shapes read right already, kept so they stay so

RETRIED = [
    (  # a proxy's 503 page: HTML, no JSON
        "openai_compatible",
        503,
        "<html><head><title>503 Service Temporarily Unavailable</title></head><body>"
        "<center><h1>503 Service Temporarily Unavailable</h1></center></body></html>",
        {"content-type": "text/html", "retry-after": "7"},
        7.0,
    ),
    (  # OpenAI's milliseconds header wins over the seconds one
        "openai_compatible",
        429,
        {
            "error": {
                "message": "Rate limit reached for gpt-4o-mini on tokens per min (TPM).",
                "type": "tokens",
                "param": None,
                "code": "rate_limit_exceeded",
            }
        },
        {"retry-after-ms": "250", "retry-after": "1"},
        0.25,
    ),
    (
        "anthropic",
        529,
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        {"x-should-retry": "true"},
        None,
    ),
    (  # Anthropic's 504 timeout_error
        "anthropic",
        504,
        {"type": "error", "error": {"type": "timeout_error", "message": "Request timed out"}},
        None,
        None,
    ),
]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("protocol", "status", "body", "headers", "wait"), RETRIED, ids=range(4))
def test_transient_errors_are_retried_after_the_wait_asked(
    srv, tmp_path: Path, client: str, protocol: str, status: int, body: Any, headers, wait
) -> None:
    """A server's failure, an overload or a per-minute limit is retried, after the wait
    the server asked for when it asked."""
    _serve_once(srv, body, status, headers)
    out = _run(srv, tmp_path, protocol, client)
    assert out.row["state"] == "scored" and out.row["attempts"] == 2
    assert len(out.slept) == 1
    if wait is not None:
        assert out.slept[0] == pytest.approx(wait)


@pytest.mark.parametrize("client", CLIENTS)
def test_an_open_servers_bare_answer_is_read(srv, tmp_path: Path, client: str) -> None:
    """vLLM / llama.cpp style: no ``id``, ``finish_reason: null``, no ``usage``: the text
    is the answer, its stop reason unknown, its tokens 0 (counted as missing usage)."""
    body = {"object": "chat.completion", "model": "175b_verification", "created": 1}
    body["choices"] = [
        {"index": 0, "message": {"role": "assistant", "content": "A: 18"}, "finish_reason": None}
    ]
    _serve_once(srv, body)
    out = _run(srv, tmp_path, "openai_compatible", client)
    row = out.row
    assert row["state"] == "scored" and row["score"] == 1.0 and row["stop_reason"] is None
    assert (row["input_tokens"], row["output_tokens"]) == (0, 0)


NOT_ANSWERS = [
    {"id": "chatcmpl-1", "object": "chat.completion", "model": "m", "choices": []},
    {"id": "chatcmpl-1", "object": "chat.completion", "model": "m", "choices": None},
]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("body", NOT_ANSWERS, ids=range(2))
def test_no_choices_is_never_an_answer(srv, tmp_path: Path, client: str, body: dict) -> None:
    """A 200 with an empty (or null) choices list holds no answer: an error row, nothing
    cached."""
    _serve_once(srv, {**body, "usage": None})
    out = _run(srv, tmp_path, "openai_compatible", client)
    row = out.row
    assert row["state"] == "provider_error" and row["error"]["kind"] == "InvalidResponse"
    assert out.cached == 0


@pytest.mark.parametrize("client", CLIENTS)
def test_usage_details_are_read(srv, tmp_path: Path, client: str) -> None:
    """``prompt_tokens_details.cached_tokens`` are cached input (out of ``prompt_tokens``)
    and ``completion_tokens_details.reasoning_tokens`` reasoning (of the output); null
    detail objects read as 0."""
    usage = {
        "prompt_tokens": 2006,
        "completion_tokens": 300,
        "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 256,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }
    message = {"role": "assistant", "content": "A: 18", "refusal": None, "annotations": []}
    body = {
        "id": "chatcmpl-2",
        "object": "chat.completion",
        "created": 1,
        "model": "175b_verification",
        "service_tier": "default",
        "system_fingerprint": None,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}],
        "usage": usage,
    }
    _serve_once(srv, body)
    out = _run(srv, tmp_path, "openai_compatible", client)
    row = out.row
    assert (row["input_tokens"], row["cached_input_tokens"]) == (2006, 1920)
    assert (row["output_tokens"], row["reasoning_tokens"]) == (300, 256)
    assert row["cost_usd"] == pytest.approx((86 * 1.0 + 1920 * 0.1 + 300 * 2.0) / 1e6)


@pytest.mark.parametrize("client", CLIENTS)
def test_deepseeks_cache_hits_are_cached_input(srv, tmp_path: Path, client: str) -> None:
    """DeepSeek counts its prompt-cache hits in ``prompt_cache_hit_tokens`` (and misses in
    ``prompt_cache_miss_tokens``), with no ``prompt_tokens_details``: the hits are cached
    input (before: 0, all 1500 prompt tokens priced as fresh input)."""
    usage = {
        "prompt_tokens": 1500,
        "completion_tokens": 40,
        "total_tokens": 1540,
        "prompt_cache_hit_tokens": 1280,
        "prompt_cache_miss_tokens": 220,
    }
    message = {"role": "assistant", "content": "A: 18"}
    _serve_once(srv, _completion(message, "stop", usage))
    out = _run(srv, tmp_path, "openai_compatible", client)
    row = out.row
    assert (row["input_tokens"], row["cached_input_tokens"]) == (1500, 1280)
    assert row["cost_usd"] == pytest.approx((220 * 1.0 + 1280 * 0.1 + 40 * 2.0) / 1e6)


@pytest.mark.parametrize("client", CLIENTS)
def test_tool_call_arguments_that_are_not_json_are_kept_and_flagged(
    srv, tmp_path: Path, client: str
) -> None:
    """A tool call whose arguments are cut JSON: the call is recorded with its raw text and
    why it is not an object, never dropped or crashed on."""
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "calculator", "arguments": '{"expression": "16 - 3'},
    }
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    _serve_once(
        srv, _completion(message, "tool_calls", {"prompt_tokens": 5, "completion_tokens": 5})
    )
    out = _run(srv, tmp_path, "openai_compatible", client)
    row = out.row
    assert row["stop_reason"] == "tool_use" and row["response"] == ""


# --------------------------------------------------------------------------------------
# an overload is an overload, whether its status says so or a stream's error event


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("streamed", [False, True])
def test_an_overload_slows_the_run_however_it_arrives(
    srv, tmp_path: Path, client: str, streamed: bool
) -> None:
    """Anthropic's ``overloaded_error`` as a 529, or as the ``error`` event of a stream
    already answered 200 (how a streamed request learns of it): either is retried and
    counted by the throttle as a signal to send less."""
    import gradetrail
    from gradetrail.executors.local import LocalExecutor
    from gradetrail.executors.retry import RetryPolicy
    from gradetrail.providers import make_provider
    from gradetrail.testing import FakeClock

    if streamed:
        fault = {"kind": "stream_cut", "tokens": 2, "type": "overloaded_error", "first": 2}
    else:
        fault = {"kind": "overloaded", "first": 2, "retry_after": None}
    srv.configure(faults=[fault])
    spec = gsm8k_spec(tmp_path, srv, "anthropic", http_client=client, stream=streamed)
    provider = make_provider(spec.model, spec.base_dir)
    provider.check_ready()
    clock = FakeClock()
    executor = LocalExecutor(
        provider, RetryPolicy(max_retries=3), 4, sleep=clock.sleep, clock=clock.now
    )
    result = gradetrail.run_eval(
        spec, results_root=tmp_path / "r", cache_path=tmp_path / "c", executor=executor
    )
    assert result.manifest.counts == {"scored": 1}
    seen = executor.throttle_stats()
    assert seen is not None and seen.throttled == 2


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("protocol", "status", "body", "headers", "wait"), RETRIED, ids=range(4))
def test_a_streamed_requests_error_status_is_read_as_unstreamed(
    srv, tmp_path: Path, client: str, protocol: str, status: int, body: Any, headers, wait
) -> None:
    """The same error statuses answering a streamed request: the same classification and
    the same wait."""
    _serve_once(srv, body, status, headers)
    out = _run(srv, tmp_path, protocol, client, stream=True)
    assert out.row["state"] == "scored" and out.row["attempts"] == 2
    assert len(out.slept) == 1
    if wait is not None:
        assert out.slept[0] == pytest.approx(wait)


# --------------------------------------------------------------------------------------
# reasoning tokens counted apart from completion_tokens


@pytest.mark.parametrize("client", CLIENTS)
def test_reasoning_tokens_reported_apart_from_completion_tokens_are_output(
    srv, tmp_path: Path, client: str
) -> None:
    """xAI's Grok (and Grok on Vertex AI) report ``reasoning_tokens`` "separated from the
    completion_tokens": ``total_tokens`` is prompt + completion + reasoning. The reasoning
    is output all the same, billed at the output rate: output is 9 + 94 tokens, never 9
    (with the 94 reasoning tokens cut to 9)."""
    usage = {
        "prompt_tokens": 32,
        "completion_tokens": 9,
        "total_tokens": 135,
        "prompt_tokens_details": {"text_tokens": 32, "cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 94, "audio_tokens": 0},
    }
    message = {"role": "assistant", "content": "A: 18", "refusal": None}
    _serve_once(srv, _completion(message, "stop", usage))
    out = _run(srv, tmp_path, "openai_compatible", client)
    row = out.row
    assert (row["input_tokens"], row["output_tokens"], row["reasoning_tokens"]) == (32, 103, 94)
    assert row["cost_usd"] == pytest.approx((32 * 1.0 + 103 * 2.0) / 1e6)


@pytest.mark.parametrize("client", CLIENTS)
def test_a_capacity_answer_under_a_4xx_status_is_retried(srv, tmp_path: Path, client: str) -> None:
    """Groq's flex tier answers 498, its own status, with error ``capacity_exceeded`` when
    it is at capacity ("You can try again later"): a server's capacity, retried, not a
    bad request recorded at once."""
    body = {
        "error": {
            "message": "The flex tier is at capacity and the request won't be processed. "
            "You can try again later.",
            "code": "capacity_exceeded",
        }
    }
    _serve_once(srv, body, 498)
    out = _run(srv, tmp_path, "openai_compatible", client)
    assert out.row["state"] == "scored" and out.row["attempts"] == 2 and len(out.slept) == 1


# --------------------------------------------------------------------------------------
# what is sent: one authentication for both clients


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("stream", [False, True])
def test_both_clients_send_the_anthropic_key_as_x_api_key(
    srv, tmp_path: Path, client: str, stream: bool
) -> None:
    """The Messages API takes its key in ``x-api-key`` (the server refuses anything else,
    as the lean client sends it); the installed SDK's own default is ``Authorization:
    Bearer``, which the SDK client must not send instead."""
    srv.configure(api_key=SECRET_KEY)
    out = _run(srv, tmp_path, "anthropic", client, stream=stream)
    assert out.row["state"] == "scored" and out.row["attempts"] == 1


@pytest.fixture
def header_server():
    """A local server answering every POST with one chat completion (or Messages or
    Responses answer) and keeping each request's headers, names lower-cased."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            seen.append({name.lower(): value for name, value in self.headers.items()})
            message = {"role": "assistant", "content": "A: 18"}
            if self.path.endswith("/messages"):
                usage = {"input_tokens": 5, "output_tokens": 3}
                text = [{"type": "text", "text": "A: 18"}]
                body: dict[str, Any] = {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "model": "175b_verification",
                    "content": text,
                    "stop_reason": "end_turn",
                    "usage": usage,
                }
            elif self.path.endswith("/responses"):
                part = {"type": "output_text", "text": "A: 18", "annotations": []}
                body = {
                    "id": "resp_1",
                    "object": "response",
                    "status": "completed",
                    "model": "175b_verification",
                    "output": [{"type": "message", "role": "assistant", "content": [part]}],
                    "usage": {"input_tokens": 5, "output_tokens": 3},
                }
            else:
                body = _completion(message, "stop", {"prompt_tokens": 5, "completion_tokens": 3})
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("protocol", ["openai_compatible", "openai_responses"])
def test_openai_organization_and_project_never_reach_another_server(
    header_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client: str, protocol: str
) -> None:
    """``OPENAI_ORG_ID`` / ``OPENAI_PROJECT_ID`` are sent to OpenAI only: an
    OpenAI-compatible server gets neither header, from either client (the SDK reads both
    variables by itself)."""
    monkeypatch.setenv("OPENAI_ORG_ID", "org-TESTORG")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj_TESTPROJ")
    url, seen = header_server
    spec = gsm8k_spec(
        tmp_path, None, protocol, http_client=client, base_url=url + "/v1", api_key_required=False
    )
    out = run_http(spec, tmp_path)
    assert out.row["state"] == "scored" and len(seen) == 1
    assert not set(seen[0]) & {"openai-organization", "openai-project"}


@pytest.mark.parametrize("client", CLIENTS)
def test_the_anthropic_sdks_environment_headers_are_not_sent(
    header_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client: str
) -> None:
    """The anthropic SDK adds ``ANTHROPIC_CUSTOM_HEADERS`` (lines of ``Name: value``) to
    every request by itself; gradetrail sends ``model.headers`` only (they are in the
    run's identity), from either client, as it ignores ``ANTHROPIC_BASE_URL``."""
    monkeypatch.setenv("ANTHROPIC_CUSTOM_HEADERS", "X-Gateway-Route: eu-1\nX-Team: evals")
    url, seen = header_server
    spec = gsm8k_spec(tmp_path, None, "anthropic", http_client=client, base_url=url)
    out = run_http(spec, tmp_path)
    assert out.row["state"] == "scored" and len(seen) == 1
    assert not set(seen[0]) & {"x-gateway-route", "x-team"}
    assert seen[0]["x-api-key"] == SECRET_KEY and "authorization" not in seen[0]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("protocol", ["openai_compatible", "openai_responses"])
def test_the_openai_sdks_environment_headers_are_not_sent(
    header_server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    client: str,
    protocol: str,
) -> None:
    """The openai SDK adds ``OPENAI_CUSTOM_HEADERS`` to every request by itself, an
    ``Authorization`` line there replacing the key it was given: the server gets the
    run's own key (``model.api_key_env``) and none of those headers, from either client."""
    other = "sk-ambient-OTHER-0123456789"
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", f"X-Team: evals\nAuthorization: Bearer {other}")
    monkeypatch.setenv("SERVER_KEY", SECRET_KEY)
    url, seen = header_server
    spec = gsm8k_spec(
        tmp_path,
        None,
        protocol,
        http_client=client,
        base_url=url + "/v1",
        api_key_env="SERVER_KEY",
    )
    out = run_http(spec, tmp_path)
    assert out.row["state"] == "scored" and len(seen) == 1
    assert seen[0]["authorization"] == f"Bearer {SECRET_KEY}" and "x-team" not in seen[0]


# --------------------------------------------------------------------------------------
# Mistral's reasoning models: content is a list of thinking and text chunks


def _thinking(text: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": [{"type": "text", "text": text}]}


MISTRAL_REASONING = [
    (
        [_thinking("16 - 3 - 4 = 9 eggs, at $2 each."), {"type": "text", "text": "A: 18"}],
        "stop",
        "A: 18",
        False,
    ),
    ([_thinking("16 - 3 - 4 = 9 eggs, at")], "length", "", True),  # ran out while thinking
]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("content", "finish", "text", "exhausted"), MISTRAL_REASONING)
def test_mistral_thinking_chunks_are_reasoning(
    srv, tmp_path: Path, client: str, content: list, finish: str, text: str, exhausted: bool
) -> None:
    """Magistral (and Mistral models with reasoning_effort) answer ``content`` as a list
    of ``thinking`` chunks (their own text chunks inside) and ``text`` chunks: the thinking
    is the row's reasoning, the text its response, and a turn cut while still thinking
    is reasoning_exhausted, as every other provider's."""
    usage = {"prompt_tokens": 40, "completion_tokens": 12}
    _serve_once(srv, _completion({"role": "assistant", "content": content}, finish, usage))
    out = _run(srv, tmp_path, "openai_compatible", client)
    row = out.row
    assert row["response"] == text and row["reasoning"].startswith("16 - 3 - 4 = 9 eggs, at")
    assert row.get("reasoning_exhausted", False) is exhausted


@pytest.mark.parametrize("client", CLIENTS)
def test_mistral_streamed_thinking_chunks_are_reasoning_and_text(
    srv, tmp_path: Path, client: str
) -> None:
    """Streamed, Mistral's ``delta.content`` is itself a list of chunks: the thinking
    pieces make the reasoning and the text pieces the answer, as unstreamed."""
    head = {"id": "cmpl-m", "object": "chat.completion.chunk", "created": 1}
    head["model"] = "175b_verification"

    def chunk(content: Any, finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": {"content": content}, "finish_reason": finish}
        return {**head, "choices": [choice]}

    stream = _events(
        chunk([_thinking("16 - 3 - 4 = 9 eggs,")]),
        chunk([_thinking(" at $2 each.")]),
        chunk([{"type": "text", "text": "A: "}]),
        chunk("18"),
        {**chunk("", "stop"), "usage": {"prompt_tokens": 40, "completion_tokens": 12}},
        "[DONE]",
    )
    _serve_once(srv, stream, headers=SSE)
    out = _run(srv, tmp_path, "openai_compatible", client, stream=True)
    row = out.row
    assert row["response"] == "A: 18" and row["score"] == 1.0
    assert row["reasoning"] == "16 - 3 - 4 = 9 eggs, at $2 each."


# --------------------------------------------------------------------------------------
# the Responses API's reasoning items with their text in content (gpt-oss on vLLM)


def _reasoned(output: list[dict[str, Any]], status: str, reason: str | None) -> dict:
    return {
        "id": "resp_r",
        "object": "response",
        "status": status,
        "incomplete_details": {"reason": reason} if reason else None,
        "model": "175b_verification",
        "output": output,
        "usage": {"input_tokens": 30, "output_tokens": 20},
    }


REASONING_ITEM = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [],
    "content": [{"type": "reasoning_text", "text": "16 - 3 - 4 = 9 eggs, at $2 each"}],
}
ANSWER_ITEM = {
    "type": "message",
    "id": "msg_r",
    "status": "completed",
    "role": "assistant",
    "content": [{"type": "output_text", "text": "A: 18", "annotations": []}],
}


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(
    ("output", "status", "reason", "text", "exhausted"),
    [
        ([REASONING_ITEM, ANSWER_ITEM], "completed", None, "A: 18", False),
        ([REASONING_ITEM], "incomplete", "max_output_tokens", "", True),
    ],
    ids=["answered", "ran-out"],
)
def test_responses_reasoning_text_in_content_is_the_reasoning(
    srv,
    tmp_path: Path,
    client: str,
    output: list,
    status: str,
    reason: str | None,
    text: str,
    exhausted: bool,
) -> None:
    """A reasoning item may carry its text in ``content`` (``reasoning_text`` parts, as
    vLLM's gpt-oss answers: raw reasoning, no summary): it is the row's reasoning, and a
    response that ran out while reasoning is reasoning_exhausted."""
    _serve_once(srv, _reasoned(output, status, reason))
    out = _run(srv, tmp_path, "openai_responses", client, api_key_required=False)
    row = out.row
    assert row["response"] == text and row["reasoning"] == "16 - 3 - 4 = 9 eggs, at $2 each"
    assert row.get("reasoning_exhausted", False) is exhausted


# --------------------------------------------------------------------------------------
# Google's error envelope: a JSON list holding the error object


@pytest.mark.parametrize("client", CLIENTS)
def test_an_error_body_in_a_list_keeps_its_message_and_code(
    srv, tmp_path: Path, client: str
) -> None:
    """Gemini's OpenAI-compatible endpoint answers errors as a JSON list of one error
    object (``[{"error": {"code", "message", "status"}}]``): the row keeps its message
    and code, never "no message"."""
    body = [
        {
            "error": {
                "code": 400,
                "message": "Request contains an invalid argument.",
                "status": "INVALID_ARGUMENT",
            }
        }
    ]
    _serve_once(srv, body, 400)
    out = _run(srv, tmp_path, "openai_compatible", client)
    error = out.row["error"]
    assert out.row["attempts"] == 1 and error["kind"] == "BadRequest"
    assert "Request contains an invalid argument." in error["message"]
    assert error["code"] == "400"


@pytest.mark.parametrize("client", CLIENTS)
def test_a_streamed_pause_turn_is_continued_as_an_unstreamed_one(
    srv, tmp_path: Path, client: str
) -> None:
    """A streamed answer the API paused (its server tool's input built from
    ``input_json_delta`` pieces, the first of them empty, as the API sends it) is sent
    back and continued, its web searches billed."""
    usage = {"input_tokens": 1000, "output_tokens": 1, "cache_read_input_tokens": 0}
    message = {
        "id": "msg_p",
        "type": "message",
        "role": "assistant",
        "model": "175b_verification",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    tool = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
    result = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []}
    stream = _events(
        {"type": "message_start", "message": message},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "Searching first. "},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": tool},
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": ""},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"query": "eggs"}'},
        },
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2, "content_block": result},
        {"type": "content_block_stop", "index": 2},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "pause_turn", "stop_sequence": None},
            "usage": {"output_tokens": 50, "server_tool_use": {"web_search_requests": 1}},
        },
        {"type": "message_stop"},
        named=True,
    )
    _serve_once(srv, stream, headers=SSE)
    out = _run(srv, tmp_path, "anthropic", client, stream=True, pause_turn_continuations=2)
    row = out.row
    assert row["state"] == "scored" and row["response"].startswith("Searching first. ")
    assert row["stop_reason"] == "end_turn" and row["server_tool_uses"] == {
        "web_search_requests": 1
    }


@pytest.mark.parametrize("client", CLIENTS)
def test_a_stream_with_no_choice_is_no_answer(srv, tmp_path: Path, client: str) -> None:
    """A stream whose only chunk is the usage one (``choices: []``) answered nothing, as a
    non-streamed ``choices: []`` did not (before: an empty answer, scored 0 and cached)."""
    head = {"id": "cmpl-1", "object": "chat.completion.chunk", "created": 1}
    usage = {"prompt_tokens": 50, "completion_tokens": 0, "total_tokens": 50}
    _serve_once(srv, _events({**head, "choices": [], "usage": usage}, "[DONE]"), headers=SSE)
    out = _run(srv, tmp_path, "openai_compatible", client, stream=True)
    row = out.row
    assert row["state"] == "provider_error" and row["attempts"] == 1
    assert row["error"]["kind"] == "InvalidResponse" and "no choices" in row["error"]["message"]
    assert out.cached == 0


@pytest.mark.parametrize("client", CLIENTS)
def test_an_error_event_holding_the_bare_error_is_read_by_its_words(
    srv, tmp_path: Path, client: str
) -> None:
    """An ``event: error`` whose data is the error object itself (no envelope) is read by
    its words: an overloaded server is retried (before: "200 answer has no choices",
    recorded at once)."""
    head = {"id": "cmpl-1", "object": "chat.completion.chunk", "created": 1}
    first = {**head, "choices": [{"index": 0, "delta": {"content": "Janet"}}]}
    stream = _events(first) + 'event: error\ndata: {"message": "The model is overloaded"}\n\n'
    _serve_once(srv, stream, headers=SSE)
    out = _run(srv, tmp_path, "openai_compatible", client, stream=True)
    row = out.row
    assert row["state"] == "scored" and row["attempts"] == 2 and row["score"] == 1.0
    assert len(out.slept) == 1 and out.cached == 1


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("protocol", ["openai_compatible", "anthropic"])
def test_a_whole_answer_to_a_streamed_request_is_read(
    srv, tmp_path: Path, client: str, protocol: str
) -> None:
    """A server that ignores ``stream: true`` and sends the whole JSON answer is read as
    that answer (before: a stream cut before its end, retried, and failed on every
    attempt at such a server, each one billed)."""
    if protocol == "anthropic":
        body: dict[str, Any] = {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "175b_verification",
            "content": [{"type": "text", "text": "A: 18"}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 40, "output_tokens": 4},
        }
    else:
        message = {"role": "assistant", "content": "A: 18"}
        body = _completion(message, "stop", {"prompt_tokens": 40, "completion_tokens": 4})
    _serve_once(srv, body, headers={"content-type": "application/json"})
    out = _run(srv, tmp_path, protocol, client, stream=True)
    row = out.row
    assert row["state"] == "scored" and row["attempts"] == 1 and row["score"] == 1.0
    assert (row["input_tokens"], row["output_tokens"]) == (40, 4) and out.slept == []


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("end", ["\r", "\r\n"], ids=["cr", "crlf"])
def test_a_stream_of_any_sse_line_end_reads_alike(
    srv, tmp_path: Path, client: str, end: str
) -> None:
    """The SSE format ends lines with CRLF, LF or a lone CR, and the SDK's HTTPX reads all
    three: every client reads a stream of lone-CR line ends as the SDK does (before: the
    aiohttp and plain clients saw one line, no event, and retried a cut stream)."""
    head = {"id": "cmpl-1", "object": "chat.completion.chunk", "created": 1}
    chunks = [
        {**head, "choices": [{"index": 0, "delta": {"content": "A: 18"}}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**head, "choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": 4}},
    ]
    stream = "".join(f"data: {json.dumps(c)}{end}{end}" for c in chunks)
    _serve_once(srv, stream + f"data: [DONE]{end}{end}", headers=SSE)
    out = _run(srv, tmp_path, "openai_compatible", client, stream=True)
    row = out.row
    assert row["state"] == "scored" and row["attempts"] == 1 and row["response"] == "A: 18"
    assert (row["input_tokens"], row["output_tokens"]) == (30, 4)


@pytest.mark.parametrize("client", CLIENTS)
def test_thoughts_counted_only_in_the_total_are_reasoning_output(
    srv, tmp_path: Path, client: str
) -> None:
    """Gemini's OpenAI-compatible endpoint counts a thinking model's thoughts in
    ``total_tokens`` (and bills them as output) but in neither ``completion_tokens`` nor a
    reasoning detail: the rest of the total is reasoning output (before: 24 output
    tokens for an answer billed 596, its cost a twentieth of the bill)."""
    usage = {"prompt_tokens": 20, "completion_tokens": 24, "total_tokens": 616}
    _serve_once(srv, _completion({"role": "assistant", "content": "A: 18"}, "stop", usage))
    out = _run(srv, tmp_path, "openai_compatible", client)
    row = out.row
    assert (row["output_tokens"], row["reasoning_tokens"]) == (596, 572)
    assert row["cost_usd"] == pytest.approx((20 * 1.0 + 596 * 2.0) / 1e6)
