"""Reasoning models end to end (issue 21), through both HTTP clients against the local
protocol server, which enforces the API version's and the thinking-block rules as the
real Messages API does: one anthropic-version for both clients, an agent loop with
thinking that carries its signed thinking blocks back verbatim, and the model.reasoning
combinations the API refuses refused before any call."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import anthropic
import protocol_server
import pytest
import yaml
from http_support import SECRET_KEY, gsm8k_spec, run_http
from paths import EXAMPLES
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

import gradetrail
from gradetrail.errors import SpecError
from gradetrail.providers import make_provider
from gradetrail.spec.reasoning import FAMILIES

server = protocol_server_fixture(scope="module", name="server")
srv = fresh_protocol_server_fixture("server", name="srv")

CLIENTS = ("aiohttp", "sdk")
MODEL = "claude-sonnet-4-5"


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_KEY)


# --------------------------------------------------------------------------------------
# the API version


@pytest.mark.parametrize("client", CLIENTS)
def test_both_clients_send_one_api_version_and_a_temperature_spec_completes(
    srv, tmp_path: Path, client: str
) -> None:
    """Whatever the installed SDK's own default, both clients send 2023-06-01 unless the
    spec names another, so a spec with a temperature completes through either."""
    spec = gsm8k_spec(tmp_path, srv, "anthropic", http_client=client, params={"temperature": 0})
    out = run_http(spec, tmp_path)
    assert out.row["state"] == "scored" and out.row["score"] == 1.0
    assert srv.stats()["versions"] == {"2023-06-01": 1}


@pytest.mark.parametrize("client", CLIENTS)
def test_a_named_api_version_is_sent_and_keys_its_own_cache_entries(
    srv, tmp_path: Path, client: str
) -> None:
    """model.api_version reaches the server from both clients and enters the cache key
    (the default leaves keys as they were)."""
    spec = gsm8k_spec(tmp_path, srv, "anthropic", http_client=client, api_version="2026-10-21")
    out = run_http(spec, tmp_path)
    assert out.row["state"] == "scored" and srv.stats()["versions"] == {"2026-10-21": 1}
    named = make_provider(spec.model, spec.base_dir).identity()
    plain = gsm8k_spec(tmp_path / "p", srv, "anthropic", api_version="2023-06-01")
    assert named["api_version"] == "2026-10-21"
    assert "api_version" not in make_provider(plain.model, plain.base_dir).identity()


def test_sampling_params_under_the_new_version_are_refused_before_any_call(
    srv, tmp_path: Path
) -> None:
    """The server refuses temperature under 2026-10-21 as the API does; gradetrail refuses
    the spec before the first call, naming the field and the fix."""
    client = anthropic.Anthropic(base_url=srv.anthropic_base_url, api_key="k", max_retries=0)
    with pytest.raises(anthropic.BadRequestError, match="temperature: Extra inputs"):
        client.post(
            "/v1/messages",
            body={
                "model": "175b_verification",
                "max_tokens": 20,
                "temperature": 0.0,
                "messages": [{"role": "user", "content": "hi"}],
            },
            cast_to=object,
            options={"headers": {"anthropic-version": "2026-10-21"}},
        )
    with pytest.raises(SpecError, match=r"model\.params\.temperature: API version 2026-10-21"):
        gsm8k_spec(tmp_path, srv, "anthropic", api_version="2026-10-21", params={"temperature": 0})
    with pytest.raises(SpecError, match="model.api_version: only the anthropic provider"):
        gsm8k_spec(tmp_path, srv, "openai_compatible", api_version="2026-10-21")


# --------------------------------------------------------------------------------------
# agent loops with thinking

SCRIPT = {
    "rules": [
        {"regex": r"(?:\[tool_result[^\]]*\].*){3}", "reply": "9 eggs at $2. A: 18"},
        {
            "contains": "[tool_result",
            "last": "tool",
            "tool_calls": [{"name": "calculate", "arguments": {"expression": "9 * 2"}}],
        },
        {
            "contains": "Janet",
            "last": "user",
            "tool_calls": [{"name": "calculate", "arguments": {"expression": "16 - 3 - 4"}}],
        },
    ],
    "models": [MODEL],
}


def _agent_spec(
    tmp_path: Path, srv: Any, client: str, stream: bool | None = None
) -> gradetrail.EvalSpec:
    shutil.copy(EXAMPLES / "agent_tools" / "calculator.py", tmp_path / "thinking_tools.py")
    spec = {
        "name": "thinking-agent",
        "dataset": {"path": str(EXAMPLES / "data" / "gsm8k" / "test.jsonl"), "limit": 1},
        "prompt": "Q: {{ question }}",
        "target": "{{ answer.split('####')[-1] | trim }}",
        "model": {
            "provider": "anthropic",
            "name": MODEL,
            "base_url": srv.anthropic_base_url,
            "http_client": client,
            "tools_module": "thinking_tools",
            "params": {"max_tokens": 2048},
            "reasoning": {"budget_tokens": 1024},
            "stream": stream,
        },
        "scorer": {"type": "numeric", "marker": "A:"},
        "run": {"max_turns": 6, "max_retries": 0},
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(spec))
    return gradetrail.load_spec(path)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("redacted", [False, True], ids=["thinking", "redacted"])
@pytest.mark.parametrize("stream", [None, True], ids=["plain", "streamed"])
def test_agent_loop_with_thinking_completes_three_tool_turns(
    srv, tmp_path: Path, client: str, redacted: bool, stream: bool | None
) -> None:
    """Three tool turns, then the answer, against a server that refuses a tool-use turn
    sent back without its (signed, unaltered) thinking block: every turn is answered
    (streamed too: the signature comes in its own delta), the answer scores, and a re-run
    is served from the cache."""
    srv.configure(script=SCRIPT, redacted_thinking=redacted)
    spec = _agent_spec(tmp_path, srv, client, stream)
    result = gradetrail.run_eval(spec, results_root=tmp_path / "results")
    row = gradetrail.read_results(result.run_dir)[0]
    assert row["state"] == "scored" and row["score"] == 1.0, row.get("error")
    turns = row["transcript"]["turns"]
    assert len(turns) == 4 and [len(t["tool_calls"]) for t in turns] == [1, 1, 1, 0]
    stats = srv.stats()
    assert stats["statuses"] == {"200": 4} and stats["thinking_returned"] == 4
    assert row["reasoning_tokens"] > 0 and ("reasoning" in row) is not redacted
    again = gradetrail.run_eval(spec, results_root=tmp_path / "results")
    assert again.manifest.cache_hits == 1 and srv.stats()["total"] == 4


def _searched_then_called(thought: str) -> dict[str, Any]:
    """A Messages answer that thought, searched the web (a server tool), cited what it
    found in two text blocks, then called the calculator: what Claude writes with
    web_search and a tool of the caller's offered together."""
    signature = protocol_server.thinking_signature("thinking", thought)
    return {
        "id": "msg_searched",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [
            {"type": "thinking", "thinking": thought, "signature": signature},
            {
                "type": "server_tool_use",
                "id": "srvtoolu_ducks",
                "name": "web_search",
                "input": {"query": "Janet ducks eggs price"},
            },
            {
                "type": "web_search_tool_result",
                "tool_use_id": "srvtoolu_ducks",
                "content": [
                    {
                        "type": "web_search_result",
                        "url": "https://example.org/ducks",
                        "title": "Ducks",
                        "encrypted_content": "EqwTCioI",
                    }
                ],
            },
            {
                "type": "text",
                "text": "Eggs sell at $2.",
                "citations": [
                    {
                        "type": "web_search_result_location",
                        "url": "https://example.org/ducks",
                        "title": "Ducks",
                        "encrypted_index": "Eo8BCioI",
                        "cited_text": "$2 per egg",
                    }
                ],
            },
            {"type": "text", "text": " Let me count."},
            {
                "type": "tool_use",
                "id": "toolu_count",
                "name": "calculate",
                "input": {"expression": "(16 - 3 - 4) * 2"},
            },
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 900,
            "output_tokens": 120,
            "server_tool_use": {"web_search_requests": 1},
        },
    }


@pytest.mark.parametrize("client", CLIENTS)
def test_a_tool_turn_with_server_tool_results_goes_back_whole(
    srv, tmp_path: Path, client: str
) -> None:
    """A tool-use answer holding a web search's server_tool_use and web_search_tool_result
    blocks and cited text goes back on the next turn as it came, its blocks in order (the
    model answers from the search it sees: before, the turn was rebuilt as thinking, joined
    text and tool_use, the search blocks dropped, and the model answered without them);
    the rows are the same through both clients and a re-run makes no call."""
    srv.configure(
        script={
            "rules": [
                {
                    "regex": r"\[web_search_tool_result srvtoolu_ducks\].*Eggs sell at \$2\."
                    r".* Let me count\..*\[tool_call calculate .*\[tool_result 18\]",
                    "last": "tool",
                    "reply": "A: 18",
                },
                {"contains": "[tool_result", "last": "tool", "reply": "A: I can't say"},
            ],
            "models": [MODEL],
        },
        faults=[
            {"kind": "answer", "body": _searched_then_called("Search, then count."), "first": 1}
        ],
    )
    spec = _agent_spec(tmp_path, srv, client)
    result = gradetrail.run_eval(spec, results_root=tmp_path / "results")
    row = gradetrail.read_results(result.run_dir)[0]
    assert row["state"] == "scored" and row["score"] == 1.0, row.get("error") or row["response"]
    turns = row["transcript"]["turns"]
    assert [t["tool_calls"][0]["arguments"] for t in turns[:1]] == [
        {"expression": "(16 - 3 - 4) * 2"}
    ]
    assert len(turns) == 2 and turns[0]["tool_results"][0]["content"] == "18"
    assert srv.stats()["statuses"] == {"200": 2}
    again = gradetrail.run_eval(spec, results_root=tmp_path / "results")
    assert again.manifest.cache_hits == 1 and srv.stats()["total"] == 2


DEEPSEEK_SCRIPT = {
    "rules": [
        {"contains": "[tool_result 18]", "last": "tool", "reply": "A: 18", "reasoning": "So 18."},
        {
            "contains": "Janet",
            "last": "user",
            "reasoning": "Eggs left, times two dollars.",
            "tool_calls": [{"name": "calculate", "arguments": {"expression": "(16 - 3 - 4) * 2"}}],
        },
    ],
    "models": ["deepseek-v4-flash"],
}


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("stream", [None, True], ids=["plain", "streamed"])
def test_a_chat_tool_loop_sends_its_reasoning_content_back(
    srv, tmp_path: Path, client: str, stream: bool | None
) -> None:
    """DeepSeek's thinking mode over Chat Completions (openai_compatible): the tool-calling
    turn's reasoning_content goes back on its assistant message, which the server (as
    DeepSeek) requires, so the sample completes in two turns and scores (before, the
    second turn was DeepSeek's 400 'Missing reasoning_content', a provider_error); a
    re-run makes no call."""
    srv.configure(script=DEEPSEEK_SCRIPT)
    shutil.copy(EXAMPLES / "agent_tools" / "calculator.py", tmp_path / "thinking_tools.py")
    spec = _agent_spec(tmp_path, srv, client, stream).model_dump(by_alias=True)
    spec["model"] = {
        "provider": "openai_compatible",
        "name": "deepseek-v4-flash",
        "base_url": srv.openai_base_url,
        "api_key_required": False,
        "http_client": client,
        "tools_module": "thinking_tools",
        "stream": stream,
        "params": {"extra": {"thinking": {"type": "enabled"}}},
    }
    path = tmp_path / "deepseek.yaml"
    path.write_text(yaml.safe_dump(spec))
    spec = gradetrail.load_spec(path)
    result = gradetrail.run_eval(spec, results_root=tmp_path / "results")
    row = gradetrail.read_results(result.run_dir)[0]
    assert row["state"] == "scored" and row["score"] == 1.0, row.get("error")
    assert [len(t["tool_calls"]) for t in row["transcript"]["turns"]] == [1, 0]
    assert row["reasoning"] == "So 18."
    assert srv.stats()["statuses"] == {"200": 2}
    again = gradetrail.run_eval(spec, results_root=tmp_path / "results")
    assert again.manifest.cache_hits == 1 and srv.stats()["total"] == 2


def test_the_server_refuses_a_tool_turn_without_its_thinking_or_with_it_altered(srv) -> None:
    """The rule the loop above satisfies is enforced: dropped or edited thinking is a 400."""
    client = anthropic.Anthropic(base_url=srv.anthropic_base_url, api_key="k", max_retries=0)
    srv.configure(script=SCRIPT)
    first = client.post(
        "/v1/messages",
        body={
            "model": MODEL,
            "max_tokens": 2048,
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "tools": [{"name": "calculate", "input_schema": {"type": "object"}}],
            "messages": [{"role": "user", "content": "Q: Janet's ducks"}],
        },
        cast_to=object,
        options={"headers": {"anthropic-version": "2023-06-01"}},
    )
    thinking, call = first["content"][0], first["content"][-1]
    assert thinking["type"] == "thinking" and call["type"] == "tool_use"

    def again(assistant: list[dict]) -> None:
        client.post(
            "/v1/messages",
            body={
                "model": MODEL,
                "max_tokens": 2048,
                "thinking": {"type": "enabled", "budget_tokens": 1024},
                "tools": [{"name": "calculate", "input_schema": {"type": "object"}}],
                "messages": [
                    {"role": "user", "content": "Q: Janet's ducks"},
                    {"role": "assistant", "content": assistant},
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": call["id"], "content": "9"}
                        ],
                    },
                ],
            },
            cast_to=object,
            options={"headers": {"anthropic-version": "2023-06-01"}},
        )

    again([thinking, call])  # verbatim: accepted
    with pytest.raises(anthropic.BadRequestError, match="must start with a thinking block"):
        again([call])
    with pytest.raises(anthropic.BadRequestError, match="Invalid `signature`"):
        again([{**thinking, "thinking": thinking["thinking"] + " edited"}, call])


# --------------------------------------------------------------------------------------
# model.reasoning: mapped per family, what the API refuses refused before any call

REFUSED = [
    ("anthropic", MODEL, {"reasoning": {"budget_tokens": 1000}}, "at least|below the least"),
    ("anthropic", MODEL, {"reasoning": {"budget_tokens": 4096}}, "not below max_tokens"),
    (
        "anthropic",
        MODEL,
        {"reasoning": {"budget_tokens": 2048}, "params": {"temperature": 0, "max_tokens": 4096}},
        "temperature may only be 1",
    ),
    ("anthropic", "claude-opus-4-7", {"params": {"temperature": 0.5}}, "takes no temperature"),
    (
        "anthropic",
        "claude-opus-4-7",
        {"reasoning": {"budget_tokens": 2048}},
        "takes only adaptive thinking",
    ),
    ("anthropic", "claude-opus-4-6", {"reasoning": {"effort": "xhigh"}}, "not 'xhigh'"),
    ("anthropic", "claude-3-5-haiku", {"reasoning": {"effort": "low"}}, "takes no effort level"),
    ("openai", "gpt-5", {"params": {"temperature": 0}}, "only the default temperature"),
    ("openai", "gpt-5-mini-2025-08-07", {"params": {"stop": ["x"]}}, "takes no stop"),
    ("openai", "gpt-5.1", {"reasoning": {"effort": "minimal"}}, "not 'minimal'"),
    ("openai", "gpt-4o", {"reasoning": {"effort": "low"}}, "not a reasoning model"),
    ("openai", "o1-mini", {"reasoning": {"effort": "low"}}, "takes no reasoning effort"),
    ("openai", "o3", {"reasoning": {"budget_tokens": 2048}}, "take an effort, not a budget"),
    ("openai", "o4-mini", {"reasoning": {"summary": True}}, "returns no reasoning summary"),
    (
        "openai",
        "gpt-5",
        {"reasoning": {"effort": "low"}, "params": {"extra": {"reasoning_effort": "high"}}},
        "extra.reasoning_effort: model.reasoning sets it",
    ),
]


@pytest.mark.parametrize(("provider", "model", "fields", "match"), REFUSED)
def test_combinations_the_api_refuses_are_refused_before_any_call(
    tmp_path: Path, provider: str, model: str, fields: dict, match: str
) -> None:
    """One line naming the field and the fix, exit 2, before any request."""
    with pytest.raises(SpecError, match=match) as info:
        gsm8k_spec(tmp_path, None, provider, model=model, base_url="http://127.0.0.1:9", **fields)
    assert info.value.exit_code == 2 and "\n" not in str(info.value).strip()


ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "number"}},
    "required": ["answer"],
    "additionalProperties": False,
}


def test_a_forced_tool_with_thinking_enabled_is_refused_before_any_call(
    srv, tmp_path: Path
) -> None:
    """The Messages API refuses a forced tool with thinking enabled (budget_tokens), as the
    server does: tool_choice required or named, and response_format's forced answer tool,
    are refused with one line and exit 2 before any request (before, every request was a
    400, every row a provider_error); auto and adaptive thinking are let through."""
    thinking = {"budget_tokens": 2048}
    with pytest.raises(SpecError, match="refuses a forced tool with thinking enabled") as info:
        gsm8k_spec(
            tmp_path, srv, "anthropic", model=MODEL, reasoning=thinking,
            params={"max_tokens": 4096}, response_format={"schema": ANSWER_SCHEMA},
        )  # fmt: skip
    assert info.value.exit_code == 2 and "\n" not in str(info.value).strip()
    shutil.copy(EXAMPLES / "agent_tools" / "calculator.py", tmp_path / "thinking_tools.py")
    for choice, refused in (("required", True), ({"name": "calculate"}, True), ("auto", False)):
        spec = _agent_spec(tmp_path, srv, "aiohttp").model_dump(by_alias=True)
        spec["tool_choice"] = choice
        path = tmp_path / "forced.yaml"
        path.write_text(yaml.safe_dump(spec))
        if refused:
            with pytest.raises(SpecError, match="refuses a forced tool with thinking enabled"):
                gradetrail.load_spec(path)
        else:
            gradetrail.load_spec(path)
    assert srv.stats()["total"] == 0
    srv.configure(script=SCRIPT)
    client = anthropic.Anthropic(base_url=srv.anthropic_base_url, api_key="k", max_retries=0)
    body = {
        "model": MODEL,
        "max_tokens": 4096,
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "tools": [{"name": "calculate", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any"},
        "messages": [{"role": "user", "content": "Q: Janet's ducks"}],
    }
    headers = {"anthropic-version": "2023-06-01"}
    with pytest.raises(anthropic.BadRequestError, match="tool_choice forces tool use"):
        client.post("/v1/messages", body=body, cast_to=object, options={"headers": headers})
    body["thinking"] = {"type": "adaptive"}
    client.post("/v1/messages", body=body, cast_to=object, options={"headers": headers})


def _body(tmp_path: Path, provider: str, model: str, **fields: Any) -> dict[str, Any]:
    spec = gsm8k_spec(
        tmp_path, None, provider, model=model, base_url="http://127.0.0.1:9", **fields
    )
    p = make_provider(spec.model, spec.base_dir)
    request = gradetrail.Request(
        provider, model, None, None, ({"role": "user", "content": "q"},), {}
    )
    return p.body(request)


def test_the_reasoning_block_is_mapped_per_family(tmp_path: Path) -> None:
    """Budget families get thinking enabled; adaptive ones thinking adaptive with
    output_config.effort (and display where taken); OpenAI gets reasoning_effort."""
    a = _body(tmp_path / "a", "anthropic", MODEL, reasoning={"budget_tokens": 2048})
    assert a["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    b = _body(
        tmp_path / "b", "anthropic", "claude-opus-5", reasoning={"effort": "xhigh", "summary": True}
    )
    assert b["thinking"] == {"type": "adaptive", "display": "summarized"}
    assert b["output_config"] == {"effort": "xhigh"}
    c = _body(tmp_path / "c", "openai", "gpt-5-mini", reasoning={"effort": "minimal"})
    assert c["reasoning_effort"] == "minimal" and "temperature" not in c
    d = _body(tmp_path / "d", "openai_compatible", "qwen3", reasoning={"effort": "high"})
    assert d["reasoning_effort"] == "high"


def test_every_table_entry_is_dated_and_sourced() -> None:
    """Each family names the date its facts were read and where."""
    for family in FAMILIES:
        assert family.as_of >= "2026-01-01" and family.source.startswith("https://")


@pytest.mark.parametrize("client", CLIENTS)
def test_adaptive_thinking_reaches_the_server_and_its_text_is_kept_apart(
    srv, tmp_path: Path, client: str
) -> None:
    """An effort on an adaptive family turns thinking on at the server; the thinking
    text is the row's reasoning, the answer is scored alone; summary false drops the
    text but keeps the tokens."""
    srv.configure(
        script={"rules": [{"contains": "Q:", "reply": "A: 18"}], "models": ["claude-opus-4-6"]}
    )
    spec = gsm8k_spec(
        tmp_path,
        srv,
        "anthropic",
        model="claude-opus-4-6",
        http_client=client,
        reasoning={"effort": "low"},
    )
    out = run_http(spec, tmp_path)
    row = out.row
    assert row["response"] == "A: 18" and row["score"] == 1.0
    assert row["reasoning"].startswith("Reading the question:") and row["reasoning_tokens"] > 0
    quiet = gsm8k_spec(
        tmp_path / "q",
        srv,
        "anthropic",
        model="claude-opus-4-6",
        http_client=client,
        reasoning={"effort": "low", "summary": False},
    )
    out = run_http(quiet, tmp_path / "q")
    assert "reasoning" not in out.row and out.row["reasoning_tokens"] > 0


# --------------------------------------------------------------------------------------
# <think> in the answer text (open models served without a reasoning parser)


@pytest.mark.parametrize("client", CLIENTS)
def test_think_tags_are_stripped_and_an_unclosed_one_is_no_answer(
    srv, tmp_path: Path, client: str
) -> None:
    """Only the text after the last </think> is scored; a <think> never closed (the model
    ran out while reasoning) scores 0 as no answer, never its thinking read as one; the
    row keeps the whole text and the reasoning apart. reasoning_tags: [] opts out."""
    srv.configure(
        script={
            "rules": [
                {"contains": "Janet", "reply": "<think>Is it A: 17? No, 9 x 2.</think>\nA: 18"},
                {"contains": "robe", "reply": "<think>So A: 3, let me check the blue fib"},
            ]
        }
    )
    spec = gsm8k_spec(tmp_path, srv, "openai_compatible", http_client=client, limit=2)
    out = run_http(spec, tmp_path)
    closed, unclosed = out.rows
    assert closed["score"] == 1.0 and closed["scorer"]["extracted"] == "18"
    assert closed["response"].startswith("<think>Is it A: 17?")
    assert closed["reasoning"] == "Is it A: 17? No, 9 x 2."
    assert unclosed["state"] == "scored" and unclosed["score"] == 0.0
    assert "never closed" in unclosed["scorer"]["reason"]
    assert unclosed["reasoning_exhausted"] is True
    assert out.result.manifest.reasoning_exhausted == 1
    raw = gradetrail.load_spec(tmp_path / "spec.yaml", ["scorer.reasoning_tags=[]"])
    again = run_http(raw, tmp_path / "raw")
    assert [r["score"] for r in again.rows] == [1.0, 1.0]  # the thinking read as the answer


def test_the_viewer_shows_reasoning_apart_from_the_answer(srv, tmp_path: Path) -> None:
    """The run page says how many rows ran out while reasoning and how many output tokens
    were reasoning; the sample page shows the reasoning text apart, and the badge."""
    from starlette.testclient import TestClient

    from gradetrail.view.app import create_app

    srv.configure(
        script={
            "rules": [{"contains": "Q:", "reply": "<think>9 eggs left, times 2"}],
            "models": ["claude-opus-4-6"],
        }
    )
    spec = gsm8k_spec(
        tmp_path, srv, "anthropic", model="claude-opus-4-6", reasoning={"effort": "low"}
    )
    out = run_http(spec, tmp_path)
    client = TestClient(create_app(tmp_path / "results"), base_url="http://127.0.0.1")
    name = out.result.run_dir.name
    page = client.get(f"/runs/{name}").text
    assert "ran out of max_tokens while reasoning" in page
    assert f"(of which {out.row['reasoning_tokens']} reasoning)" in page
    sample = client.get(f"/runs/{name}/sample", params={"id": "1"}).text
    assert "ran out while reasoning" in sample and "Reading the question:" in sample


def test_new_fields_at_their_defaults_leave_identities_and_keys_as_they_were() -> None:
    """A spec that sets none of the fields issue 21 added has the identity body it had
    before them (the judge's model section included), and its provider adds nothing to
    the cache key."""
    from gradetrail.rundir.manifest import identity_body

    added = {"api_version", "reasoning", "pause_turn_continuations", "stream"}
    added |= {"reasoning_tags", "refusals", "server_tool_usd", "cache_write_1h_per_mtok"}

    def keys(value: Any) -> set[str]:
        if isinstance(value, dict):
            return set(value) | {k for v in value.values() for k in keys(v)}
        return set()

    for name in ("gsm8k.yaml", "gsm8k-judge.yaml"):
        spec = gradetrail.load_spec(EXAMPLES / name)
        assert not keys(identity_body(spec.model_dump(mode="json"))) & added
    spec = gradetrail.load_spec(EXAMPLES / "gsm8k.yaml", ["model.provider=anthropic"])
    assert make_provider(spec.model, spec.base_dir).identity() == {"default_max_tokens": 4096}


def test_a_python_application_reports_its_reasoning_like_a_provider(tmp_path: Path) -> None:
    """A model.function returning a Response with reasoning text and tokens gets the same
    row fields and summary counts as an API; a reasoning that is not text is refused."""
    (tmp_path / "thinking_app.py").write_text(
        "import gradetrail\n"
        "def answer(request):\n"
        "    bad = 'Tom' in request.prompt\n"
        "    return gradetrail.Response('A: 18', output_tokens=9, reasoning_tokens=7,\n"
        "                               reasoning=7 if bad else 'nine eggs, two dollars')\n"
    )
    rows = [{"id": "a", "q": "Janet", "a": "18"}, {"id": "b", "q": "Tom", "a": "18"}]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = {
        "name": "app",
        "dataset": {"path": str(data)},
        "prompt": "{{ q }}",
        "target": "{{ a }}",
        "model": {"provider": "python", "name": "app", "function": "thinking_app:answer"},
        "scorer": {"type": "numeric", "marker": "A:"},
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    result = gradetrail.run_eval(
        gradetrail.load_spec(tmp_path / "spec.yaml"), results_root=tmp_path / "results"
    )
    good, bad = gradetrail.read_results(result.run_dir)
    assert good["reasoning"] == "nine eggs, two dollars" and good["reasoning_tokens"] == 7
    assert bad["state"] == "provider_error" and "reasoning is int" in bad["error"]["message"]
    assert result.manifest.reasoning_tokens == 7
