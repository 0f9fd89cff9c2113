"""The answers real APIs send that a GSM8K reply does not (issue 21), through both HTTP
clients (the lean aiohttp one and the official SDKs) against the local protocol server:
rate limits of other wordings, pause_turn, refusals of every shape, cache writes,
server-tool fees, reasoning tokens and text. The bodies are written here in the shapes the
APIs document; each is served once by the server's ``answer`` fault, and the row, the
retries and the summary are checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from http_support import SECRET_KEY
from http_support import run_priced as _run
from http_support import serve_once as _serve_once
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

server = protocol_server_fixture(scope="module", name="server")
srv = fresh_protocol_server_fixture("server", name="srv")

CLIENTS = ("aiohttp", "sdk")


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_KEY)


# --------------------------------------------------------------------------------------
# rate limits: the code and type decide; a link in the message never does

RETRIED_429 = [
    (  # a per-minute request limit whose message sends a free account to its billing page
        "openai_compatible",
        {
            "error": {
                "message": "Rate limit reached on requests per min (limit 3). Add a payment "
                "method at https://platform.example.com/account/billing to raise it.",
                "type": "requests",
                "param": None,
                "code": "rate_limit_exceeded",
            }
        },
    ),
    (  # Azure's envelope: the code is the status, the message links a quota page
        "openai_compatible",
        {
            "error": {
                "code": "429",
                "message": "Token rate limit of your pricing tier exceeded; retry after 1 "
                "second. To ask for more quota go to https://aka.ms/oai/quotaincrease.",
            }
        },
    ),
    (  # Anthropic's input-tokens-per-minute limit, pointing at sales and billing pages
        "anthropic",
        {
            "type": "error",
            "error": {
                "type": "rate_limit_error",
                "message": "This request would exceed your input tokens per minute. See "
                "https://console.example.com/settings/billing or contact sales.",
            },
        },
    ),
    (  # OpenRouter's per-minute cap on free models, named by its id
        "openai_compatible",
        {"error": {"message": "Rate limit exceeded: free-models-per-min.", "code": 429}},
    ),
    (  # no type, no code: the message is read without its link
        "openai_compatible",
        {"error": {"message": "Too many requests, see https://example.com/quota/billing"}},
    ),
    (  # Google's list envelope, no details: the code is the status, "quota" says nothing
        "openai_compatible",
        [
            {
                "error": {
                    "code": 429,
                    "message": "Resource exhausted (check quota).",
                    "status": "RESOURCE_EXHAUSTED",
                }
            }
        ],
    ),
]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("protocol", "body"), RETRIED_429, ids=range(len(RETRIED_429)))
def test_rate_limits_are_retried_whatever_their_message_links(
    srv, tmp_path: Path, client: str, protocol: str, body: dict
) -> None:
    """A per-minute 429 is waited out and retried, then the real answer is scored, even
    when its message links a billing or quota page."""
    _serve_once(srv, body, 429)
    out = _run(srv, tmp_path, protocol, client)
    assert out.row["state"] == "scored" and out.row["attempts"] == 2
    assert len(out.slept) == 1 and out.cached == 1


PERMANENT_429 = [
    (
        "openai_compatible",
        {"error": {"message": "Out of quota: check your plan.", "code": "insufficient_quota"}},
        "insufficient_quota",
    ),
    (  # Anthropic's exhausted credit, as a 429 with the generic request type
        "anthropic",
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "Your credit balance is too low; buy credits under Plans & Billing.",
            },
        },
        None,
    ),
    ("openai_compatible", {"error": {"message": "This account is out of credits."}}, None),
]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("protocol", "body", "code"), PERMANENT_429, ids=range(3))
def test_exhausted_quota_is_permanent(
    srv, tmp_path: Path, client: str, protocol: str, body: dict, code: str | None
) -> None:
    """A 429 that means the quota or credit is gone is recorded at once."""
    _serve_once(srv, body, 429)
    out = _run(srv, tmp_path, protocol, client)
    error = out.row["error"]
    assert out.row["state"] == "provider_error" and out.row["attempts"] == 1
    assert (error["kind"], error["transient"], error["code"]) == ("RateLimited", False, code)
    assert out.slept == []


def _google(message: str) -> list[dict]:
    return [{"error": {"code": 429, "message": message, "status": "RESOURCE_EXHAUSTED"}}]


QUOTA_429 = [
    (  # Gemini: the billing account's monthly cap (its code is only the status)
        _google(
            "Your billing account went over its monthly spending cap. Manage billing at "
            "https://studio.example.com/billing."
        ),
        "spend_cap",
        "spend cap",
    ),
    (
        _google("Your prepayment credits are depleted. Top up at https://studio.example.com."),
        "credit",
        "prepaid credit or balance",
    ),
    (  # OpenAI's hard project spend limit
        {
            "error": {
                "message": "This project reached its hard spend limit.",
                "type": "insufficient_quota",
                "code": "project_spend_limit_exceeded",
            }
        },
        "spend_cap",
        "spend cap",
    ),
    (  # OpenRouter's daily cap on free models, in rate-limit words, named by its id
        {
            "error": {
                "message": "Rate limit exceeded: free-models-per-day. Buy credits for more.",
                "code": 429,
                "metadata": {"headers": {"X-RateLimit-Remaining": "0"}},
            }
        },
        "daily",
        "per-day quota",
    ),
    (  # Google's per-day quota named in the message only
        _google(
            "Quota exceeded for quota metric 'Requests' and limit 'Requests per day per "
            "project' of service 'example.googleapis.com'."
        ),
        "daily",
        "per-day quota",
    ),
]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("body", "quota", "words"), QUOTA_429, ids=range(len(QUOTA_429)))
def test_a_quota_that_will_not_come_back_stops_the_run(
    srv, tmp_path: Path, client: str, body: Any, quota: str, words: str
) -> None:
    """A 429 saying a spend cap, prepaid credit or a per-day quota ran out is not
    retried, says which on its row, and stops the run (interrupted, the reason kept)."""
    _serve_once(srv, body, 429)
    out = _run(srv, tmp_path, "openai_compatible", client)
    error = out.row["error"]
    assert (out.row["attempts"], error["transient"], error["quota"]) == (1, False, quota)
    assert out.slept == []
    manifest = out.result.manifest
    assert manifest.status == "interrupted"
    assert manifest.stop_reason.startswith(f"stopped: the provider says its {words} ran out")


def _anthropic_error(etype: str, message: str, **error: Any) -> dict[str, Any]:
    return {"type": "error", "error": {"type": etype, "message": message, **error}}


SPEND_LIMITS = [
    (  # the organization's own spend limit, under the rate-limit type
        429,
        _anthropic_error(
            "rate_limit_error",
            "You have reached your specified API usage limits. You will regain access on "
            "2031-03-01 at 00:00 UTC.",
        ),
        {"x-should-retry": "true"},
        "spend_cap",
    ),
    (  # the usage tier's monthly cap: said by the details' error code alone
        429,
        _anthropic_error(
            "rate_limit_error",
            "Usage is paused for this organization.",
            details={"error_code": "enforced_spend_limit_reached"},
        ),
        {"x-should-retry": "true"},
        "spend_cap",
    ),
    (  # a workspace's limit, worded without the date access comes back
        400,
        _anthropic_error(
            "invalid_request_error", "You have reached your specified workspace API usage limits."
        ),
        None,
        "spend_cap",
    ),
    (  # Anthropic's billing error: a 402, Payment Required, whatever its words
        402,
        _anthropic_error("billing_error", "The payment method on file was declined."),
        None,
        "credit",
    ),
    (  # Fireworks: a suspended account, under 412 Precondition Failed
        412,
        {
            "error": {
                "message": "Account acme-1 is suspended, possibly due to reaching the monthly "
                "spending limit or failure to pay past invoices."
            }
        },
        None,
        "spend_cap",
    ),
    (  # xAI: a team with no credits, under 403, its code a sentence
        403,
        {
            "code": "The caller may not run this operation",
            "error": "This new team does not have any credits yet. Buy credits in the console.",
        },
        None,
        "credit",
    ),
    (  # OpenAI's prepaid credit, said by its code
        429,
        {
            "error": {
                "type": "insufficient_quota",
                "code": "credit_balance_exhausted",
                "message": "No prepaid balance is left.",
            }
        },
        None,
        "credit",
    ),
]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(
    ("status", "body", "headers", "quota"), SPEND_LIMITS, ids=range(len(SPEND_LIMITS))
)
def test_a_spend_limit_stops_the_run_whatever_type_it_comes_under(
    srv, tmp_path: Path, client: str, status: int, body: dict, headers: Any, quota: str
) -> None:
    """A spend limit or exhausted credit sent as a 429 rate_limit_error (even with the
    generic x-should-retry: true) or as a 400 stops the run at once, resumable (exit 3),
    instead of being retried as a per-minute limit."""
    _serve_once(srv, body, status, headers)
    protocol = "anthropic" if body.get("type") == "error" else "openai_compatible"
    out = _run(srv, tmp_path, protocol, client)
    error = out.row["error"]
    assert (out.row["attempts"], error["transient"], error["quota"]) == (1, False, quota)
    assert out.slept == []
    assert out.result.manifest.status == "interrupted"


@pytest.mark.parametrize("client", CLIENTS)
def test_a_key_gemini_refuses_under_400_is_an_auth_error(srv, tmp_path: Path, client: str) -> None:
    """Gemini's OpenAI-compatible endpoint answers a bad key with 400 INVALID_ARGUMENT and
    an ErrorInfo reason API_KEY_INVALID: an auth error naming where the key comes from."""
    body = [
        {
            "error": {
                "code": 400,
                "message": "The key given is not valid; pass a valid one.",
                "status": "INVALID_ARGUMENT",
                "details": [
                    {
                        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                        "reason": "API_KEY_INVALID",
                    }
                ],
            }
        }
    ]
    _serve_once(srv, body, 400)
    out = _run(srv, tmp_path, "openai_compatible", client)
    error = out.row["error"]
    assert (error["kind"], error["status"], error["transient"]) == ("AuthError", 400, False)
    assert "model.api_key_env" in error["message"]


# --------------------------------------------------------------------------------------
# stop reasons, refusals, billing fields, reasoning


def _message(content: list[dict], stop: str, usage: dict, **more: Any) -> dict:
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": "175b_verification",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage,
        **more,
    }


def _completion(message: dict, finish: str, usage: dict) -> dict:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1,
        "model": "175b_verification",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    }


PAUSED_CONTENT = [
    {"type": "text", "text": "Searching first. "},
    {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
    {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
]
PAUSED_USAGE = {
    "input_tokens": 1000,
    "output_tokens": 50,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
    "server_tool_use": {"web_search_requests": 3, "web_fetch_requests": 0},
}


@pytest.mark.parametrize("client", CLIENTS)
def test_pause_turn_is_truncated_and_its_web_searches_billed(
    srv, tmp_path: Path, client: str
) -> None:
    """By default a server-tool loop the API paused (pause_turn) is recorded as it came:
    stop reason pause_turn, truncated, its web searches at $0.01 each on top of the
    tokens."""
    _serve_once(srv, _message(PAUSED_CONTENT, "pause_turn", PAUSED_USAGE))
    out = _run(srv, tmp_path, "anthropic", client)
    row = out.row
    assert srv.stats()["total"] == 1 and row["response"] == "Searching first. "
    assert (row["stop_reason"], row["raw_stop_reason"], row["truncated"]) == (
        "pause_turn",
        "pause_turn",
        True,
    )
    assert row["cost_usd"] == pytest.approx((1000 * 1.0 + 50 * 2.0) / 1e6 + 0.03)
    assert out.result.manifest.truncated == 1


@pytest.mark.parametrize("client", CLIENTS)
def test_pause_turn_is_continued_when_asked_and_web_searches_are_billed(
    srv, tmp_path: Path, client: str
) -> None:
    """With model.pause_turn_continuations, the paused answer is sent back verbatim and
    continued: one response whose text, tokens and cost cover both parts, its web
    searches at $0.01 each on top of the tokens."""
    _serve_once(srv, _message(PAUSED_CONTENT, "pause_turn", PAUSED_USAGE))
    out = _run(srv, tmp_path, "anthropic", client, pause_turn_continuations=5)
    row = out.row
    assert srv.stats()["total"] == 2 and row["attempts"] == 1
    assert row["response"].startswith("Searching first. ") and row["score"] == 1.0
    assert (row["stop_reason"], row["truncated"]) == ("end_turn", False)
    assert row["server_tool_uses"] == {"web_search_requests": 3}
    tokens_in, tokens_out = row["input_tokens"], row["output_tokens"]
    assert tokens_in > 1000 and tokens_out > 50
    assert row["cost_usd"] == pytest.approx((tokens_in * 1.0 + tokens_out * 2.0) / 1e6 + 0.03)
    assert out.result.manifest.server_tool_uses == {"web_search_requests": 3}


@pytest.mark.parametrize("client", CLIENTS)
def test_a_turn_still_paused_after_its_continuations_is_truncated(
    srv, tmp_path: Path, client: str
) -> None:
    """An answer paused again and again stops after model.pause_turn_continuations with
    stop reason pause_turn, flagged truncated and counted, every part's tokens and
    searches paid."""
    srv.configure(
        faults=[{"kind": "answer", "body": _message(PAUSED_CONTENT, "pause_turn", PAUSED_USAGE)}]
    )
    out = _run(srv, tmp_path, "anthropic", client, pause_turn_continuations=5)
    row = out.row
    assert srv.stats()["total"] == 6
    assert (row["stop_reason"], row["raw_stop_reason"], row["truncated"]) == (
        "pause_turn",
        "pause_turn",
        True,
    )
    assert row["server_tool_uses"] == {"web_search_requests": 18}
    assert (row["input_tokens"], row["output_tokens"]) == (6000, 300)
    assert row["cost_usd"] == pytest.approx((6000 * 1.0 + 300 * 2.0) / 1e6 + 0.18)
    assert out.result.manifest.truncated == 1


REFUSALS = [
    (
        "anthropic",
        _message(
            [],
            "refusal",
            {"input_tokens": 97, "output_tokens": 0},
            stop_details={"type": "refusal", "category": "cyber", "explanation": "Blocked."},
        ),
        "Blocked.",
        (97, 0),
    ),
    (  # the classifier stopped an answer already under way
        "anthropic",
        _message(
            [{"type": "text", "text": "Step one is"}],
            "refusal",
            {"input_tokens": 20, "output_tokens": 4},
        ),
        "Step one is",
        (20, 4),
    ),
    (
        "openai_compatible",
        _completion(
            {"role": "assistant", "content": None, "refusal": "I can't help with that."},
            "stop",
            {"prompt_tokens": 64, "completion_tokens": 13},
        ),
        "I can't help with that.",
        (64, 13),
    ),
    (  # a refusal as a content part
        "openai_compatible",
        _completion(
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "Not that."}]},
            "stop",
            {"prompt_tokens": 30, "completion_tokens": 3},
        ),
        "Not that.",
        (30, 3),
    ),
    (  # the documented shape: a refusal and no content key at all
        "openai_compatible",
        _completion(
            {"role": "assistant", "refusal": "Sorry, no."},
            "stop",
            {"prompt_tokens": 81, "completion_tokens": 11},
        ),
        "Sorry, no.",
        (81, 11),
    ),
]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("protocol", "body", "why", "tokens"), REFUSALS, ids=range(5))
@pytest.mark.parametrize("policy", ["score", "exclude"])
def test_refusals_are_one_policy_with_their_usage_and_cost(
    srv, tmp_path: Path, client: str, protocol: str, body: dict, why: str, tokens, policy: str
) -> None:
    """Either provider's refusal is an answer with its tokens and cost, counted in the
    summary: scored as its visible text (score), or left out of the mean (exclude)."""
    _serve_once(srv, body)
    out = _run(srv, tmp_path, protocol, client, run={"refusals": policy})
    row = out.row
    assert row["refusal"] == why and row["stop_reason"] == "refusal"
    assert (row["input_tokens"], row["output_tokens"]) == tokens
    assert row["cost_usd"] == pytest.approx((tokens[0] * 1.0 + tokens[1] * 2.0) / 1e6)
    manifest = out.result.manifest
    assert manifest.refusals == 1
    if policy == "score":
        assert row["state"] == "scored" and row["score"] == 0.0
        assert manifest.score is not None and manifest.score.n == 1
    else:
        assert row["state"] == "judge_error" and row["error"]["reason"] == "refusal"
        assert manifest.counts == {"judge_error": 1}
    assert out.cached == 1  # an answer: kept, never asked again


@pytest.mark.parametrize("client", CLIENTS)
def test_openai_cache_writes_are_priced_at_the_write_rate(srv, tmp_path: Path, client: str) -> None:
    """prompt_tokens_details.cache_write_tokens are part of the input, priced at the
    cache-write rate and counted apart."""
    usage = {
        "prompt_tokens": 4020,
        "completion_tokens": 4,
        "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 4012},
    }
    _serve_once(srv, _completion({"role": "assistant", "content": "A: 18"}, "stop", usage))
    out = _run(srv, tmp_path, "openai_compatible", client)
    row = out.row
    assert (row["input_tokens"], row["cache_write_tokens"]) == (4020, 4012)
    assert row["cost_usd"] == pytest.approx((8 * 1.0 + 4012 * 1.25 + 4 * 2.0) / 1e6)
    assert out.result.manifest.cache_write_tokens == 4012


@pytest.mark.parametrize("client", CLIENTS)
def test_reasoning_tokens_and_text_are_recorded_apart(srv, tmp_path: Path, client: str) -> None:
    """Anthropic thinking blocks: their text is the row's reasoning, never its response;
    output_tokens_details.thinking_tokens are its reasoning tokens."""
    content = [
        {"type": "thinking", "thinking": "16 eggs, 3 eaten, 4 baked: 9 sold.", "signature": "s1"},
        {"type": "text", "text": "9 x $2 = $18. A: 18"},
    ]
    usage = {
        "input_tokens": 30,
        "output_tokens": 44,
        "output_tokens_details": {"thinking_tokens": 33},
    }
    _serve_once(srv, _message(content, "end_turn", usage))
    out = _run(srv, tmp_path, "anthropic", client)
    row = out.row
    assert row["response"] == "9 x $2 = $18. A: 18" and row["score"] == 1.0
    assert row["reasoning"] == "16 eggs, 3 eaten, 4 baked: 9 sold."
    assert row["reasoning_tokens"] == 33 and out.result.manifest.reasoning_tokens == 33


RAN_OUT = [
    (
        "openai_compatible",
        _completion(
            {"role": "assistant", "content": ""},
            "length",
            {
                "prompt_tokens": 13,
                "completion_tokens": 50,
                "completion_tokens_details": {"reasoning_tokens": 50},
            },
        ),
    ),
    (  # vLLM's reasoning parser: the thinking apart, no answer yet
        "openai_compatible",
        _completion(
            {"role": "assistant", "content": None, "reasoning_content": "Let me count the"},
            "length",
            {"prompt_tokens": 13, "completion_tokens": 5},
        ),
    ),
    (
        "anthropic",
        _message(
            [{"type": "thinking", "thinking": "First, the eggs", "signature": "s"}],
            "max_tokens",
            {"input_tokens": 13, "output_tokens": 5},
        ),
    ),
]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("protocol", "body"), RAN_OUT, ids=range(3))
def test_running_out_while_reasoning_is_its_own_stop_state(
    srv, tmp_path: Path, client: str, protocol: str, body: dict
) -> None:
    """max_tokens spent before any answer: truncated, reasoning_exhausted, counted and
    warned about, never a bare "truncated, empty"."""
    _serve_once(srv, body)
    out = _run(srv, tmp_path, protocol, client)
    row = out.row
    assert row["truncated"] is True and row["reasoning_exhausted"] is True
    assert row["response"] == ""
    assert out.result.manifest.reasoning_exhausted == 1


@pytest.mark.parametrize("client", CLIENTS)
def test_one_hour_cache_writes_are_priced_at_their_own_rate(
    srv, tmp_path: Path, client: str
) -> None:
    """Anthropic's cache_creation splits writes by TTL: the one-hour ones cost twice the
    input price, the five-minute ones the cache-write rate."""
    usage = {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_creation_input_tokens": 3000,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 1000, "ephemeral_1h_input_tokens": 2000},
    }
    _serve_once(srv, _message([{"type": "text", "text": "A: 18"}], "end_turn", usage))
    out = _run(srv, tmp_path, "anthropic", client)
    row = out.row
    assert (row["input_tokens"], row["cache_write_tokens"]) == (3010, 3000)
    expected = (10 * 1.0 + 1000 * 1.25 + 2000 * 2.0 + 5 * 2.0) / 1e6
    assert row["cost_usd"] == pytest.approx(expected)


def _retry_info(delay: str, quota_id: str) -> list[dict]:
    """Gemini's 429 as its OpenAI-compatible endpoint sends it: the list envelope, the
    quota violated, and how long to wait in a ``RetryInfo`` detail (no header)."""
    return [
        {
            "error": {
                "code": 429,
                "message": "You exceeded your current quota, please check your plan and "
                f"billing details. Please retry in {delay}.",
                "status": "RESOURCE_EXHAUSTED",
                "details": [
                    {
                        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                        "violations": [{"quotaId": quota_id}],
                    },
                    {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay},
                ],
            }
        }
    ]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("delay", "waited"), [("7s", 7.0), ("0.5s", 0.5), ("9000s", 600.0)])
def test_a_google_retry_delay_in_the_body_is_waited_out(
    srv, tmp_path: Path, client: str, delay: str, waited: float
) -> None:
    """Gemini's per-minute 429 says how long to wait only in its body (``RetryInfo``
    ``retryDelay``): that wait is the retry's (capped at MAX_RETRY_AFTER_S), as a
    ``retry-after`` header's would be. Before, the body was not read: the retry came
    after the generic backoff (a fraction of a second), into the same limit."""
    _serve_once(srv, _retry_info(delay, "GenerateRequestsPerMinutePerProjectPerModel"), 429)
    out = _run(srv, tmp_path, "openai_compatible", client)
    assert out.row["state"] == "scored" and out.row["attempts"] == 2
    assert out.slept == [waited]


@pytest.mark.parametrize("client", CLIENTS)
def test_a_403_flagging_the_prompt_is_that_samples_bad_request(
    srv, tmp_path: Path, client: str
) -> None:
    """OpenRouter answers a prompt its moderation flagged with 403 (``error.metadata``
    naming the flagged input and the reasons): a bad request of that sample, with no word
    about the key (before: an AuthError telling to check the key)."""
    body = {
        "error": {
            "code": 403,
            "message": "This model needs moderation and the input was flagged.",
            "metadata": {
                "reasons": ["violence"],
                "flagged_input": "How do I...",
                "model_slug": "m",
            },
        }
    }
    _serve_once(srv, body, 403)
    out = _run(srv, tmp_path, "openai_compatible", client)
    error = out.row["error"]
    assert (error["kind"], error["status"], error["transient"]) == ("BadRequest", 403, False)
    assert "api_key" not in error["message"] and "flagged" in error["message"]


NEVER_FITS = [
    (  # one request asking more tokens than the whole per-minute limit allows
        429,
        {
            "error": {
                "message": "Request too large for gpt-4o in organization org-x on tokens per "
                "min (TPM): Limit 20000, Requested 26500. Reduce the input or output tokens.",
                "type": "tokens",
                "param": None,
                "code": "rate_limit_exceeded",
            }
        },
        "asks more than the whole limit",
    ),
    (  # a local server that says a context overflow under 500
        500,
        {"error": {"message": "the input length exceeds the context length", "type": "api_error"}},
        "context window",
    ),
]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("status", "body", "words"), NEVER_FITS, ids=range(len(NEVER_FITS)))
def test_a_request_that_can_never_fit_is_not_retried(
    srv, tmp_path: Path, client: str, status: int, body: dict, words: str
) -> None:
    """A 429 for one request larger than the whole per-minute limit, or a 5xx saying the
    prompt overflows the context window, can never succeed: recorded at once, saying why
    (before: retried run.max_retries times, each retry refused alike)."""
    _serve_once(srv, body, status)
    out = _run(srv, tmp_path, "openai_compatible", client)
    error = out.row["error"]
    assert (out.row["attempts"], error["kind"], error["transient"]) == (1, "BadRequest", False)
    assert words in error["message"] and out.slept == []


FASTAPI_BODIES = [
    ({"detail": "Not Found"}, 404, "404 error: Not Found"),
    (
        {
            "detail": [
                {"type": "missing", "loc": ["body", "messages"], "msg": "Field required"},
                {"type": "int_parsing", "loc": ["body", "max_tokens"], "msg": "Not an int"},
            ]
        },
        422,
        "422 error: body.messages: Field required; body.max_tokens: Not an int",
    ),
]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("body", "status", "words"), FASTAPI_BODIES, ids=["404", "422"])
def test_fastapi_error_bodies_keep_their_message(
    srv, tmp_path: Path, client: str, body: dict, status: int, words: str
) -> None:
    """Servers built on FastAPI answer errors as ``{"detail": ...}`` (a string, or a
    422's list of fields and messages): the row's error says it (before: "no message")."""
    _serve_once(srv, body, status)
    out = _run(srv, tmp_path, "openai_compatible", client)
    error = out.row["error"]
    assert error["kind"] == "BadRequest" and error["message"].startswith(words)


@pytest.mark.parametrize("client", CLIENTS)
def test_a_proxys_html_error_page_is_read_as_its_words(srv, tmp_path: Path, client: str) -> None:
    """A proxy's HTML error page (a firewall's block page with its style sheet) is read as
    its words: the row's one-line error says what the page said (before: the markup from
    the doctype on, cut at 500 characters, the style sheet first)."""
    page = (
        "<!DOCTYPE html>\n<html lang='en'>\n<head>\n<style>body { font: 14px sans-serif; "
        "margin: 0 auto; max-width: 40em }</style>\n<script>window.ray = 'abc';</script>\n"
        "<title>Access denied | gateway.example</title>\n</head>\n<body>\n"
        "<h1>Request blocked</h1>\n<p>This address may not reach the API &amp; its models.</p>"
        "\n</body>\n</html>\n"
    )
    _serve_once(srv, page, 403, {"content-type": "text/html"})
    out = _run(srv, tmp_path, "openai_compatible", client)
    message = out.row["error"]["message"]
    assert message.startswith(
        "403 error: Access denied | gateway.example Request blocked This address may not "
        "reach the API & its models"
    )
    assert "<" not in message and "font:" not in message and "window.ray" not in message
