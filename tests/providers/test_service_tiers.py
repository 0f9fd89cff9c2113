"""A response is priced at the service tier it says served it (OpenAI's ``service_tier``:
flex at half the standard rates, priority at its own published rates), through both
HTTP clients against the local protocol server; the tier is cached with the response, so
a warm re-run reports the same cost, while standard-tier entries and rows keep their
bytes and entries cached before tiers were read stay of the standard tier."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from http_support import SECRET_KEY, gsm8k_spec, run_http, serve_once
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

import gradetrail
from gradetrail.providers.base import Response
from gradetrail.providers.pricing import price_for

server = protocol_server_fixture(scope="module", name="server")
srv = fresh_protocol_server_fixture("server", name="srv")

CLIENTS = ("aiohttp", "sdk")
#: 800 fresh + 200 cached input tokens, 500 output, on gpt-5.4 (USD per MTok: standard
#: 2.50 / 0.25 / 15.00; priority 5.00 / 0.50 / 30.00; flex half the standard)
STANDARD_USD = (800 * 2.50 + 200 * 0.25 + 500 * 15.00) / 1e6  # 0.00955
FLEX_USD = STANDARD_USD / 2  # 0.004775
PRIORITY_USD = (800 * 5.00 + 200 * 0.50 + 500 * 30.00) / 1e6  # 0.0191


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch, srv) -> None:  # noqa: ANN001
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET_KEY)
    srv.configure(models=["gpt-5.4"])


def _chat(tier: Any) -> dict:
    body = {
        "id": "chatcmpl-tier",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-5.4-2026-03-05",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "A: 18"},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 1000,
            "completion_tokens": 500,
            "total_tokens": 1500,
            "prompt_tokens_details": {"cached_tokens": 200},
        },
    }
    if tier is not None:
        body["service_tier"] = tier
    return body


def _responses(tier: str) -> dict:
    return {
        "id": "resp_tier",
        "object": "response",
        "status": "completed",
        "model": "gpt-5.4-2026-03-05",
        "service_tier": tier,
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "A: 18", "annotations": []}],
            }
        ],
        "usage": {
            "input_tokens": 1000,
            "input_tokens_details": {"cached_tokens": 200},
            "output_tokens": 500,
        },
    }


def _spec(srv, tmp_path: Path, client: str, provider: str = "openai"):  # noqa: ANN001, ANN202
    base = srv.openai_base_url
    return gsm8k_spec(tmp_path, None, provider, model="gpt-5.4", base_url=base, http_client=client)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(
    ("tier", "usd"),
    [
        ("flex", FLEX_USD),
        ("priority", PRIORITY_USD),
        ("default", STANDARD_USD),
        (None, STANDARD_USD),
    ],
)
def test_a_response_is_priced_at_the_tier_that_served_it(
    srv, tmp_path: Path, client: str, tier: str | None, usd: float
) -> None:  # noqa: ANN001
    """flex at half the standard rates (before: 0.00955 USD, the standard price, for a
    flex answer costing 0.004775), priority at its own rates; the default tier as before,
    with no service_tier on the row."""
    serve_once(srv, _chat(tier))
    out = run_http(_spec(srv, tmp_path, client), tmp_path)
    row = out.row
    assert row["state"] == "scored", row["error"]
    assert row["cost_usd"] == pytest.approx(usd, rel=1e-9)
    assert out.result.manifest.cost_usd == pytest.approx(usd, rel=1e-9)
    if tier in ("flex", "priority"):
        assert row["service_tier"] == tier
    else:
        assert "service_tier" not in row


@pytest.mark.parametrize("client", CLIENTS)
def test_the_responses_api_reads_its_tier(srv, tmp_path: Path, client: str) -> None:  # noqa: ANN001
    """A Responses answer's service_tier is read and kept on the row; away from OpenAI
    (this local server) no OpenAI tier rule applies, so the spec's model.price does."""
    serve_once(srv, _responses("flex"))
    price = {"input_per_mtok": 2.5, "cached_input_per_mtok": 0.25, "output_per_mtok": 15.0}
    spec = gsm8k_spec(
        tmp_path,
        None,
        "openai_responses",
        model="gpt-5.4",
        base_url=srv.openai_base_url,
        http_client=client,
        api_key_env="OPENAI_API_KEY",
        price=price,
    )
    out = run_http(spec, tmp_path)
    assert out.row["service_tier"] == "flex"
    assert out.row["cost_usd"] == pytest.approx(STANDARD_USD, rel=1e-9)


def test_a_warm_rerun_reports_the_tier_and_cost_it_paid(srv, tmp_path: Path) -> None:  # noqa: ANN001
    """The tier is cached with the response: the re-run answered from the cache costs
    what the flex call did, not the standard price."""
    serve_once(srv, _chat("flex"))
    spec = _spec(srv, tmp_path, "aiohttp")
    cold = run_http(spec, tmp_path)
    warm = gradetrail.run_eval(
        spec, results_root=tmp_path / "warm", cache_path=tmp_path / "cache.sqlite"
    )
    (row,) = gradetrail.read_results(warm.run_dir)
    assert srv.stats()["total"] == 1 and row["cached"] is True
    assert row["cost_usd"] == cold.row["cost_usd"] == pytest.approx(FLEX_USD, rel=1e-9)
    assert row["service_tier"] == "flex"
    assert warm.manifest.identity_hash == cold.result.manifest.identity_hash


def test_standard_entries_keep_their_bytes_and_old_entries_read_as_standard() -> None:
    """A response of the standard tier is cached without a service_tier key (its bytes
    are those it had before tiers were read), and such an entry reads back as standard:
    priced at the standard rates."""
    plain = Response(text="A: 18", served_model="gpt-5.4", input_tokens=800, output_tokens=500)
    text = plain.to_json()
    assert "service_tier" not in text
    back = Response.from_json(text)
    assert back == plain and back.service_tier is None
    flex = Response.from_json(text[:-1] + ',"service_tier":"flex"}')
    assert flex.service_tier == "flex" and Response.from_json(flex.to_json()) == flex
    price = price_for("openai", "gpt-5.4")
    assert price is not None and price.for_tier(back.service_tier) is price


def test_a_tier_without_a_price_is_priced_at_the_standard_rates(
    srv, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:  # noqa: ANN001
    """scale has no per-token price here: the standard price, a warning naming it."""
    serve_once(srv, _chat("scale"))
    out = run_http(_spec(srv, tmp_path, "aiohttp"), tmp_path)
    assert out.row["cost_usd"] == pytest.approx(STANDARD_USD, rel=1e-9)
    assert out.row["service_tier"] == "scale"
    assert "no scale-tier price for gpt-5.4" in caplog.text


def test_a_budget_bounds_a_priority_request_at_the_priority_rates(tmp_path: Path) -> None:
    """model.params.extra.service_tier: priority makes the budget's worst case the
    priority price (twice the standard one for gpt-5.4); service_tier: default the
    standard one."""
    from gradetrail.executors.budget import worst_case_usd
    from gradetrail.providers import make_provider
    from gradetrail.providers.base import Request

    spec = gsm8k_spec(tmp_path, None, "openai", model="gpt-5.4", params={"max_tokens": 1000})
    provider = make_provider(spec.model, spec.base_dir)
    messages = ({"role": "user", "content": "x" * 984},)
    plain = Request(
        "openai",
        "gpt-5.4",
        None,
        None,
        messages,
        {"max_tokens": 1000, "extra": {"service_tier": "default"}},
    )
    asked = Request(
        "openai",
        "gpt-5.4",
        None,
        None,
        messages,
        {"max_tokens": 1000, "extra": {"service_tier": "priority"}},
    )
    standard, priority = worst_case_usd(provider, plain), worst_case_usd(provider, asked)
    # input bound: the message's bytes and 16 tokens a message (budget.MESSAGE_OVERHEAD)
    # plus, for the priority request, the bytes of extra (sent in the body)
    base_in = len(json.dumps(messages[0])) + 32
    plain_in = base_in + len(json.dumps({"service_tier": "default"}))
    asked_in = base_in + len(json.dumps({"service_tier": "priority"}))
    assert standard == pytest.approx((plain_in * 2.5 + 1000 * 15.0) / 1e6, rel=1e-9)
    assert priority == pytest.approx((asked_in * 5.0 + 1000 * 30.0) / 1e6, rel=1e-9)


def test_a_request_asking_no_tier_is_bounded_at_the_dearest_tier_that_may_serve_it(
    tmp_path: Path,
) -> None:
    """A project whose default tier is priority bills priority rates without asking: a
    request that names no tier (or auto) is bounded at them (before: at the standard
    rates, so the run could pass its ceiling by the premium, twice the price on gpt-5.4);
    service_tier: default holds it to the standard rates."""
    from gradetrail.executors.budget import worst_case_usd
    from gradetrail.providers import make_provider
    from gradetrail.providers.base import Request

    spec = gsm8k_spec(tmp_path, None, "openai", model="gpt-5.4", params={"max_tokens": 1000})
    provider = make_provider(spec.model, spec.base_dir)
    messages = ({"role": "user", "content": "x" * 984},)
    plain_in = len(json.dumps(messages[0])) + 32

    def bound(**extra: str) -> float:
        params: dict[str, Any] = {"max_tokens": 1000}
        if extra:
            params["extra"] = extra
        return worst_case_usd(provider, Request("openai", "gpt-5.4", None, None, messages, params))

    def extra_in(**extra: str) -> int:
        return plain_in + len(json.dumps(extra))

    assert bound() == pytest.approx((plain_in * 5.0 + 1000 * 30.0) / 1e6, rel=1e-9)
    auto = extra_in(service_tier="auto")
    assert bound(service_tier="auto") == pytest.approx((auto * 5.0 + 1000 * 30.0) / 1e6)
    default = extra_in(service_tier="default")
    assert bound(service_tier="default") == pytest.approx((default * 2.5 + 1000 * 15.0) / 1e6)


def test_a_prompt_past_the_priority_rates_has_no_worst_case_unless_held_to_standard(
    tmp_path: Path,
) -> None:
    """OpenAI's priority rates exclude prompts above 128K tokens: a budgeted request that
    long, which a priority project may serve, has no known worst case (one line saying to
    send service_tier: default); held to the standard tier, it has one."""
    from gradetrail.errors import SpecError
    from gradetrail.executors.budget import worst_case_usd
    from gradetrail.providers import make_provider
    from gradetrail.providers.base import Request

    spec = gsm8k_spec(tmp_path, None, "openai", model="gpt-5.4", params={"max_tokens": 10})
    provider = make_provider(spec.model, spec.base_dir)
    messages = ({"role": "user", "content": "x" * 130_000},)
    with pytest.raises(SpecError, match="service_tier: default"):
        plain = Request("openai", "gpt-5.4", None, None, messages, {"max_tokens": 10})
        worst_case_usd(provider, plain)
    held = {"max_tokens": 10, "extra": {"service_tier": "default"}}
    usd = worst_case_usd(provider, Request("openai", "gpt-5.4", None, None, messages, held))
    assert 130_000 * 2.5 / 1e6 < usd < 131_000 * 2.5 / 1e6 + 10 * 15.0 / 1e6


@pytest.mark.parametrize("client", CLIENTS)
def test_a_priority_answer_past_128k_prompt_tokens_has_an_unknown_cost(
    srv, tmp_path: Path, client: str, caplog: pytest.LogCaptureFixture
) -> None:  # noqa: ANN001
    """A priority answer to a 200,000-token prompt is not priced at the short-context
    priority rates (before: 1.015 USD, as if they applied); its cost is unknown (n/a),
    with a warning naming the limit."""
    body = _chat("priority")
    body["usage"] = {"prompt_tokens": 200_000, "completion_tokens": 500, "total_tokens": 200_500}
    serve_once(srv, body)
    out = run_http(_spec(srv, tmp_path, client), tmp_path)
    assert out.row["state"] == "scored" and out.row["service_tier"] == "priority"
    assert out.row["cost_usd"] is None
    assert "prompts of up to 128,000 tokens" in caplog.text


def _message(tier: str | None) -> dict[str, Any]:
    usage: dict[str, Any] = {"input_tokens": 1000, "output_tokens": 500}
    if tier is not None:
        usage["service_tier"] = tier
    return {
        "id": "msg_tier",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [{"type": "text", "text": "A: 18"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }


def _message_stream(tier: str) -> str:
    """The Messages stream of :func:`_message`: the tier comes in message_start's usage."""
    start = {**_message(tier), "content": [], "stop_reason": None}
    start["usage"] = {**start["usage"], "output_tokens": 1}
    events = [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "ping"},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "A: 18"},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 500},
        },
        {"type": "message_stop"},
    ]
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


#: 1000 input and 500 output tokens on claude-sonnet-4-5 (3 and 15 USD per MTok)
SONNET_USD = (1000 * 3.0 + 500 * 15.0) / 1e6  # 0.0105


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("tier", "usd"),
    [("priority", SONNET_USD), ("batch", SONNET_USD / 2), ("standard", SONNET_USD)],
)
def test_anthropic_answers_say_their_service_tier(
    srv, tmp_path: Path, client: str, stream: bool, tier: str, usd: float
) -> None:  # noqa: ANN001
    """Anthropic's usage.service_tier is read (before: never, every answer was standard):
    priority is kept on the row (priced at the standard rates: Priority Tier has no
    per-token price), batch at half the standard rates, standard as before (no tier on
    the row); streamed, the tier comes in message_start."""
    srv.configure(models=["claude-sonnet-4-5"])
    serve_once(srv, _message_stream(tier) if stream else _message(tier))
    spec = gsm8k_spec(
        tmp_path,
        None,
        "anthropic",
        model="claude-sonnet-4-5",
        base_url=srv.anthropic_base_url,
        http_client=client,
        stream=stream,
    )
    out = run_http(spec, tmp_path)
    row = out.row
    assert row["state"] == "scored", row["error"]
    assert row["cost_usd"] == pytest.approx(usd, rel=1e-9)
    assert row.get("service_tier") == (None if tier == "standard" else tier)


@pytest.mark.parametrize("client", CLIENTS)
def test_a_sonnet_4_5_prompt_past_200k_tokens_is_priced_at_the_long_context_rates(
    srv, tmp_path: Path, client: str
) -> None:  # noqa: ANN001
    """claude-sonnet-4-5 bills a prompt over 200,000 tokens (its 1M context window) at
    6 / 22.50 USD per MTok, every token of it (before: 3 / 15, half what the answer cost:
    a 300,000-token web-search turn priced 0.9075 USD instead of 1.81125)."""
    srv.configure(models=["claude-sonnet-4-5"])
    body = _message(None)
    body["usage"] = {"input_tokens": 300_000, "output_tokens": 500}
    serve_once(srv, body)
    spec = gsm8k_spec(
        tmp_path,
        None,
        "anthropic",
        model="claude-sonnet-4-5",
        base_url=srv.anthropic_base_url,
        http_client=client,
    )
    out = run_http(spec, tmp_path)
    assert out.row["cost_usd"] == pytest.approx((300_000 * 6.0 + 500 * 22.5) / 1e6, rel=1e-9)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("tier", "share"), [(None, 1.0), ("flex", 0.5)])
def test_a_gpt_5_4_prompt_past_272k_tokens_is_priced_at_twice_the_input_rate(
    srv, tmp_path: Path, client: str, tier: str | None, share: float
) -> None:  # noqa: ANN001
    """OpenAI prices a gpt-5.4 prompt over 272K input tokens at 2x input and 1.5x output,
    on the standard tier and flex alike (before: the short-context rates, so
    a 300,000-token prompt with 200 cached and 500 out cost 0.75705 USD, not 1.51035)."""
    body = _chat(tier)
    body["usage"] = {
        "prompt_tokens": 300_000,
        "completion_tokens": 500,
        "total_tokens": 300_500,
        "prompt_tokens_details": {"cached_tokens": 200},
    }
    serve_once(srv, body)
    out = run_http(_spec(srv, tmp_path, client), tmp_path)
    usd = (299_800 * 5.0 + 200 * 0.5 + 500 * 22.5) / 1e6 * share
    assert out.row["cost_usd"] == pytest.approx(usd, rel=1e-9)
