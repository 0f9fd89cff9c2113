"""The ``json`` scorer and structured outputs: the bundled order-extraction example (24
recorded answers) scores per field exactly as worked out by hand below, through replay
and through each provider's native schema request (Chat Completions ``response_format``,
Responses ``text.format``, Anthropic's forced tool) against the local protocol server;
bad schemas and targets are refused before any call."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from paths import EXAMPLES
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

import gradetrail
from gradetrail.providers import make_provider
from gradetrail.scorers.json_answer import compare_fields, parse_answer
from gradetrail.spec import JsonFieldRule

SPEC = EXAMPLES / "structured-output.yaml"
REPLIES = EXAMPLES / "data" / "orders" / "replies.jsonl"
server = protocol_server_fixture(scope="module", name="server")
srv = fresh_protocol_server_fixture("server", name="srv")

#: each row's score, worked out by hand from examples/data/orders (fields: customer.name,
#: customer.tier, each item's sku and qty, total, express)
BY_HAND = {
    "01": Fraction(1),  # right
    "02": Fraction(1),  # right, two items
    "03": Fraction(5, 6),  # tier gold for basic
    "04": Fraction(1),  # "edsger  DIJKSTRA": names compare normalized
    "05": Fraction(1),  # total 50.005 for 50.0: within abs_tol 0.01
    "06": Fraction(5, 6),  # total 121 for 120
    "07": Fraction(7, 8),  # items[1].qty 3 for 2
    "08": Fraction(6, 8),  # items[1] missing: its sku and qty
    "09": Fraction(8, 9),  # an extra items[2]: a failed field
    "10": Fraction(5, 6),  # express true for false
    "11": Fraction(0),  # cut-off JSON
    "12": Fraction(0),  # tier "diamond": not in the enum
    "13": Fraction(0),  # qty 0: under the minimum
    "14": Fraction(0),  # express missing: required
    "15": Fraction(0),  # total "12.50": a string
    "16": Fraction(1),  # right, in a ```json fence
    "17": Fraction(5, 6),  # in a bare fence, items[0].sku wrong
    "18": Fraction(0),  # JSON inside prose, unfenced: not JSON
    "19": Fraction(4, 8),  # the two items swapped: each position's sku and qty wrong
    "20": Fraction(1),  # qty 2.0 for 2: an integer by the schema, equal by value
    "21": Fraction(0),  # express "true": a string
    "22": Fraction(0),  # an additional property
    "23": Fraction(3, 6),  # name, qty and total wrong
    "24": Fraction(1),  # right, with no items (the empty array is one field)
}
FAILURES = {
    "11": ("invalid_json", None),
    "12": ("schema_violation", "/customer/tier"),
    "13": ("schema_violation", "/items/0/qty"),
    "14": ("schema_violation", "/"),
    "15": ("schema_violation", "/total"),
    "18": ("invalid_json", None),
    "21": ("schema_violation", "/express"),
    "22": ("schema_violation", "/"),
}


def _rows(result: gradetrail.RunResult) -> dict[str, dict[str, Any]]:
    return {r["sample_id"]: r for r in gradetrail.read_results(result.run_dir)}


def _check_by_hand(rows: dict[str, dict[str, Any]]) -> None:
    assert {sid: r["state"] for sid, r in rows.items()} == dict.fromkeys(BY_HAND, "scored")
    for sid, want in BY_HAND.items():
        assert rows[sid]["score"] == pytest.approx(float(want)), sid
        failure = rows[sid]["scorer"].get("failure")
        expected = FAILURES.get(sid)
        assert failure == (expected[0] if expected else None), sid
        if expected and expected[1] is not None:
            paths = [e["path"] for e in rows[sid]["scorer"]["schema_errors"]]
            assert paths == [expected[1]], sid


def test_example_through_replay_scores_each_field_as_by_hand(tmp_path: Path) -> None:
    """The bundled example: every row's score is the hand-worked one; the mean is their
    mean (0.5770); the detail names each failed field and what was wanted."""
    spec = gradetrail.load_spec(SPEC)
    result = gradetrail.run_eval(spec, results_root=tmp_path / "results", use_cache=False)
    rows = _rows(result)
    _check_by_hand(rows)
    mean = sum(BY_HAND.values()) / len(BY_HAND)
    assert result.manifest.score.mean == pytest.approx(float(mean))
    assert round(float(mean), 4) == 0.5770
    assert rows["03"]["scorer"]["fields"] == {
        "customer.name": 1.0,
        "customer.tier": 0.0,
        "items[0].sku": 1.0,
        "items[0].qty": 1.0,
        "total": 1.0,
        "express": 1.0,
    }
    assert rows["03"]["scorer"]["mismatches"] == {"customer.tier": {"got": "gold", "want": "basic"}}
    assert rows["08"]["scorer"]["mismatches"] == {
        "items[1].sku": {"want": "SKU-K2"},
        "items[1].qty": {"want": 1},
    }
    assert rows["09"]["scorer"]["mismatches"] == {
        "items[2]": {"got": {"sku": "SKU-Z9", "qty": 1}, "want": "absent"}
    }
    assert rows["16"]["scorer"]["fenced"] is True and rows["17"]["scorer"]["fenced"] is True
    assert "json_error" in rows["11"]["scorer"] and "answer" not in rows["11"]["scorer"]
    # a schema violation is recorded apart from its fields, which still show what matched
    assert rows["12"]["scorer"]["fields"]["customer.tier"] == 0.0
    assert rows["12"]["scorer"]["fields"]["total"] == 1.0


def _script() -> dict[str, Any]:
    rules = []
    for line in REPLIES.read_text().splitlines():
        row = json.loads(line)
        rules.append({"contains": f"Order {row['id']}:", "reply": row["order-extractor"]})
    return {"rules": rules, "models": ["order-extractor"]}


@pytest.mark.parametrize(
    ("provider", "client"),
    [
        ("openai_compatible", "aiohttp"),
        ("openai_responses", "aiohttp"),
        ("openai_responses", "sdk"),
        ("anthropic", "sdk"),
    ],
)
def test_each_provider_sends_the_schema_natively_and_scores_alike(
    srv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, provider: str, client: str
) -> None:
    """The same answers served over each protocol score as through replay. The server
    checks the schema's native shape (Chat Completions response_format, Responses
    text.format) and answers Anthropic's forced answer tool with a tool call, whose input
    the provider reads back as the JSON text."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    srv.configure(script=_script())
    url = srv.anthropic_base_url if provider == "anthropic" else srv.openai_base_url
    overrides = [
        f"model.provider={provider}",
        f"model.base_url={url}",
        f"model.http_client={client}",
        "model.recordings=null",
    ]
    if provider != "anthropic":
        overrides.append("model.api_key_required=false")
    spec = gradetrail.load_spec(SPEC, overrides)
    body = make_provider(spec.model, spec.base_dir).body(_request(spec))
    if provider == "openai_compatible":
        assert body["response_format"]["json_schema"]["name"] == "order"
    elif provider == "openai_responses":
        assert body["text"]["format"]["type"] == "json_schema"
    else:
        assert body["tool_choice"] == {"type": "tool", "name": "order"}
    result = gradetrail.run_eval(spec, results_root=tmp_path / "results", use_cache=False)
    rows = _rows(result)
    _check_by_hand(rows)
    assert srv.settled_stats(24)["statuses"] == {"200": 24}
    if provider == "anthropic":  # the tool's input, read back as text: no fence left
        assert rows["16"]["scorer"]["fenced"] is False
        assert rows["16"]["stop_reason"] == "end_turn" and not rows["16"]["tool_calls"]


def _request(spec: gradetrail.EvalSpec) -> gradetrail.Request:
    return gradetrail.Request(
        provider=spec.model.provider,
        model=spec.model.name,
        base_url=spec.model.base_url,
        system=None,
        messages=({"role": "user", "content": "Order 01: ..."},),
        params={},
    )


def test_the_schema_enters_the_cache_key_and_unset_keeps_old_keys(srv, tmp_path: Path) -> None:
    """A response_format (and a changed schema) keys its own entries; without one a
    provider's identity is empty, so every existing key is unchanged."""
    base = ["model.provider=openai_compatible", "model.base_url=http://127.0.0.1:9/v1"]
    base.append("model.api_key_required=false")
    with_schema = gradetrail.load_spec(SPEC, base)
    changed = gradetrail.load_spec(
        SPEC, [*base, "model.response_format.schema.properties.total.minimum=1"]
    )
    without = gradetrail.load_spec(SPEC, [*base, "model.response_format=null"])
    ids = [make_provider(s.model, s.base_dir).identity() for s in (with_schema, changed, without)]
    assert ids[0]["response_format"]["name"] == "order"
    assert ids[0] != ids[1] and ids[2] == {}


def test_a_bad_schema_is_one_line_exit_2_before_any_call(cli, tmp_path: Path) -> None:
    """A schema jsonschema refuses: one line naming the field and the schema path."""
    out = cli(
        "run", str(SPEC), "--set", "model.response_format.schema.properties.total.type=decimal"
    )
    assert out.exit_code == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "invalid JSON Schema at properties/total/type" in lines[0]
    out = cli("run", str(SPEC), "--set", "scorer.fields={'items..qty': {'match': 'exact'}}")
    assert out.exit_code == 2 and "is not a path" in out.stderr


def test_a_schema_strict_mode_refuses_is_one_line_exit_2_before_any_call(
    cli, srv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A strict response_format for OpenAI's own APIs whose schema breaks strict mode (a
    nested object without additionalProperties: false, a property left out of required)
    is one line naming the schema path, exit 2, before any call (before, every request
    was the API's 400, as the protocol server answers it); strict: false, or a server of
    another protocol (openai_compatible), runs it."""
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    loose = "model.response_format.schema.properties.customer.additionalProperties=true"
    optional = "model.response_format.schema.required=[customer, items, total]"
    for override, where in (
        (loose, "at properties/customer: an object needs additionalProperties: false"),
        (optional, "at (root): every property must be in required (not 'express')"),
    ):
        for provider, url in (("openai", "http://127.0.0.1:9/v1"), ("openai_responses", None)):
            where_to = ["--set", f"model.base_url={url}"] if url else []  # nothing listens
            out = cli(
                "run", str(SPEC), "--set", f"model.provider={provider}", *where_to,
                "--set", override,
            )  # fmt: skip
            assert out.exit_code == 2, out.stderr
            lines = out.stderr.strip().splitlines()
            assert len(lines) == 1 and where in lines[0] and "strict: false" in lines[0]
    srv.configure(script=_script())
    base = [
        "model.provider=openai_responses",
        f"model.base_url={srv.openai_base_url}",
        "model.api_key_required=false",
        "model.recordings=null",
        "dataset.limit=1",
        "run.max_retries=0",
        optional,
    ]
    spec = gradetrail.load_spec(SPEC, base)  # another server: not OpenAI's strict mode
    (row,) = gradetrail.read_results(gradetrail.run_eval(spec, results_root=tmp_path).run_dir)
    assert row["state"] == "provider_error" and row["error"]["status"] == 400
    assert "'required' is required to be supplied" in row["error"]["message"]
    spec = gradetrail.load_spec(SPEC, [*base, "model.response_format.strict=false"])
    (row,) = gradetrail.read_results(
        gradetrail.run_eval(spec, results_root=tmp_path / "loose").run_dir
    )
    assert row["state"] == "scored"


def test_a_target_that_breaks_the_schema_is_refused_before_any_call(tmp_path: Path) -> None:
    """A row whose expected answer does not follow the schema is the dataset's fault,
    named before any call."""
    rows = (EXAMPLES / "data" / "orders" / "orders.jsonl").read_text().splitlines()
    bad = json.loads(rows[0])
    bad["expected"]["customer"]["tier"] = "silver"
    data = tmp_path / "orders.jsonl"
    data.write_text("\n".join([json.dumps(bad), *rows[1:]]) + "\n")
    spec = gradetrail.load_spec(SPEC, [f"dataset.path={data}"])
    with pytest.raises(gradetrail.DatasetError, match=r"sample '01'.*/customer/tier"):
        gradetrail.run_eval(spec, results_root=tmp_path / "results", use_cache=False)


def test_parse_and_compare_edges() -> None:
    """Fences with or without a language, booleans never equal to numbers, tolerance only
    where a rule asks for it, ignored fields neither earn nor cost."""
    assert parse_answer('```json\n{"a": 1}\n```') == ({"a": 1}, True, None)
    assert parse_answer(' {"a": 1} ') == ({"a": 1}, False, None)
    value, fenced, error = parse_answer("no json here")
    assert value is None and not fenced and error.startswith("Expecting value")
    credit, misses = compare_fields({"a": True, "b": 1.0}, {"a": 1, "b": 1}, {})
    assert credit == {"a": 0.0, "b": 1.0} and misses == {"a": {"got": True, "want": 1}}
    rules = {"x": JsonFieldRule(match="numeric", rel_tol=0.1), "y": JsonFieldRule(match="ignore")}
    credit, _ = compare_fields({"x": 10.5, "y": "?", "z": 3}, {"x": 10, "y": "!", "z": 3}, rules)
    assert credit == {"x": 1.0, "z": 1.0}


@pytest.mark.parametrize(
    "text",
    [
        '```json {"a": 1} ```',  # a fence on one line
        '~~~json\n{"a": 1}\n~~~',  # tildes
        '```json\n{"a": 1}\n',  # left open at the end
        'Example:\n```json\n{"a": 0}\n```\nAnswer:\n```json\n{"a": 1}\n```',  # the last fence
        'Answer:\n```json\n{"a": 1}\n```\nThe code:\n```python\nprint(1)\n```',
    ],
)
def test_the_last_fence_holding_json_is_read_in_any_fence_form(text: str) -> None:
    """A fence on one line, with tildes or left open was invalid JSON, and the first fence
    (an example) was read before the answer's."""
    assert parse_answer(text) == ({"a": 1}, True, None)


@pytest.mark.parametrize("text", ['\ufeff{"a": 1}', '`{"a": 1}`', ' `{"a": 1}` \n'])
def test_a_byte_order_mark_or_inline_backticks_around_the_json_are_not_part_of_it(
    text: str,
) -> None:
    """A leading byte-order mark or one pair of backticks around the whole answer made
    it invalid JSON."""
    assert parse_answer(text) == ({"a": 1}, False, None)


def test_a_reasoning_models_thinking_before_the_json_is_not_read(tmp_path: Path) -> None:
    """``<think>...</think>`` before the JSON (an open model served without a reasoning
    parser) made every answer invalid JSON: the json scorer had no reasoning_tags, so it
    read the thinking; the answer after the tag is now read, as by the other scorers."""
    (tmp_path / "data.jsonl").write_text('{"id": "1", "q": "x", "expected": {"a": 1}}\n')
    reply = '<think>Maybe {"a": 3}? No.</think>\n\n{"a": 1}'
    (tmp_path / "replies.jsonl").write_text(json.dumps({"id": "1", "m": reply}) + "\n")
    spec = {
        "name": "json-think",
        "dataset": {"path": str(tmp_path / "data.jsonl")},
        "prompt": "{{ q }}",
        "target": "{{ expected | tojson }}",
        "model": {
            "provider": "replay",
            "name": "m",
            "recordings": {"path": str(tmp_path / "replies.jsonl")},
        },
        "scorer": {"type": "json", "schema": {"type": "object", "required": ["a"]}},
    }
    (tmp_path / "spec.yaml").write_text(json.dumps(spec))
    loaded = gradetrail.load_spec(tmp_path / "spec.yaml")
    result = gradetrail.run_eval(loaded, results_root=tmp_path / "results", use_cache=False)
    (row,) = gradetrail.read_results(result.run_dir)
    assert row["score"] == 1.0 and row["scorer"]["answer"] == {"a": 1}, row["scorer"]


#: sample 01's order cut at max_tokens as each API returns it: Chat Completions'
#: ``length`` and the Responses API's ``max_output_tokens`` with the JSON's prefix as
#: text; Anthropic's forced answer tool with the input the API parsed of the cut object,
#: ``{}`` or a prefix that still follows the schema (items written last, none finished)
_CUT_JSON = '{"customer": {"name": "Ada Lovelace", "tier": "gold"}, "items": [{"sku": "SKU'
_CUT_ORDERS = {
    "chat": (
        "openai_compatible",
        {
            "id": "chatcmpl-cut",
            "object": "chat.completion",
            "created": 1,
            "model": "order-extractor",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": _CUT_JSON},
                    "finish_reason": "length",
                }
            ],
            "usage": {"prompt_tokens": 60, "completion_tokens": 24},
        },
    ),
    "responses": (
        "openai_responses",
        {
            "id": "resp_cut",
            "object": "response",
            "created_at": 1,
            "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"},
            "model": "order-extractor",
            "output": [
                {
                    "type": "message",
                    "id": "msg_cut",
                    "role": "assistant",
                    "status": "incomplete",
                    "content": [{"type": "output_text", "text": _CUT_JSON, "annotations": []}],
                }
            ],
            "usage": {"input_tokens": 60, "output_tokens": 24},
        },
    ),
}
for _name, _input in {
    "anthropic-empty": {},
    "anthropic-prefix": {
        "customer": {"name": "Ada Lovelace", "tier": "gold"},
        "total": 25.0,
        "express": True,
        "items": [],
    },
}.items():
    _CUT_ORDERS[_name] = (
        "anthropic",
        {
            "id": "msg_cut",
            "type": "message",
            "role": "assistant",
            "model": "order-extractor",
            "content": [{"type": "tool_use", "id": "toolu_cut", "name": "order", "input": _input}],
            "stop_reason": "max_tokens",
            "stop_sequence": None,
            "usage": {"input_tokens": 60, "output_tokens": 24},
        },
    )


@pytest.mark.parametrize("client", ["aiohttp", "sdk"])
@pytest.mark.parametrize("case", sorted(_CUT_ORDERS))
def test_a_json_answer_cut_at_max_tokens_is_truncated_on_every_api(
    srv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, client: str
) -> None:
    """A structured answer cut at max_tokens scores 0 with failure truncated and a reason
    saying to raise max_tokens, alike on the three APIs (before: invalid_json on the
    OpenAI APIs, and Anthropic's cut answer tool input read as the answer: '{}' a schema
    violation, the prefix 4/6 of the fields, 0.667, as if the model had finished)."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    provider, body = _CUT_ORDERS[case]
    fault = {"kind": "answer", "body": body, "status": 200, "first": 1}
    srv.configure(script=_script(), faults=[fault])
    url = srv.anthropic_base_url if provider == "anthropic" else srv.openai_base_url
    overrides = [
        f"model.provider={provider}",
        f"model.base_url={url}",
        f"model.http_client={client}",
        "model.recordings=null",
        "dataset.limit=1",
    ]
    if provider != "anthropic":
        overrides.append("model.api_key_required=false")
    spec = gradetrail.load_spec(SPEC, overrides)
    result = gradetrail.run_eval(spec, results_root=tmp_path / "results", use_cache=False)
    row = _rows(result)["01"]
    assert row["error"] is None, row["error"]
    assert (row["state"], row["score"]) == ("scored", 0.0)
    assert (row["stop_reason"], row["truncated"]) == ("max_tokens", True)
    assert row["scorer"]["failure"] == "truncated"
    assert row["scorer"]["reason"] == (
        "the response stopped at max_tokens before its JSON was complete; raise "
        "model.params.max_tokens"
    )
    assert "answer" not in row["scorer"]


#: sample 01 declined instead of answered, as each API says it: Chat Completions'
#: message.refusal, a Responses refusal part, Anthropic's stop_reason refusal (no tool
#: call, its explanation in stop_details)
_DECLINED = {
    "chat": (
        "openai_compatible",
        {
            "id": "chatcmpl-no",
            "object": "chat.completion",
            "created": 1,
            "model": "order-extractor",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": None, "refusal": "I can't."},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 60, "completion_tokens": 4},
        },
    ),
    "responses": (
        "openai_responses",
        {
            "id": "resp_no",
            "object": "response",
            "created_at": 1,
            "status": "completed",
            "model": "order-extractor",
            "output": [
                {
                    "type": "message",
                    "id": "msg_no",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "refusal", "refusal": "I can't."}],
                }
            ],
            "usage": {"input_tokens": 60, "output_tokens": 4},
        },
    ),
    "anthropic": (
        "anthropic",
        {
            "id": "msg_no",
            "type": "message",
            "role": "assistant",
            "model": "order-extractor",
            "content": [],
            "stop_reason": "refusal",
            "stop_sequence": None,
            "stop_details": {"type": "refusal", "explanation": "I can't."},
            "usage": {"input_tokens": 60, "output_tokens": 4},
        },
    ),
}


@pytest.mark.parametrize("client", ["aiohttp", "sdk"])
@pytest.mark.parametrize("case", sorted(_DECLINED))
def test_a_refusal_instead_of_json_is_a_refusal_on_every_api(
    srv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, client: str
) -> None:
    """A declined structured answer scores 0 with failure refusal, the refusal text in the
    row and counted in the manifest, alike on the three APIs (before: failure invalid_json,
    'Expecting value at line 1 column 1', as if the model had written broken JSON)."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    provider, body = _DECLINED[case]
    fault = {"kind": "answer", "body": body, "status": 200, "first": 1}
    srv.configure(script=_script(), faults=[fault])
    url = srv.anthropic_base_url if provider == "anthropic" else srv.openai_base_url
    overrides = [
        f"model.provider={provider}",
        f"model.base_url={url}",
        f"model.http_client={client}",
        "model.recordings=null",
        "dataset.limit=1",
    ]
    if provider != "anthropic":
        overrides.append("model.api_key_required=false")
    spec = gradetrail.load_spec(SPEC, overrides)
    result = gradetrail.run_eval(spec, results_root=tmp_path / "results", use_cache=False)
    row = _rows(result)["01"]
    assert row["error"] is None, row["error"]
    assert (row["state"], row["score"], row["response"]) == ("scored", 0.0, "")
    assert (row["stop_reason"], row["refusal"]) == ("refusal", "I can't.")
    assert row["scorer"]["failure"] == "refusal"
    assert result.manifest.refusals == 1
