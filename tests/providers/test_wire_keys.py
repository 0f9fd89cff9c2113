"""The cache key follows what is sent: two requests with the same key send the same wire
(URL, body and every header that can change the answer), through the lean client and
the real SDKs, against the local protocol server; and the key and wire of fixed
requests of every HTTP provider are pinned, so a change of what is sent that leaves
the key alone (cached answers made under the old wire served for the new one) fails
here, as does a key that moves for a wire that did not (every user's cache lost).

Requests are rendered by the run's own renderer (the provider's identity, its tools as
offered) and sent by the provider's own transport; the server records what arrived."""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from http_support import SECRET_KEY, gsm8k_spec
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

import gradetrail
from gradetrail.datasets import load_samples
from gradetrail.engine.rendering import Renderer, prepare
from gradetrail.providers import make_provider
from gradetrail.spec.model import ModelSpec

server = protocol_server_fixture(scope="module", name="server", models=["*"])
srv = fresh_protocol_server_fixture("server", name="srv")

#: headers that cannot change the answer: credentials, the client's own, transport
QUIET_HEADERS = frozenset(
    [
        "accept",
        "accept-encoding",
        "authorization",
        "x-api-key",
        "api-key",
        "connection",
        "content-length",
        "content-type",
        "host",
        "user-agent",
        "openai-organization",
        "openai-project",
    ]
)

LOOSE_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
            "required": ["city"],
        },
    },
}
STRICT_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The time in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET_KEY)
    for name in ("OPENAI_ORG_ID", "OPENAI_PROJECT_ID", "ROUTE"):
        monkeypatch.delenv(name, raising=False)


def _spec(tmp_path: Path, srv: Any, protocol: str, overrides: list[str]) -> gradetrail.EvalSpec:
    """The first GSM8K problem over ``protocol`` at ``srv``, with ``overrides``."""
    directory = tmp_path / hashlib.sha256(json.dumps([protocol, overrides]).encode()).hexdigest()
    base = "anthropic" if protocol == "anthropic" else "openai_compatible"
    fields: dict[str, Any] = {} if base == "anthropic" else {"api_key_env": "OPENAI_API_KEY"}
    gsm8k_spec(directory, srv, base, **fields)
    own = [f"model.provider={protocol}"]
    if protocol in ("openai", "openai_responses"):
        own.append("model.api_key_required=true")
    return gradetrail.load_spec(directory / "spec.yaml", [*own, *overrides])


#: the base URL the pinned keys are computed at (OpenAI-style, Anthropic)
FIXED_URL = ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000")


def _wire(sent: dict[str, Any]) -> dict[str, Any]:
    """What of a request as it arrived can change the answer."""
    headers = {
        k: v
        for k, v in sent["headers"].items()
        if k not in QUIET_HEADERS and not k.startswith("x-stainless-")
    }
    return {"path": sent["path"], "query": sent["query"], "headers": headers, "body": sent["body"]}


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def keyed_wire(spec: gradetrail.EvalSpec, srv: Any) -> tuple[str, dict[str, Any]]:
    """The key of the spec's first request, rendered as a run renders it, and what its
    provider sent for it (:func:`_wire`)."""
    provider = make_provider(spec.model, spec.base_dir)
    provider.check_ready()
    samples = load_samples(spec.dataset, base_dir=spec.base_dir, where=spec.source)
    prepared = prepare(samples[0], 1, Renderer(spec, provider.identity(), provider))

    async def call() -> None:
        try:
            await provider.complete(prepared.request)
        finally:
            await provider.aclose()

    asyncio.run(call())
    assert prepared.request.key() == prepared.key
    # the server's port is the test's: the key as if it were always at one URL
    fixed = replace(prepared.request, base_url=FIXED_URL[spec.model.provider == "anthropic"])
    return fixed.key(), _wire(srv.sent()[-1])


TOOLS = f"tools={json.dumps([LOOSE_TOOL])}"
STRICT = f"tools={json.dumps([STRICT_TOOL])}"
SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "number"}},
    "required": ["answer"],
    "additionalProperties": False,
}
FORMAT = f"model.response_format={json.dumps({'name': 'answer', 'schema': SCHEMA})}"
INCLUDE = ["message.output_text.logprobs"]

#: case -> (protocol, overrides): fixed requests of every HTTP provider
CASES: dict[str, tuple[str, list[str]]] = {
    "chat": ("openai_compatible", ["model.params.temperature=0", "model.params.max_tokens=300"]),
    "chat_openai": ("openai", ["model.params.max_tokens=300", "model.params.seed=3"]),
    "chat_tools": ("openai_compatible", [TOOLS, "tool_choice=auto"]),
    "chat_format": ("openai_compatible", [FORMAT]),
    "anthropic": ("anthropic", []),
    "anthropic_tools": ("anthropic", [TOOLS, 'model.params.stop=["Q:"]']),
    "anthropic_thinking": ("anthropic", ['model.reasoning={"budget_tokens": 1024}']),
    "chat_reasoning": ("openai_compatible", ['model.reasoning={"effort": "low"}']),
    "anthropic_version": ("anthropic", ['model.api_version="2023-01-01"']),
    "responses": ("openai_responses", ["model.params.max_tokens=300"]),
    "responses_format": ("openai_responses", [FORMAT]),
    "responses_strict_tool": ("openai_responses", [STRICT]),
    "responses_loose_tool": ("openai_responses", [TOOLS]),
    "responses_reasoning": (
        "openai_responses",
        ['model.params.extra={"reasoning": {"effort": "low"}}'],
    ),
    "responses_family": ("openai_responses", ["model.name=gpt-5-mini"]),
    "responses_include": (
        "openai_responses",
        [f"model.params.extra={json.dumps({'reasoning': {'effort': 'low'}, 'include': INCLUDE})}"],
    ),
}

#: case -> (key, SHA-256 of the wire). A key that moves with its wire unchanged loses
#: every user's cached answers for such requests; a wire that moves with its key
#: unchanged serves answers cached under the old wire for the new one. Change what is
#: sent and the key together, for the requests whose wire changes and only them.
PINNED: dict[str, tuple[str, str]] = {
    "anthropic": (
        "beacc982fef5d4060d50a2d1603321df8d55616822f6022f7d252da8d4deddcb",
        "de26b5f8a60bf5783a64b0148948128ab31c69d2bc3d5d435a1b251ad1a8f161",
    ),
    "anthropic_thinking": (
        "2834abc490ee6c26590e61ed76560567a5d7cb30d9551323c2793a367ca859c0",
        "fc03fb2e7a2ffb35e292c9b469592dce5e073f7bfacbc0540de361b008b48180",
    ),
    "anthropic_tools": (
        "ab4e5e102a142ec89dcd1b83acfdbcbb9c45983f71c06800eaffdbdb8df80580",
        "ca21e8ae3e16ca13ee4a9f98f6efc8d221fc2c8457b3650c837648c908bc9447",
    ),
    "anthropic_version": (
        "48f9e5a4e6499ae516d2f47e6d0b14fe11ad6be7687690074751f03fdedbfdf4",
        "1f955145bc34778525d8faf22c409d6f4ee1eea1025f422f0aad94d567b08f0a",
    ),
    "chat": (
        "edd19bc3ae7531297b93595c2a28efde1a4121409c2646819ff5b54a0a9f236b",
        "0715e03e24b60e9c89b55ae9889b31c891d87a7f651250543c0992c054d7b3dd",
    ),
    "chat_format": (
        "0f091f2f6b1b9698e4795096b61738757d976bbc4bd6397d249605b429ce72d6",
        "29f06cc1fd92046d1ec2d7c2e3f94e9a970c618645fd6b7ceae7a95537ecfb42",
    ),
    "chat_openai": (
        "019917cc82895bd200a3f65cbb9342e7e50e8941a3e09d0cc6edc9765fa7e9d5",
        "7270bf6f12b5b94dea42a036b2bc4fa6f4311ecce520f9ecf8f529d66a460217",
    ),
    "chat_reasoning": (
        "463d905df2821a94258d4dd227cfad6041197a8d56edcb3c0efa3ebaa1e9fd9e",
        "779ddf681a801a9e9fbdc5b63ead8dc3e181d3926e9b73ae8fca2c94269080fb",
    ),
    "chat_tools": (
        "5fe91d65a06afed4372deddfed89e4966aa530782152a1b21378400469891138",
        "59d4f2701e5f08211d60b5b0cbb65c0b2464d758f7306021bf50ed9ecf18e9d5",
    ),
    "responses": (
        "b36f35fbcc44e702e5e3096a8e123ce4fc3cb1ef758f4d3c249a592877596755",
        "6c9a70a9bf45ff048feb98d5a24d5626679f63e38a614edf0e3e85f15894e11d",
    ),
    "responses_family": (
        "5d70a08359626d1fa5745b3f6c8cc16d0f5ace6e23e3c03a60c3c7272b60e6e3",
        "cdc47f3d1bd7b1d4aaeb3bc26e691402199647089242efeebfd87e15be86dd1a",
    ),
    "responses_format": (
        "c5afdeda639b1e50ea3d367b0f42ca50658faccfbf2eb53cae88a4451623dd3c",
        "8c80781605ef10d341f03d04129e1fc6fa380c7ef366e0ae4c6a07801888c675",
    ),
    "responses_include": (
        "86dc98648360afd556efca59a99dff2eeae4161f83be03705911b9d07c9ae485",
        "6d08e5da23735bab4db5138b76a72811c014557231174eaf1a0b106528dd0d49",
    ),
    "responses_loose_tool": (
        "6cf19654c03f57a2bacb5ce8bb4dbb67d68b917f25ce0ceb5c01867760749cfa",
        "19493b4e612834c39e50181c3b3e85a7755e39b6f349edc063177847b25715bc",
    ),
    "responses_reasoning": (
        "94e90c04771e3b7f287e18947196ea7e54246a9ee318578435b572e5df7a6f96",
        "2a45b77fb3d15851350217c2d959c787d4e430feb0cd3a245e3819a94c0febb7",
    ),
    "responses_strict_tool": (
        "fba40c8ada94170c4495725b2083fafe6c8cf889d9a0f21c1be6d4702952874a",
        "6b3501964e12f0c5410309d10cbf2659c0f7f9ca7ef5d661ec12283ac15d9d5e",
    ),
}

#: the keys three cases had while the Responses API's wire changed under them (a tool
#: without strict sent strict: false; include asking for the encrypted reasoning of a
#: reasoning family, or beside the spec's own include): the entries cached under them
#: answered the old wire, so these keys had to move (and only these)
STALE: dict[str, str] = {
    "responses_family": "615a4299ac0ed6461c22b781329bf15f290e3bb8409e7b7458caab4b7bcf16f7",
    "responses_include": "0104a060f6e56a206a942d916b99efc7149657ce645a09a1827d0b7c9703978d",
    "responses_loose_tool": "e26b38ca6f3f537f7e5ff2fb4e2b5bace1cb2d2f631077ce414c651849b4b6b0",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_fixed_requests_keep_their_keys_and_wire(srv, tmp_path: Path, case: str) -> None:
    """Each fixed request's key and wire are the pinned ones (see :data:`PINNED`)."""
    protocol, overrides = CASES[case]
    key, wire = keyed_wire(_spec(tmp_path, srv, protocol, overrides), srv)
    assert (key, _digest(wire)) == PINNED[case], json.dumps(wire, indent=1)[:3000]
    assert key != STALE.get(case)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_sdk_sends_what_the_lean_client_sends(srv, tmp_path: Path, case: str) -> None:
    """The official SDK's client and the plain-HTTP one (``auto`` at an http:// URL) send
    the same wire as the lean one, for the same key (the client is no part of the key:
    it must not change what is sent)."""
    protocol, overrides = CASES[case]
    sent = [
        keyed_wire(_spec(tmp_path, srv, protocol, [*overrides, f"model.http_client={c}"]), srv)
        for c in ("aiohttp", "sdk", "auto")
    ]
    assert sent[1] == sent[0] and sent[2] == sent[0]


#: model fields that change nothing sent (or only how an answer is carried back, or
#: which credential is sent): a variation of each keeps the wire, so it may keep the key
NOT_SENT = {
    "api_key_env",
    "api_key_required",
    "price",
    "http_client",
    "stream",
    "require_served_model",
    "recordings",
    "function",
    "pause_turn_continuations",  # decides the continuations, sent only after a pause
    "provider",  # its own cases below: every provider
    "name",
    "base_url",  # in the key itself: one server here
    "tools_module",  # an agent loop's later turns: the module's hash enters their keys
}

#: model field -> protocol -> variations (spec overrides) of that field
VARIED: dict[str, dict[str, list[list[str]]]] = {
    "params": {
        "openai_compatible": [
            ["model.params.temperature=0.5"],
            ["model.params.max_tokens=64"],
            ["model.params.top_p=0.5"],
            ['model.params.stop=["Q:"]'],
            ["model.params.seed=1"],
            ['model.params.extra={"n": 1}'],
        ],
        "anthropic": [
            ["model.params.temperature=0.5"],
            ["model.params.max_tokens=64"],
            ['model.params.stop=["Q:"]'],
            ['model.params.extra={"top_k": 5}'],
        ],
        "openai_responses": [
            ["model.params.temperature=0.5"],
            ["model.params.max_tokens=64"],
            ['model.params.extra={"reasoning": {"effort": "low"}}'],
            [f"model.params.extra={json.dumps({'include': INCLUDE})}"],
            ['model.params.extra={"reasoning": {"effort": "low"}, "include": []}'],
        ],
    },
    "reasoning": {
        "openai_compatible": [['model.reasoning={"effort": "low"}']],
        "anthropic": [['model.reasoning={"budget_tokens": 1024}']],
        "openai_responses": [
            ['model.reasoning={"effort": "low"}'],
            ['model.reasoning={"effort": "low", "summary": true}'],
        ],
    },
    "api_version": {"anthropic": [['model.api_version="2023-01-01"']]},
    "headers": {
        p: [['model.headers={"X-Route": "blue"}'], ['model.headers={"X-Route": "green"}']]
        for p in ("openai_compatible", "anthropic", "openai_responses")
    },
    "query": {
        p: [['model.query={"v": "1"}'], ['model.query={"v": "2"}']]
        for p in ("openai_compatible", "anthropic", "openai_responses")
    },
    "response_format": {
        p: [[FORMAT]] for p in ("openai_compatible", "anthropic", "openai_responses")
    },
}
#: what varies besides the model section: the tools, and a model the table knows
OTHERS: dict[str, list[list[str]]] = {
    "openai_compatible": [[TOOLS], [STRICT], [TOOLS, "tool_choice=required"]],
    "anthropic": [[TOOLS], [STRICT], [TOOLS, "tool_choice=required"]],
    "openai_responses": [
        [TOOLS],
        [STRICT],
        [TOOLS, "tool_choice=required"],
        ["model.name=gpt-5-mini"],
        ["model.name=gpt-4o"],
        ["model.name=gpt-5-mini", f"model.params.extra={json.dumps({'include': INCLUDE})}"],
    ],
}


def test_every_model_field_is_varied_or_known_not_sent() -> None:
    """A model field added later must be varied below (or named as not sent), so the
    equal-keys check covers it."""
    assert set(ModelSpec.model_fields) == NOT_SENT | set(VARIED)


@pytest.mark.parametrize("protocol", ["openai_compatible", "anthropic", "openai_responses"])
def test_requests_with_equal_keys_send_equal_wires(srv, tmp_path: Path, protocol: str) -> None:
    """Over one variation of each field that can change what is sent (and of the tools,
    and of models the reasoning table knows), any two requests with the same key sent
    the same wire: nothing that reaches the API is left out of the key."""
    variations = [[]] + [v for per in VARIED.values() for v in per.get(protocol, [])]
    variations += OTHERS[protocol]
    seen: dict[str, tuple[list[str], dict[str, Any]]] = {}
    for overrides in variations:
        key, wire = keyed_wire(_spec(tmp_path, srv, protocol, overrides), srv)
        if key in seen:
            first, sent = seen[key]
            assert wire == sent, f"{first} and {overrides} share a key but send different wires"
        seen[key] = (overrides, wire)
    assert len(seen) == len(variations)  # every variation here changes what is sent
