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
    priority price (twice the standard one for gpt-5.4)."""
    from gradetrail.executors.budget import worst_case_usd
    from gradetrail.providers import make_provider
    from gradetrail.providers.base import Request

    spec = gsm8k_spec(tmp_path, None, "openai", model="gpt-5.4", params={"max_tokens": 1000})
    provider = make_provider(spec.model, spec.base_dir)
    messages = ({"role": "user", "content": "x" * 984},)
    plain = Request("openai", "gpt-5.4", None, None, messages, {"max_tokens": 1000})
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
    plain_in = len(json.dumps(messages[0])) + 32
    asked_in = plain_in + len(json.dumps({"service_tier": "priority"}))
    assert standard == pytest.approx((plain_in * 2.5 + 1000 * 15.0) / 1e6, rel=1e-9)
    assert priority == pytest.approx((asked_in * 5.0 + 1000 * 30.0) / 1e6, rel=1e-9)
