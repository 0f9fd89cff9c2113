"""The ``openai_responses`` provider through the lean aiohttp client and the real
``openai`` SDK against the local protocol server's ``/v1/responses``: GSM8K reproduces the
replay accuracy with both clients, rows are identical across clients, reasoning items are
carried across an agent loop's turns, and usage, stop states, refusals and errors are read
as the API writes them."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from http_support import SECRET_KEY, gsm8k_spec, run_http, run_priced
from paths import EXAMPLES, GSM8K_SPEC
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

import gradetrail
from gradetrail.errors import SpecError
from gradetrail.spec import parse_spec

SCRIPT = EXAMPLES / "data" / "agent" / "server_script.json"
server = protocol_server_fixture(scope="module", name="server")
srv = fresh_protocol_server_fixture("server", name="srv")
CLIENTS = ["aiohttp", "sdk"]
#: fields of a row that differ between two runs of the same requests
VOLATILE = {"latency_s", "started_at", "finished_at", "attempts", "cached", "run_id"}


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_KEY)


def _complete_once(provider: Any, request: gradetrail.Request) -> gradetrail.Response:
    """``provider.complete(request)`` on an event loop of its own, the provider closed
    after it."""
    import asyncio

    async def call() -> gradetrail.Response:
        try:
            return await provider.complete(request)
        finally:
            await provider.aclose()

    return asyncio.run(call())


def _spec(tmp_path: Path, srv: Any, client: str, **fields: Any) -> gradetrail.EvalSpec:
    fields.setdefault("limit", 1)
    fields.setdefault("api_key_required", False)
    return gsm8k_spec(tmp_path / client, srv, "openai_responses", http_client=client, **fields)


def _stable(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in VOLATILE}


@pytest.mark.parametrize("client", CLIENTS)
def test_gsm8k_through_responses_scores_as_replay(srv, tmp_path: Path, client: str) -> None:
    """The bundled GSM8K spec (1,319 problems) served over /v1/responses scores 742/1,319
    = 0.5625 for 175b_verification, the authors' labels, through either client."""
    spec = gradetrail.load_spec(
        GSM8K_SPEC,
        [
            "model.provider=openai_responses",
            f"model.base_url={srv.openai_base_url}",
            "model.api_key_required=false",
            f"model.http_client={client}",
            "run.concurrency=64",
        ],
    )
    result = gradetrail.run_eval(spec, results_root=tmp_path / "results", use_cache=False)
    assert result.manifest.counts == {"scored": 1319}
    score = result.manifest.score
    assert score is not None and score.mean is not None
    assert round(score.mean * 1319) == 742 and round(score.mean, 4) == 0.5625
    stats = srv.settled_stats(1319)
    assert stats["paths"] == {"/v1/responses": 1319} and stats["unmatched"] == 0


def test_both_clients_give_identical_rows(srv, tmp_path: Path) -> None:
    """Text, tool calls, truncation, usage (cached and reasoning tokens) and refusals come
    out the same through aiohttp and the SDK, row for row."""
    srv.configure(
        script={
            "rules": [
                {"contains": "A robe", "refusal": "I can't help with that."},
                {"contains": "Josh decides", "reply": "A: 10", "reasoning": "Twelve an hour."},
            ]
        },
        cache_read_tokens=6,
    )
    rows = {}
    for client in CLIENTS:
        spec = _spec(
            tmp_path,
            srv,
            client,
            limit=4,
            params={"max_tokens": 40, "extra": {"reasoning": {"effort": "low"}}},
        )
        rows[client] = [_stable(r) for r in run_http(spec, tmp_path / client).rows]
    assert rows["aiohttp"] == rows["sdk"]
    by_id = {r["sample_id"]: r for r in rows["sdk"]}
    assert by_id["2"]["stop_reason"] == "refusal" and by_id["2"]["response"] == ""
    assert by_id["3"]["response"] == "A: 10" and by_id["3"]["stop_reason"] == "end_turn"
    for row in rows["sdk"]:
        assert row["cached_input_tokens"] == 6
        assert row["output_tokens"] >= 8  # reasoning tokens are part of the output


@pytest.mark.parametrize("client", CLIENTS)
def test_a_specs_own_include_still_asks_for_the_reasoning_to_go_back(
    srv, tmp_path: Path, client: str
) -> None:
    """``extra: {reasoning: ..., include: [message.output_text.logprobs]}``: the spec's
    include is kept and ``reasoning.encrypted_content`` added, so the reasoning item comes
    back whole and can go back on the next turn under ``store: false``. Before, a spec's
    own include replaced it: the item came back as an id only (and was left out)."""

    from gradetrail.providers import make_provider

    srv.configure(script={"rules": [{"contains": "Q:", "reply": "A: 18", "reasoning": "a b"}]})
    extra = {"reasoning": {"effort": "low"}, "include": ["message.output_text.logprobs"]}
    spec = _spec(tmp_path, srv, client, params={"extra": extra})
    provider = make_provider(spec.model, spec.base_dir)
    provider.check_ready()
    request = gradetrail.Request(
        provider="openai_responses",
        model="175b_verification",
        base_url=srv.openai_base_url,
        system=None,
        messages=({"role": "user", "content": "Q: what is 9 + 9?"},),
        params={"extra": extra},
    )
    assert provider.body(request)["include"] == [
        "message.output_text.logprobs",
        "reasoning.encrypted_content",
    ]

    (item,) = _complete_once(provider, request).reasoning_blocks
    assert item["type"] == "reasoning" and item["encrypted_content"]


def test_usage_reads_cached_and_reasoning_tokens(srv, tmp_path: Path) -> None:
    """input_tokens includes input_tokens_details.cached_tokens (subtracted once);
    output_tokens includes output_tokens_details.reasoning_tokens, kept apart."""

    from gradetrail.providers import make_provider

    srv.configure(
        script={"rules": [{"contains": "Q:", "reply": "A: 18", "reasoning": "one two three"}]},
        cache_read_tokens=5,
    )
    spec = _spec(tmp_path, srv, "aiohttp", params={"extra": {"reasoning": {"effort": "low"}}})
    provider = make_provider(spec.model, spec.base_dir)
    provider.check_ready()
    request = gradetrail.Request(
        provider="openai_responses",
        model="175b_verification",
        base_url=srv.openai_base_url,
        system="Be brief.",
        messages=({"role": "user", "content": "Q: what is 9 + 9?"},),
        params={"extra": {"reasoning": {"effort": "low"}}},
    )

    response = _complete_once(provider, request)
    prompt_words = 8  # "Be brief." and "Q: what is 9 + 9?", split on whitespace
    assert response.total_input_tokens == prompt_words and response.cached_input_tokens == 5
    assert response.input_tokens == prompt_words - 5
    assert response.reasoning_tokens == 8 and response.output_tokens == 2 + 8
    assert response.reasoning == "one two three"
    (item,) = response.reasoning_blocks
    assert item["type"] == "reasoning" and item["encrypted_content"]  # include was sent
    assert (response.text, response.stop_reason, response.raw_stop_reason) == (
        "A: 18",
        "end_turn",
        "completed",
    )


@pytest.mark.parametrize("client", CLIENTS)
def test_incomplete_at_max_output_tokens_is_truncated(srv, tmp_path: Path, client: str) -> None:
    """status incomplete, reason max_output_tokens -> stop reason max_tokens, flagged
    truncated, its raw reason kept."""
    out = run_http(_spec(tmp_path, srv, client, limit=2, params={"max_tokens": 16}), tmp_path)
    for row in out.rows:
        assert (row["stop_reason"], row["raw_stop_reason"], row["truncated"]) == (
            "max_tokens",
            "max_output_tokens",
            True,
        )
        assert row["output_tokens"] == 16
    assert out.result.manifest.truncated == 2


def test_stop_and_seed_are_refused_before_any_call(srv, tmp_path: Path, cli) -> None:
    """The Responses API has no stop sequences or seed: a one-line spec error, exit 2,
    and no request reaches the server."""
    spec = _spec(tmp_path, srv, "aiohttp")
    out = cli("run", str(spec.source), "--set", "model.params.stop=['\\n']")
    assert out.exit_code == 2
    assert "model.params.stop: the Responses API has no stop sequences" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert srv.stats()["total"] == 0


@pytest.mark.parametrize("client", CLIENTS)
def test_errors_are_classified_under_the_one_retry_policy(srv, tmp_path: Path, client: str) -> None:
    """A 429 is retried after its Retry-After; a failed response's server_error under 200
    is retried; an exhausted quota is recorded at once, never cached."""
    srv.configure(
        faults=[
            {"kind": "rate_limit", "first": 1, "retry_after": 2, "protocol": "responses"},
            {"kind": "error_200", "after": 1, "times": 1, "protocol": "responses"},
        ]
    )
    out = run_http(_spec(tmp_path, srv, client), tmp_path)
    assert out.row["state"] == "scored" and out.row["attempts"] == 3
    assert out.slept[0] == 2
    srv.configure(faults=[{"kind": "quota", "protocol": "responses"}])
    again = run_http(_spec(tmp_path / "q", srv, client, model="6b_finetuning"), tmp_path / "q")
    error = again.row["error"]
    assert again.row["state"] == "provider_error" and error["code"] == "insufficient_quota"
    assert error["transient"] is False and again.cached == 0


def test_chat_only_model_names_the_other_api(srv, tmp_path: Path) -> None:
    """A 404 saying the model is served on Chat Completions names provider openai; a
    Responses-only model on Chat Completions names openai_responses (one line each)."""
    srv.configure(
        faults=[
            {
                "kind": "error",
                "status": 404,
                "protocol": "responses",
                "message": "The model 175b_verification is not supported with the Responses "
                "API; use v1/chat/completions.",
            },
            {
                "kind": "error",
                "status": 404,
                "protocol": "openai",
                "message": "This model is only supported in v1/responses and not in "
                "v1/chat/completions.",
            },
        ]
    )
    out = run_http(_spec(tmp_path, srv, "aiohttp"), tmp_path)
    message = out.row["error"]["message"]
    assert "use model.provider: openai (or openai_compatible)" in message
    chat = run_http(gsm8k_spec(tmp_path / "chat", srv, "openai_compatible"), tmp_path / "chat")
    assert "use model.provider: openai_responses" in chat.row["error"]["message"]


def _agent_overrides(srv: Any, client: str, **extra: Any) -> list[str]:
    return [
        "model.provider=openai_responses",
        "model.name=scripted-agent",
        f"model.base_url={srv.openai_base_url}",
        "model.api_key_required=false",
        f"model.http_client={client}",
        "model.params.max_tokens=null",
        f"model.params.extra={json.dumps(extra)}",
    ]


def _agent_spec(tmp_path: Path, srv: Any, client: str, **extra: Any) -> gradetrail.EvalSpec:
    return gradetrail.load_spec(
        EXAMPLES / "agent-calculator.yaml", _agent_overrides(srv, client, **extra)
    )


def _completes_the_calculator_agent(srv: Any, spec: gradetrail.EvalSpec, tmp_path: Path) -> None:
    """The calculator agent's five samples all scored in 2, 3, 2, 3 and 3 turns, 4 of 5
    right (as through Chat Completions), every request answered 200, and a re-run made no
    call."""
    result = gradetrail.run_eval(spec, results_root=tmp_path / "results")
    rows = {r["sample_id"]: r for r in gradetrail.read_results(result.run_dir)}
    assert {sid: r["state"] for sid, r in rows.items()} == dict.fromkeys("12345", "scored")
    turns = {sid: len(r["transcript"]["turns"]) for sid, r in rows.items()}
    assert turns == {"1": 2, "2": 3, "3": 2, "4": 3, "5": 3}
    assert result.manifest.score.mean == pytest.approx(0.8)
    assert srv.settled_stats(sum(turns.values()))["statuses"] == {"200": sum(turns.values())}
    again = gradetrail.run_eval(spec, results_root=tmp_path / "results")
    assert srv.settled_stats()["total"] == sum(turns.values())
    assert again.manifest.cache_hits == 5


@pytest.mark.parametrize("client", CLIENTS)
def test_agent_loop_carries_reasoning_items_across_turns(srv, tmp_path: Path, client: str) -> None:
    """The calculator agent over /v1/responses with reasoning on: each turn's reasoning
    item (its encrypted content) goes back before the function calls it led to, which the
    server checks as the API does; three-turn samples complete; the answers score 4/5 as
    through Chat Completions; a re-run makes no call."""
    srv.configure(script=str(SCRIPT))
    spec = _agent_spec(tmp_path, srv, client, reasoning={"effort": "low", "summary": "auto"})
    _completes_the_calculator_agent(srv, spec, tmp_path)


@pytest.mark.parametrize("client", CLIENTS)
def test_reasoning_items_without_encrypted_content_are_not_sent_back(
    srv, tmp_path: Path, client: str
) -> None:
    """With an ``include`` of the spec's own (encrypted content is added to it; were it
    missing, the reasoning items would come back as ids only, which under ``store:
    false`` the API answers with a 404, and they are left out of the next turn's input):
    the three-turn samples complete (before: every sample past its first turn was a
    provider_error); a re-run makes no call."""
    srv.configure(script=str(SCRIPT))
    spec = _agent_spec(
        tmp_path, srv, client, reasoning={"effort": "low"}, include=["message.output_text.logprobs"]
    )
    _completes_the_calculator_agent(srv, spec, tmp_path)


def test_server_refuses_reasoning_items_it_never_stored(srv) -> None:
    """Under store: false a reasoning item sent back without its encrypted content (null,
    or absent) is the API's 404 "Item with id ... not found"."""
    body: dict[str, Any] = {
        "model": "175b_verification",
        "store": False,
        "input": [
            {"role": "user", "content": "go"},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": None},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "again"},
        ],
    }
    with pytest.raises(urllib.error.HTTPError) as refused:
        _post(srv, body)
    assert refused.value.code == 404
    assert "Item with id 'rs_1' not found" in refused.value.read().decode()
    body["store"] = True
    assert _post(srv, body)["status"] == "completed"


def test_server_refuses_function_calls_without_their_reasoning(srv) -> None:
    """The protocol server enforces what the API requires of store: false: a function call
    of a reasoning turn sent back without its reasoning item is a 400 (so the agent test
    above proves the items were carried)."""
    srv.configure(script={"rules": [{"contains": "go", "tool_calls": [{"name": "f"}]}]})
    body: dict[str, Any] = {
        "model": "175b_verification",
        "store": False,
        "reasoning": {"effort": "low"},
        "include": ["reasoning.encrypted_content"],
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        "input": [{"role": "user", "content": "go"}],
    }
    first = _post(srv, body)
    calls = [i for i in first["output"] if i["type"] == "function_call"]
    reasoning = [i for i in first["output"] if i["type"] == "reasoning"]
    result = {"type": "function_call_output", "call_id": calls[0]["call_id"], "output": "1"}
    body["input"] += [*calls, result]
    with pytest.raises(urllib.error.HTTPError) as refused:
        _post(srv, body)
    assert refused.value.code == 400
    assert "without its required 'reasoning' item" in refused.value.read().decode()
    body["input"] = [body["input"][0], *reasoning, *calls, result]
    assert _post(srv, body)["status"] == "completed"


def _post(srv: Any, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{srv.openai_base_url}/responses",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def test_cache_key_covers_the_api_and_keeps_chat_keys(srv, tmp_path: Path) -> None:
    """The provider name keys the API: the same prompt through Chat Completions and the
    Responses API are two cache entries; a Chat Completions key is what it always was."""
    from gradetrail.providers.base import Request

    common = {
        "model": "m",
        "base_url": None,
        "system": None,
        "messages": ({"role": "user", "content": "hi"},),
        "params": {},
    }
    chat = Request(provider="openai", **common).key()
    responses = Request(provider="openai_responses", **common).key()
    assert chat != responses
    # pinned: the Chat Completions key of this request before the Responses API existed
    assert chat == "4c45cdeb9393290163bd3940734458f969618b6d41b816d1d8d6db72ce1c1093"
    with pytest.raises(SpecError):
        gradetrail.load_spec(
            GSM8K_SPEC,
            ["model.provider=openai_responses", "model.base_url=http://127.0.0.1:1/v1"],
        )


def test_a_server_without_the_responses_api_says_to_use_openai_compatible(
    srv, tmp_path: Path
) -> None:
    """Nothing answers /responses at the base URL (a server speaking only Chat
    Completions): the 404 names the URL, model.base_url and openai_compatible."""
    spec = _spec(tmp_path, srv, "aiohttp", base_url=f"{srv.base_url}/chat-only/v1")
    out = run_http(spec, tmp_path)
    message = out.row["error"]["message"]
    assert out.row["attempts"] == 1
    assert f"nothing answered at {srv.base_url}/chat-only/v1/responses" in message
    assert "use openai_compatible" in message


def test_a_multi_turn_conversation_goes_as_input_items(srv, tmp_path: Path) -> None:
    """A spec's conversation (user, assistant, user) reaches the server as input items,
    the earlier assistant turn included; the system prompt as instructions."""
    srv.configure(
        script={
            "rules": [{"regex": "^Be terse\\.\\n.*\\nEARLIER-ANSWER 17\\n", "reply": "A: 18"}],
            "models": ["175b_verification"],
        }
    )
    spec = _spec(tmp_path, srv, "sdk")
    raw = spec.model_dump(mode="json", by_alias=True)
    raw["system"] = "Be terse."
    raw["prompt"] = [
        {"role": "user", "content": "{{ question }}"},
        {"role": "assistant", "content": "EARLIER-ANSWER 17"},
        {"role": "user", "content": "Check it. End with a line 'A: <answer>'."},
    ]
    spec = parse_spec(raw, source=str(tmp_path / "multi.yaml"))
    out = run_http(spec, tmp_path / "multi")
    assert out.row["response"] == "A: 18" and out.row["score"] == 1.0


@pytest.mark.parametrize(
    ("body", "kind", "transient", "words"),
    [
        (
            {"status": "failed", "error": {"code": "server_error", "message": "boom"}},
            "InvalidResponse",
            True,
            "server_error: boom",
        ),
        (
            {"status": "failed", "error": {"code": "rate_limit_exceeded", "message": "slow"}},
            "InvalidResponse",
            True,
            "rate_limit_exceeded",
        ),
        (
            {"status": "failed", "error": {"code": "invalid_prompt", "message": "flagged"}},
            "InvalidResponse",
            False,
            "invalid_prompt: flagged",
        ),
        ({"status": "queued", "output": []}, "InvalidResponse", False, "background"),
        ({"status": "completed", "output": []}, "InvalidResponse", False, "no content"),
    ],
)
def test_answers_that_are_not_responses_are_classified(
    body: dict[str, Any], kind: str, transient: bool, words: str
) -> None:
    """A failed response is retried as the status its error code means (a server error,
    a rate limit) or recorded at once; a background response still queued, or one with
    nothing in its output, is never cached (a content filter is an answer: see
    tests/providers/test_traffic_shapes.py)."""
    from gradetrail.errors import ProviderError
    from gradetrail.providers import make_provider
    from gradetrail.spec import ModelSpec

    spec = ModelSpec(provider="openai_responses", name="gpt-5")
    provider = make_provider(spec, Path("."))
    data = {"id": "resp_1", "object": "response", "model": "gpt-5", "output": [], **body}
    with pytest.raises(ProviderError) as caught:
        provider.normalize(data, 0.1)
    assert type(caught.value).__name__ == kind and caught.value.transient is transient
    assert words in str(caught.value)


@pytest.mark.parametrize("client", CLIENTS)
def test_a_content_filtered_response_is_an_answer_with_its_usage_and_cost(
    srv, tmp_path: Path, client: str
) -> None:
    """status incomplete, reason content_filter: the provider withheld the rest of an
    answer it billed. As Chat Completions' finish_reason content_filter (one refusal
    policy for every provider): stop reason content_filter, its usage and cost kept,
    counted as a refusal, cached, so a re-run does not pay for it again."""
    body = {
        "id": "resp_filtered",
        "object": "response",
        "created_at": 1,
        "model": "175b_verification",
        "status": "incomplete",
        "incomplete_details": {"reason": "content_filter"},
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "incomplete",
                "content": [{"type": "output_text", "text": "Step one is", "annotations": []}],
            }
        ],
        "usage": {
            "input_tokens": 40,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 3,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 43,
        },
    }
    srv.configure(faults=[{"kind": "answer", "body": body, "first": 1}])
    price = {"input_per_mtok": 1.0, "output_per_mtok": 2.0}
    spec = _spec(tmp_path, srv, client, price=price)
    out = run_http(spec, tmp_path)
    row = out.row
    # unfixed: a provider_error row (BadRequest "content filter withheld"), no tokens, no
    # cost, never cached: every re-run sent it, and paid for it, again
    assert row["state"] == "scored" and row["score"] == 0.0
    assert (row["stop_reason"], row["raw_stop_reason"]) == ("content_filter", "content_filter")
    assert row["response"] == "Step one is"
    assert (row["input_tokens"], row["output_tokens"]) == (40, 3)
    assert row["cost_usd"] == pytest.approx((40 * 1.0 + 3 * 2.0) / 1e6)
    assert out.result.manifest.refusals == 1
    again = run_http(spec, tmp_path)
    assert again.cached == 1 and srv.stats()["total"] == 1


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("policy", ["score", "exclude"])
def test_a_refusal_after_some_text_is_a_refusal(
    srv, tmp_path: Path, client: str, policy: str
) -> None:
    """A message whose content holds some text and then a refusal part: the model
    declined. As a Chat Completions message with content and a refusal, or Anthropic's
    refusal stop after text (one policy): stop reason refusal, counted, and left out of
    the mean under run.refusals: exclude."""
    body = {
        "id": "resp_refused",
        "object": "response",
        "created_at": 1,
        "model": "175b_verification",
        "status": "completed",
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [
                    {"type": "output_text", "text": "Step one is", "annotations": []},
                    {"type": "refusal", "refusal": "I can't continue."},
                ],
            }
        ],
        "usage": {"input_tokens": 30, "output_tokens": 8, "total_tokens": 38},
    }
    srv.configure(faults=[{"kind": "answer", "body": body, "first": 1}])
    out = run_http(_spec(tmp_path, srv, client, run={"refusals": policy}), tmp_path)
    row = out.row
    # unfixed: stop reason end_turn, refusals 0, scored under exclude too
    assert row["refusal"] == "I can't continue." and row["stop_reason"] == "refusal"
    assert out.result.manifest.refusals == 1
    if policy == "exclude":
        assert row["state"] == "judge_error" and row["error"]["reason"] == "refusal"
    else:
        assert row["state"] == "scored" and row["response"] == "Step one is"


@pytest.mark.parametrize("client", CLIENTS)
def test_a_flat_error_object_under_200_is_read_by_its_code(
    srv, tmp_path: Path, client: str
) -> None:
    """A 200 whose body is the API's flat error object (``{"type": "error", "code",
    "message"}``, its stream's error event shape, as a gateway may pass it on) is read by
    its code: a server error is retried (before: "no output list", recorded at once)."""
    body = {"type": "error", "code": "server_error", "message": "Try again.", "param": None}
    srv.configure(faults=[{"kind": "answer", "body": body, "first": 1}])
    out = run_http(_spec(tmp_path, srv, client), tmp_path)
    row = out.row
    assert row["state"] == "scored" and row["attempts"] == 2
    assert len(out.slept) == 1 and out.cached == 1


def _message(text: str, phase: str | None = None) -> dict[str, Any]:
    """A completed output message item (with ``phase`` when given, as GPT-5.4 labels
    its messages)."""
    item: dict[str, Any] = {
        "type": "message",
        "id": f"msg_{len(text)}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    if phase is not None:
        item["phase"] = phase
    return item


def _answer(*output: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "resp_phased",
        "object": "response",
        "created_at": 1,
        "model": "175b_verification",
        "status": "completed",
        "output": list(output),
        "usage": {"input_tokens": 50, "output_tokens": 20},
    }


@pytest.mark.parametrize("client", CLIENTS)
def test_a_commentary_message_is_working_not_the_answer(srv, tmp_path: Path, client: str) -> None:
    """An answer of a reasoning item, a commentary message (a preamble) and the final
    answer's message: the row's response is the final answer alone (before: 'Let me add
    up the eggs.A: 18'), the preamble kept after the summary in the reasoning text; a
    commentary message the model said nothing after is the answer."""
    summary = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "Sum."}],
    }
    srv.configure(
        faults=[
            {
                "kind": "answer",
                "first": 1,
                "body": _answer(
                    summary,
                    _message("Let me add up the eggs.", "commentary"),
                    _message("A: 18", "final_answer"),
                ),
            }
        ]
    )
    row = run_http(_spec(tmp_path, srv, client), tmp_path).row
    assert row["response"] == "A: 18" and row["score"] == 1.0
    assert row["reasoning"] == "Sum.\n\nLet me add up the eggs."
    srv.configure(
        faults=[{"kind": "answer", "first": 1, "body": _answer(_message("A: 18", "commentary"))}]
    )
    alone = run_http(_spec(tmp_path / "alone", srv, client), tmp_path / "alone").row
    assert alone["response"] == "A: 18" and "reasoning" not in alone


@pytest.mark.parametrize("client", CLIENTS)
def test_an_agent_turns_messages_go_back_in_order_with_their_phase(
    srv, tmp_path: Path, client: str
) -> None:
    """A tool-calling turn of a commentary message, a second one and a function call goes
    back as it came: both messages, each with its phase, before the call (before: one
    assistant message of both texts run together, no phase, so the scripted model, which
    reads its phases, did not see its preamble as its own and answered 9)."""
    call = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_eggs",
        "name": "calculate",
        "arguments": json.dumps({"expression": "16 - 3 - 4"}),
        "status": "completed",
    }
    first = _answer(
        _message("I'll work out the eggs left first.", "commentary"),
        _message("Then the money.", "commentary"),
        call,
    )
    first["model"] = "scripted-agent"
    rules = [
        {
            "regex": r"\[commentary\] I'll work out the eggs left first\.\n"
            r"\[commentary\] Then the money\.\n\[tool_call calculate",
            "last": "tool",
            "reply": "A: 18",
        },
        {"contains": "Janet", "last": "tool", "reply": "A: 9"},
    ]
    srv.configure(
        script={"rules": rules, "models": ["scripted-agent"]},
        faults=[{"kind": "answer", "first": 1, "body": first}],
    )
    spec = gradetrail.load_spec(
        EXAMPLES / "agent-calculator.yaml",
        [*_agent_overrides(srv, client), "dataset.limit=1"],
    )
    result = gradetrail.run_eval(spec, results_root=tmp_path / "results")
    (row,) = gradetrail.read_results(result.run_dir)
    turns = row["transcript"]["turns"]
    assert [t["tool_results"] for t in turns][0][0]["content"] == "9"
    assert row["response"] == "A: 18" and row["score"] == 1.0
    assert srv.stats()["total"] == 2


@pytest.mark.parametrize("client", CLIENTS)
def test_cache_writes_are_priced_at_the_write_rate_as_on_chat(
    srv, tmp_path: Path, client: str
) -> None:
    """input_tokens_details.cache_write_tokens (GPT-5.6's explicit prompt-cache writes)
    are part of the input, counted apart and priced at the cache-write rate, the row equal
    to Chat Completions' for the same usage (before: priced as plain input, 4.02e-3 USD
    instead of 5.031e-3, and no cache_write_tokens)."""
    usage = {
        "input_tokens": 4020,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 4012},
        "output_tokens": 4,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 4024,
    }
    answer = _answer(_message("A: 18"))
    answer["usage"] = usage
    srv.configure(faults=[{"kind": "answer", "first": 1, "body": answer}])
    row = run_priced(srv, tmp_path, "openai_responses", client, api_key_required=False).row
    assert (row["input_tokens"], row["cache_write_tokens"]) == (4020, 4012)
    assert row["cost_usd"] == pytest.approx((8 * 1.0 + 4012 * 1.25 + 4 * 2.0) / 1e6)
    chat_usage = {
        "prompt_tokens": 4020,
        "completion_tokens": 4,
        "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 4012},
    }
    chat_answer = {
        "id": "chatcmpl-w",
        "object": "chat.completion",
        "created": 1,
        "model": "175b_verification",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "A: 18"},
                "finish_reason": "stop",
            }
        ],
        "usage": chat_usage,
    }
    srv.configure(faults=[{"kind": "answer", "first": 1, "body": chat_answer}])
    chat = run_priced(srv, tmp_path / "chat", "openai_compatible", client).row
    fields = ("input_tokens", "cache_write_tokens", "cached_input_tokens", "output_tokens")
    assert [row[f] for f in fields] == [chat[f] for f in fields]
    assert row["cost_usd"] == chat["cost_usd"]


@pytest.mark.parametrize("client", CLIENTS)
def test_model_reasoning_is_sent_as_the_responses_reasoning(
    srv, tmp_path: Path, client: str
) -> None:
    """model.reasoning on openai_responses (before: refused at load, 'provider
    'openai_responses' sends no request; remove it') is sent as reasoning: {effort,
    summary: auto}, with the encrypted content included: the calculator agent completes
    with each turn's reasoning item carried back, as with the same reasoning in
    model.params.extra."""
    srv.configure(script=str(SCRIPT))
    reasoning = 'model.reasoning={"effort": "low", "summary": true}'
    spec = gradetrail.load_spec(
        EXAMPLES / "agent-calculator.yaml", [*_agent_overrides(srv, client), reasoning]
    )
    from gradetrail.providers import make_provider

    request = gradetrail.Request(
        provider="openai_responses",
        model=spec.model.name,
        base_url=srv.openai_base_url,
        system=None,
        messages=({"role": "user", "content": "hi"},),
        params={},
    )
    body = make_provider(spec.model, spec.base_dir).body(request)
    assert body["reasoning"] == {"effort": "low", "summary": "auto"}
    assert body["include"] == ["reasoning.encrypted_content"]
    _completes_the_calculator_agent(srv, spec, tmp_path)


def test_model_reasoning_is_checked_against_openais_families(tmp_path: Path) -> None:
    """An effort the model family does not take is one line at load, as on openai."""
    with pytest.raises(
        SpecError,
        match=r"model.reasoning.effort: gpt-5-mini \(.*\) takes "
        r"minimal, low, medium, high, not 'max'",
    ):
        gradetrail.load_spec(
            GSM8K_SPEC,
            [
                "model.provider=openai_responses",
                "model.name=gpt-5-mini",
                'model.reasoning={"effort": "max"}',
                "model.params.temperature=null",
            ],
        )


@pytest.mark.parametrize(
    ("provider", "model", "extra", "line"),
    [
        (
            "openai_responses",
            "gpt-4o",
            {"reasoning": {"effort": "low"}},
            r"model.params.extra.reasoning: gpt-4o \(.*\) is not a reasoning model; remove it",
        ),
        (
            "openai_responses",
            "gpt-4.1-mini",
            {"reasoning": {"summary": "auto"}},
            r"model.params.extra.reasoning: gpt-4.1-mini \(.*\) is not a reasoning model",
        ),
        (
            "openai_responses",
            "gpt-5-mini",
            {"reasoning": {"effort": "xhigh"}},
            r"model.params.extra.reasoning.effort: gpt-5-mini \(.*\) takes minimal, low, "
            r"medium, high, not 'xhigh'",
        ),
        (
            "openai_responses",
            "gpt-5-mini",
            {"reasoning": "low"},
            r"model.params.extra.reasoning: must be an object such as \{effort: low\}",
        ),
        (
            "openai",
            "gpt-4o-mini",
            {"reasoning_effort": "low"},
            r"model.params.extra.reasoning_effort: gpt-4o-mini \(.*\) is not a reasoning model",
        ),
        (
            "openai_responses",
            "gpt-4o",
            None,  # model.reasoning with a summary only: the same 400
            r"model.reasoning: gpt-4o \(.*\) is not a reasoning model; remove it",
        ),
    ],
)
def test_the_apis_own_reasoning_in_extra_is_checked_as_model_reasoning(
    provider: str, model: str, extra: dict | None, line: str
) -> None:
    """``reasoning`` (Responses) or ``reasoning_effort`` (Chat) in model.params.extra is
    checked at load against OpenAI's families as model.reasoning is: one line, exit 2,
    before any call (before: it went unchecked, and every row of gpt-4o was the API's 400
    "Unsupported parameter: 'reasoning.effort'")."""
    overrides = [f"model.provider={provider}", f"model.name={model}"]
    if extra is None:
        overrides.append('model.reasoning={"summary": true}')
    else:
        overrides.append(f"model.params.extra={json.dumps(extra)}")
    with pytest.raises(SpecError, match=line) as caught:
        gradetrail.load_spec(GSM8K_SPEC, overrides)
    assert caught.value.exit_code == 2


@pytest.mark.parametrize("client", CLIENTS)
def test_reasoning_in_extra_on_a_model_that_does_not_reason_sends_nothing(
    srv, tmp_path: Path, cli, client: str
) -> None:
    """Through the CLI: gpt-4o with extra reasoning {effort: low} at a server that answers
    it as the API does (400 'Unsupported parameter') is refused at load, exit 2, no request
    sent (before: 6 of 6 rows were that 400); the same effort on gpt-5-mini runs."""
    srv.configure(models=["*"])
    extra = {"params": {"extra": {"reasoning": {"effort": "low"}}}, "limit": 6}
    spec = _spec(tmp_path, srv, client, model="gpt-5-mini", **extra)
    run = ("run", str(spec.source), "--results-root", str(tmp_path / "r"))
    out = cli(*run, "--set", "model.name=gpt-4o")
    assert out.exit_code == 2
    assert out.stderr.strip().endswith(
        "model.params.extra.reasoning: gpt-4o (2026-12-03 table) is not a reasoning model; "
        "remove it"
    )
    assert srv.stats()["total"] == 0
    out = cli(*run)
    assert out.exit_code == 0, out.stderr
    assert srv.stats()["statuses"] == {"200": 6}


@pytest.mark.parametrize("client", CLIENTS)
def test_a_reasoning_model_reasoning_unasked_gets_its_reasoning_back(
    srv, tmp_path: Path, client: str
) -> None:
    """gpt-5-mini with no reasoning settings still reasons: reasoning.encrypted_content is
    asked for, so each tool turn's reasoning item comes back sealed and goes back on the
    next turn (before: never asked for, every item came back bare and was left out, 0
    returned); a model outside the reasoning families is never asked (the API's 400
    'Encrypted content is not supported with this model')."""
    script = json.loads(SCRIPT.read_text())
    script["models"] = ["gpt-5-mini", "gpt-4.1-mini"]
    srv.configure(script=script)
    overrides = [
        *_agent_overrides(srv, client),
        "model.name=gpt-5-mini",
        "model.params.temperature=null",
        "dataset.limit=2",
    ]
    spec = gradetrail.load_spec(EXAMPLES / "agent-calculator.yaml", overrides)
    result = gradetrail.run_eval(spec, results_root=tmp_path / "results")
    rows = gradetrail.read_results(result.run_dir)
    assert [len(r["transcript"]["turns"]) for r in rows] == [2, 3]
    assert [r["state"] for r in rows] == ["scored", "scored"]
    stats = srv.settled_stats(5)
    # every later turn sends back each earlier turn's item: 1 (sample 1), 1 + 2 (sample 2)
    assert stats["statuses"] == {"200": 5} and stats["reasoning_returned"] == 1 + 1 + 2
    srv.reset(config=False)
    plain = [*overrides[:-3], "model.name=gpt-4.1-mini", "dataset.limit=2"]
    spec = gradetrail.load_spec(EXAMPLES / "agent-calculator.yaml", plain)
    result = gradetrail.run_eval(spec, results_root=tmp_path / "plain")
    assert [r["state"] for r in gradetrail.read_results(result.run_dir)] == ["scored"] * 2
    assert srv.settled_stats(5)["statuses"] == {"200": 5}
