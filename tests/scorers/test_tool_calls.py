"""The tool_calls scorer: BFCL-style allowed values, ordered / unordered / subset, F1
partial credit, and the bundled function-calling dataset scored through both protocols
with the real SDKs against the local protocol server."""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Literal

import pytest
from paths import EXAMPLES
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture
from pydantic import BaseModel

import gradetrail
from gradetrail.datasets import Sample
from gradetrail.scorers.base import ScoreInput
from gradetrail.scorers.tool_calls import ToolCallsScorer
from gradetrail.spec import ToolCallsScorerSpec

SPEC = EXAMPLES / "function-calling.yaml"
DATA = EXAMPLES / "data" / "function_calling"
SCRIPT = EXAMPLES / "data" / "function_calling" / "server_script.json"
server = protocol_server_fixture(scope="module", name="server", script=str(SCRIPT))
srv = fresh_protocol_server_fixture("server", name="srv")

#: per-row scores the scripted model earns (examples/data/function_calling/README.md)
UNORDERED = {
    "weather-paris": 1.0,
    "weather-tokyo": 1.0,
    "convert-usd-eur": 1.0,
    "weather-two-cities": 1.0,
    "convert-gbp-jpy": 0.0,
    "flight-and-weather": 0.0,
    "reminder": 0.0,
    "no-tool": 1.0,
    "weather-rome": 0.0,
}


def _score(expected, calls, tools=(), **spec):
    scorer = ToolCallsScorer(ToolCallsScorerSpec(type="tool_calls", **spec))
    sample = Sample(0, "s", {"expected_calls": expected}, 1)
    return scorer.score(ScoreInput(sample, 1, "", None, None, "", tuple(calls), tuple(tools)))


def _tool(name, **types):
    """A normalized tool definition whose parameters declare these JSON types."""
    properties = {arg: {"type": kind} for arg, kind in types.items()}
    return {
        "name": name,
        "description": "",
        "parameters": {"type": "object", "properties": properties},
    }


def _call(name, **arguments):
    return {"id": name, "name": name, "arguments": arguments}


def test_allowed_values_optional_arguments_and_type_aware_equality() -> None:
    """'' lets an argument be omitted; 2 equals 2.0 but true is not 1; strings compare
    normalized unless string_match is exact; an unexpected argument fails."""
    expected = [{"f": {"a": [2], "b": ["", "x"], "c": ["New York"]}}]
    assert _score(expected, [_call("f", a=2.0, c="new york")]).value == 1.0
    assert _score(expected, [_call("f", a=2, c="new york")], string_match="exact").value == 0.0
    assert _score([{"f": {"a": [1]}}], [_call("f", a=True)]).value == 0.0
    extra = _score(expected, [_call("f", a=2, c="New York", d=1)])
    assert extra.value == 0.0
    assert extra.detail["expected"][0]["arguments"]["d"]["reason"] == "unexpected"
    missing = _score(expected, [_call("f", c="New York")])
    assert missing.detail["expected"][0]["arguments"]["a"] == {
        "ok": False,
        "got": None,
        "allowed": [2],
        "reason": "missing",
    }


def test_expected_values_are_read_as_the_types_the_tool_schema_declares() -> None:
    """An expected "3" for an integer argument is 3, an expected 90210 for a string is
    "90210", "true" for a boolean is true (a dataset written loosely, a CSV column); the
    model's own value must have the declared type, and one that does not fails as a wrong
    type. Without a declared type nothing is converted."""
    tools = [_tool("f", days="integer", zip="string", metric="boolean", ratio=["number", "null"])]
    expected = [{"f": {"days": ["3"], "zip": [90210], "metric": ["true"], "ratio": ["", "0.5"]}}]
    right = [_call("f", days=3, zip="90210", metric=True, ratio=0.5)]
    assert _score(expected, right, tools).value == 1.0
    assert _score(expected, [_call("f", days=3.0, zip="90210", metric=True)], tools).value == 1.0
    wrong = _score(expected, [_call("f", days="3", zip=90210, metric="true")], tools)
    assert wrong.value == 0.0
    verdicts = wrong.detail["expected"][0]["arguments"]
    assert verdicts["days"]["reason"] == "wrong type (string; the schema says integer)"
    assert verdicts["zip"]["reason"] == "wrong type (integer; the schema says string)"
    assert verdicts["metric"]["reason"] == "wrong type (string; the schema says boolean)"
    assert verdicts["days"]["allowed"] == [3]
    assert _score(expected, right).value == 0.0  # no schema: "3" is not 3
    assert _score([{"f": {"days": ["three"]}}], [_call("f", days=3)], tools).value == 0.0


class _Unit(enum.Enum):
    C = "celsius"
    F = "fahrenheit"


class _Window(BaseModel):
    days: int
    hourly: bool = False


class _WeatherArgs(BaseModel):
    city: str
    unit: _Unit | None = None
    days: int | None = None
    window: _Window | None = None
    hours: list[int] = []
    mode: Literal["fast"] = "fast"


def _pydantic_tool() -> dict:
    """get_weather with the parameters schema pydantic writes: Optional fields as anyOf
    with null, the enum and the nested model as $ref into $defs, const for a Literal."""
    return {
        "name": "get_weather",
        "description": "",
        "parameters": _WeatherArgs.model_json_schema(),
    }


def test_expected_values_are_read_through_anyof_ref_enum_and_nested_schemas() -> None:
    """With pydantic's schema, "3" for an Optional[int] is 3, ["9", "12"] for a list[int]
    is [9, 12], and a nested model's fields are read too (BFCL's {key: [allowed]} form
    included); a model value that does not fit says why: a wrong type names the union's
    types, an enum member, a nested item or a const that does not fit quotes
    jsonschema."""
    tools = [_pydantic_tool()]
    expected = [
        {
            "get_weather": {
                "city": ["Paris"],
                "unit": ["", "celsius"],
                "days": ["", "3"],
                "window": ["", {"days": ["2"], "hourly": ["", "true"]}],
                "hours": ["", ["9", "12"]],
                "mode": ["", "fast"],
            }
        }
    ]
    right = _call("get_weather", city="Paris", unit="celsius", days=3, hours=[9, 12])
    assert _score(expected, [right], tools).value == 1.0
    nested = _call("get_weather", city="Paris", window={"days": 2, "hourly": True})
    assert _score(expected, [nested], tools).value == 1.0
    assert _score(expected, [right]).value == 0.0  # no schema: "3" is not 3
    wrong = _call(
        "get_weather",
        city="Paris",
        unit="kelvin",
        days="3",
        window={"days": "2"},
        hours=[9, "12"],
        mode="slow",
    )
    verdicts = _score(expected, [wrong], tools).detail["expected"][0]["arguments"]
    assert verdicts["days"]["allowed"] == ["", 3]
    assert verdicts["days"]["reason"] == "wrong type (string; the schema says integer or null)"
    assert verdicts["unit"]["reason"] == (
        "not valid for the schema ('kelvin' is not one of ['celsius', 'fahrenheit'])"
    )
    assert verdicts["window"]["reason"] == (
        "not valid for the schema (['days']: '2' is not of type 'integer')"
    )
    assert verdicts["hours"]["reason"] == (
        "not valid for the schema ([1]: '12' is not of type 'integer')"
    )
    assert verdicts["mode"]["reason"] == "not valid for the schema ('fast' was expected)"
    assert verdicts["city"]["ok"]


def test_type_lists_draft_07_definitions_and_ambiguous_unions() -> None:
    """OpenAI's strict form (type: [string, "null"]) and an MCP server's draft-07 schema
    with $ref into definitions read like pydantic's; where the union admits the value as
    written ("3" for integer-or-string) it stays as written; a $ref the schema cannot
    resolve (a remote one, never fetched) claims nothing."""
    parameters = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "definitions": {"Zip": {"type": ["string", "null"]}},
        "properties": {
            "zip": {"$ref": "#/definitions/Zip"},
            "code": {"type": ["integer", "string"]},
            "limit": {"type": ["integer", "null"]},
            "remote": {"$ref": "https://example.invalid/remote.json"},
        },
    }
    tools = [{"name": "f", "description": "", "parameters": parameters}]
    expected = [{"f": {"zip": [90210], "code": ["3"], "limit": ["10"], "remote": ["", "7"]}}]
    assert _score(expected, [_call("f", zip="90210", code="3", limit=10)], tools).value == 1.0
    loose = _score(expected, [_call("f", zip="90210", code=3, limit=10, remote=7)], tools)
    verdicts = loose.detail["expected"][0]["arguments"]
    assert verdicts["code"]["reason"] == "value not allowed"  # "3" fits as written
    assert verdicts["remote"] == {
        "ok": False,
        "got": 7,
        "allowed": ["", "7"],
        "reason": ("value not allowed"),
    }
    bad = _score(expected, [_call("f", zip=90210, code="3", limit=10)], tools)
    assert bad.detail["expected"][0]["arguments"]["zip"]["reason"] == (
        "wrong type (integer; the schema says string or null)"
    )


def test_parameters_behind_a_root_ref_and_allof_refs_are_read() -> None:
    """Parameters that are a $ref to their object, and a property written as pydantic 1
    did (allOf: [{$ref}] beside a description) to an integer enum, read like the rest:
    "2" is 2, and 3 is outside the enum."""
    parameters = {
        "$ref": "#/$defs/Args",
        "$defs": {
            "Args": {
                "type": "object",
                "properties": {"level": {"allOf": [{"$ref": "#/$defs/Level"}], "description": ""}},
            },
            "Level": {"enum": [1, 2], "type": "integer"},
        },
    }
    tools = [{"name": "f", "description": "", "parameters": parameters}]
    assert _score([{"f": {"level": ["2"]}}], [_call("f", level=2)], tools).value == 1.0
    wrong = _score([{"f": {"level": ["2"]}}], [_call("f", level=3)], tools)
    assert wrong.detail["expected"][0]["arguments"]["level"]["reason"] == (
        "not valid for the schema (3 is not one of [1, 2])"
    )


def test_object_arguments_in_bfcl_form_list_allowed_values_per_key() -> None:
    """BFCL writes an object argument's possible answer as {key: [allowed values]}, ""
    among them when the key may be omitted; a literal expected object still matches
    itself."""
    expected = [{"f": {"opts": [{"metric": [True], "lang": ["", "en", "de"]}]}}]
    assert _score(expected, [_call("f", opts={"metric": True})]).value == 1.0
    assert _score(expected, [_call("f", opts={"metric": True, "lang": "DE"})]).value == 1.0
    assert _score(expected, [_call("f", opts={"metric": False})]).value == 0.0
    assert _score(expected, [_call("f", opts={"lang": "en"})]).value == 0.0
    assert _score(expected, [_call("f", opts={"metric": True, "x": 1})]).value == 0.0
    literal = [{"f": {"opts": [{"tags": ["a", "b"]}]}}]
    assert _score(literal, [_call("f", opts={"tags": ["a", "b"]})]).value == 1.0


def test_modes_and_partial_credit_on_two_expected_calls() -> None:
    """Reversed calls pass unordered and fail ordered; one of two calls earns F1 2/3, a
    subset's recall 1/2; an extra call fails unordered but passes subset."""
    expected = [{"f": {"a": [1]}}, {"g": {}}]
    swapped = [_call("g"), _call("f", a=1)]
    assert _score(expected, swapped).value == 1.0
    assert _score(expected, swapped, mode="ordered").value == 0.0
    assert _score(expected, swapped, mode="ordered", partial_credit=True).value == 0.5
    half = [_call("f", a=1)]
    assert _score(expected, half, partial_credit=True).value == pytest.approx(2 / 3)
    assert _score(expected, half, mode="subset", partial_credit=True).value == 0.5
    more = [*swapped, _call("h")]
    assert _score(expected, more).value == 0.0
    assert _score(expected, more, mode="subset").value == 1.0
    assert _score(expected, more, partial_credit=True).value == pytest.approx(0.8)
    assert _score([], []).value == 1.0 and _score([], [_call("f")]).value == 0.0


def test_ordered_matching_keeps_the_longest_order_preserving_pairing() -> None:
    """In ordered mode three calls with the middle one wrong still pair the first and
    last (F1 2/3), and the detail names the failed call's closest attempt."""
    expected = [{"f": {"a": [1]}}, {"f": {"a": [2]}}, {"f": {"a": [3]}}]
    calls = [_call("f", a=1), _call("f", a=5), _call("f", a=3)]
    score = _score(expected, calls, mode="ordered", partial_credit=True)
    assert score.value == pytest.approx(2 / 3)
    middle = score.detail["expected"][1]
    assert middle["matched_call"] is None and middle["closest_call"] == 1
    assert middle["arguments"]["a"]["reason"] == "value not allowed"
    assert score.detail["unmatched_calls"] == [1]


def test_a_malformed_expected_field_is_refused_before_any_call(tmp_path: Path) -> None:
    """A first row whose expected calls are not BFCL-shaped stops the run (exit 2)."""
    scorer = ToolCallsScorer(ToolCallsScorerSpec(type="tool_calls"))
    sample = Sample(0, "s", {"expected_calls": {"f": 1}}, 1)
    with pytest.raises(gradetrail.errors.SpecError, match="must be a list"):
        scorer.check(ScoreInput(sample, 1, "", None, None, ""))


@pytest.mark.parametrize("value", ["missing", None, "get_weather", [{"a": 1, "b": 2}]])
def test_a_later_row_without_readable_expected_calls_is_refused_before_any_call(
    cli,  # noqa: ANN001
    srv,  # noqa: ANN001
    tmp_path: Path,
    value: object,
) -> None:
    """Not only the first row: a row whose expected calls are missing, null or not in the
    BFCL form stops the run with one line naming it, exit 2, before any call (before: it
    silently scored 0, as if the model had failed it)."""
    rows = [json.loads(line) for line in (DATA / "calls.jsonl").read_text().splitlines()]
    if value == "missing":
        del rows[4]["expected_calls"]
    else:
        rows[4]["expected_calls"] = value
    (tmp_path / "data" / "function_calling").mkdir(parents=True)
    (tmp_path / "data" / "function_calling" / "calls.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows)
    )
    spec = tmp_path / "fc.yaml"
    spec.write_text(SPEC.read_text())
    out = cli("run", str(spec), *_openai_overrides(srv))
    assert out.exit_code == 2
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("error: ") and f"sample {rows[4]['id']!r} (line 5)" in line
    assert srv.stats()["total"] == 0
    assert not (tmp_path / "results").exists()


def _openai_overrides(srv) -> list[str]:  # noqa: ANN001
    url = srv.openai_base_url
    sets = ["model.provider=openai_compatible", "model.name=scripted-fc", f"model.base_url={url}"]
    return [a for o in [*sets, "model.api_key_required=false"] for a in ("--set", o)]


@pytest.mark.parametrize("protocol", ["openai_compatible", "anthropic"])
def test_bundled_function_calling_dataset_scores_as_documented(
    srv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, protocol: str
) -> None:
    """The scripted model's calls (parallel, malformed arguments, an unknown tool) reach
    the scorer through each provider's native tool API: 5/9 unordered, 4/9 ordered,
    (5 + 2/3)/9 with partial credit, and the tools and tool_choice were sent."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    url = srv.anthropic_base_url if protocol == "anthropic" else srv.openai_base_url
    base = [
        f"model.provider={protocol}",
        "model.name=scripted-fc",
        f"model.base_url={url}",
    ]
    if protocol == "openai_compatible":
        base.append("model.api_key_required=false")
    means = {}
    for name, extra in {
        "unordered": [],
        "ordered": ["scorer.mode=ordered"],
        "f1": ["scorer.partial_credit=true"],
    }.items():
        spec = gradetrail.load_spec(SPEC, [*base, *extra])
        result = gradetrail.run_eval(spec, results_root=tmp_path / "results")
        means[name] = result.manifest.score.mean
        if name == "unordered":
            rows = {r["sample_id"]: r for r in gradetrail.read_results(result.run_dir)}
    assert {sid: r["score"] for sid, r in rows.items()} == UNORDERED
    assert means["unordered"] == pytest.approx(5 / 9)
    assert means["ordered"] == pytest.approx(4 / 9)
    assert means["f1"] == pytest.approx((5 + 2 / 3) / 9)
    stats = srv.stats()
    assert stats["total"] == 9  # the other two runs re-scored from the cache
    assert stats["tool_requests"] == 9
    assert stats["unmatched"] == 0
    reminder = rows["reminder"]["tool_calls"][0]
    assert reminder["arguments"] is None and "not valid JSON" in reminder["arguments_error"]
    assert rows["weather-rome"]["scorer"]["expected"][0]["reason"] == "no call to 'get_weather'"
    assert [c["arguments"]["city"] for c in rows["weather-two-cities"]["tool_calls"]] == [
        "London",
        "Paris",
    ]
    assert rows["weather-two-cities"]["stop_reason"] == "tool_use"
    assert rows["no-tool"]["transcript"]["stopped"] == "answered"
    assert rows["weather-paris"]["transcript"]["stopped"] == "tool_calls"


def _weather_tool(strict_schema: bool) -> dict:
    """get_weather with ``strict: true``; its parameters a strict schema or not."""
    parameters: dict = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"type": ["string", "null"]}},
        "required": ["city"],
    }
    if strict_schema:
        parameters.update(required=["city", "unit"], additionalProperties=False)
    function = {"name": "get_weather", "parameters": parameters, "strict": True}
    return {"type": "function", "function": function}


@pytest.mark.parametrize("client", ["aiohttp", "sdk"])
@pytest.mark.parametrize("protocol", ["openai_compatible", "openai_responses"])
def test_a_tools_strict_flag_is_sent(srv, tmp_path: Path, protocol: str, client: str) -> None:
    """``strict: true`` on a tool reaches the API (Chat Completions' ``function.strict``,
    the Responses API's ``strict``), which then holds its schema to strict mode: a schema
    that is not strict is the API's 400, a strict one is answered and scored (before, the
    flag was accepted and dropped, so no call was strict and the 400 never came)."""
    base = [
        f"model.provider={protocol}",
        "model.name=scripted-fc",
        f"model.base_url={srv.openai_base_url}",
        "model.api_key_required=false",
        f"model.http_client={client}",
        "dataset.limit=1",
        "run.max_retries=0",
    ]
    for strict_schema, state in ((False, "provider_error"), (True, "scored")):
        tools = json.dumps([_weather_tool(strict_schema)])
        spec = gradetrail.load_spec(SPEC, [*base, f"tools={tools}"])
        result = gradetrail.run_eval(spec, results_root=tmp_path / str(strict_schema))
        (row,) = gradetrail.read_results(result.run_dir)
        assert row["state"] == state, row.get("error")
        if state == "provider_error":
            assert row["error"]["status"] == 400
            assert "'additionalProperties' is required" in row["error"]["message"]
        else:
            assert row["score"] == 1.0


@pytest.mark.parametrize(
    ("provider", "where", "refused"),
    [
        ("openai", None, True),
        ("openai_responses", None, True),
        ("openai_responses", "https://api.openai.com/v1", True),
        ("openai_responses", "http://127.0.0.1:9/v1", False),  # another server's own rules
        ("openai_compatible", "http://127.0.0.1:9/v1", False),
    ],
)
def test_a_strict_tool_without_a_strict_schema_is_refused_at_load_for_openai(
    provider: str, where: str | None, refused: bool
) -> None:
    """A ``strict: true`` tool whose schema OpenAI's strict mode refuses (no
    additionalProperties: false) is one line at load, exit 2, for OpenAI itself: every
    request would be its 400 'Invalid schema for function' (before: each row that 400,
    until fail-fast). A strict schema loads; another server is not held to OpenAI's rules."""
    from gradetrail.errors import SpecError

    base = [f"model.provider={provider}", "model.name=gpt-4o", "model.api_key_env=KEY"]
    if where is not None:
        base.append(f"model.base_url={where}")
    if provider != "openai":
        base.append("model.api_key_required=true")
    loose = f"tools={json.dumps([_weather_tool(strict_schema=False)])}"
    if refused:
        with pytest.raises(SpecError, match="tools: 'get_weather' is strict: true, but its ") as e:
            gradetrail.load_spec(SPEC, [*base, loose])
        assert "at (root): an object needs additionalProperties: false" in str(e.value)
        assert e.value.exit_code == 2
    else:
        gradetrail.load_spec(SPEC, [*base, loose])
    gradetrail.load_spec(SPEC, [*base, f"tools={json.dumps([_weather_tool(True)])}"])


def test_the_protocol_server_refuses_tool_turns_the_real_apis_refuse(srv) -> None:
    """A tool result answering no call, a call left unanswered, a tool_choice naming no
    tool and Anthropic roles that do not alternate are 400s through the real SDKs, so a
    wrong native conversion fails the tests instead of passing silently."""
    import anthropic
    import openai

    oa = openai.OpenAI(base_url=srv.openai_base_url, api_key="k", max_retries=0)
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    bad_openai = [
        {
            "messages": [
                {"role": "user", "content": "x"},
                {"role": "tool", "tool_call_id": "z", "content": "1"},
            ]
        },
        {
            "messages": [
                {"role": "user", "content": "x"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "user", "content": "y"},
            ]
        },
        {
            "messages": [{"role": "user", "content": "x"}],
            "tools": [tool],
            "tool_choice": {"type": "function", "function": {"name": "g"}},
        },
    ]
    for body in bad_openai:
        with pytest.raises(openai.BadRequestError):
            oa.chat.completions.create(model="scripted-fc", **body)
    an = anthropic.Anthropic(base_url=srv.anthropic_base_url, api_key="k", max_retries=0)
    use = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
    bad_anthropic = [
        [{"role": "user", "content": "x"}, {"role": "user", "content": "y"}],
        [{"role": "assistant", "content": "x"}],
        [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": [use]},
            {"role": "user", "content": "no result"},
        ],
    ]
    for messages in bad_anthropic:
        with pytest.raises(anthropic.BadRequestError):
            an.messages.create(model="scripted-fc", max_tokens=10, messages=messages)
    ok = an.messages.create(
        model="scripted-fc",
        max_tokens=10,
        messages=[
            {"role": "user", "content": "What is 2 + 2?"},
            {"role": "assistant", "content": [use]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "4"}],
            },
        ],
        tools=[{"name": "f", "input_schema": {"type": "object"}}],
    )
    assert ok.content[0].text == "2 + 2 = 4."
    assert srv.stats()["tool_results"] == 1


def test_null_for_an_argument_that_may_be_omitted_is_the_argument_omitted() -> None:
    """Under OpenAI's strict function calling an optional argument is a required nullable
    one, so the model sends ``"unit": null`` where BFCL's answer writes ``""`` (may be
    omitted): that call scored 0 (``unit (value not allowed)``); it now matches, nested
    objects too, while null for an argument that must be given still fails."""
    strict = {
        "name": "get_weather",
        "description": "",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": ["string", "null"], "enum": ["celsius", "fahrenheit", None]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    }
    optional = [{"get_weather": {"city": ["Paris"], "unit": ["", "celsius"]}}]
    s = _score(optional, [_call("get_weather", city="Paris", unit=None)], [strict])
    assert s.value == 1.0, s.detail
    assert s.detail["expected"][0]["arguments"]["unit"]["ok"] is True
    nested = [{"f": {"opt": {"k": ["", "v"]}}}]
    assert _score(nested, [_call("f", opt={"k": None})]).value == 1.0
    required = [{"get_weather": {"city": ["Paris"], "unit": ["celsius"]}}]
    s = _score(required, [_call("get_weather", city="Paris", unit=None)], [strict])
    assert s.value == 0.0
    allowed_null = [{"get_weather": {"city": ["Paris"], "unit": ["", None]}}]
    assert _score(allowed_null, [_call("get_weather", city="Paris", unit=None)]).value == 1.0


@pytest.mark.parametrize("client", ["aiohttp", "sdk"])
def test_a_tool_without_strict_is_not_strict_on_the_responses_api(
    srv, tmp_path: Path, client: str
) -> None:
    """A tool that does not set strict goes to the Responses API with strict: false, as
    it means on Chat Completions and the Messages API (before: no strict field, which the
    Responses API takes as strict, making the optional 'unit' a parameter the model must
    fill); strict: true stays true; the run is answered and scored."""
    from gradetrail.conversation.tools import normalize_tools
    from gradetrail.providers import make_provider

    base = [
        "model.provider=openai_responses",
        "model.name=scripted-fc",
        f"model.base_url={srv.openai_base_url}",
        "model.api_key_required=false",
        f"model.http_client={client}",
        "dataset.limit=1",
    ]
    loose = _weather_tool(strict_schema=False)
    del loose["function"]["strict"]
    for tool, strict in ((loose, False), (_weather_tool(strict_schema=True), True)):
        spec = gradetrail.load_spec(SPEC, [*base, f"tools={json.dumps([tool])}"])
        provider = make_provider(spec.model, spec.base_dir)
        request = gradetrail.Request(
            provider="openai_responses",
            model="scripted-fc",
            base_url=srv.openai_base_url,
            system=None,
            messages=({"role": "user", "content": "x"},),
            params={},
            tools=normalize_tools([tool]),
        )
        (sent,) = provider.body(request)["tools"]
        assert sent["strict"] is strict
        result = gradetrail.run_eval(spec, results_root=tmp_path / str(strict))
        (row,) = gradetrail.read_results(result.run_dir)
        assert row["state"] == "scored" and row["score"] == 1.0


@pytest.mark.parametrize("client", ["aiohttp", "sdk"])
def test_a_messages_call_cut_at_max_tokens_is_no_call(
    srv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client: str
) -> None:
    """A Messages answer cut at max_tokens while writing get_weather, its input parsed by
    the API from the prefix to {"city": "Paris", "unit": "celsius"} (the object never
    closed): the call is cut, no arguments, the parsed prefix kept and the reason given
    (before: read as the model's finished call, scored 1.0), as a Chat call whose
    arguments text was cut is."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    body = {
        "id": "msg_cut",
        "type": "message",
        "role": "assistant",
        "model": "scripted-fc",
        "content": [
            {
                "type": "tool_use",
                "id": "toolu_cut",
                "name": "get_weather",
                "input": {"city": "Paris", "unit": "celsius"},
            }
        ],
        "stop_reason": "max_tokens",
        "stop_sequence": None,
        "usage": {"input_tokens": 90, "output_tokens": 12},
    }
    srv.configure(faults=[{"kind": "answer", "body": body, "status": 200, "first": 1}])
    overrides = [
        "model.provider=anthropic",
        "model.name=scripted-fc",
        f"model.base_url={srv.anthropic_base_url}",
        f"model.http_client={client}",
        "dataset.limit=1",
    ]
    spec = gradetrail.load_spec(SPEC, overrides)
    result = gradetrail.run_eval(spec, results_root=tmp_path / "results", use_cache=False)
    (row,) = gradetrail.read_results(result.run_dir)
    assert (row["sample_id"], row["truncated"], row["score"]) == ("weather-paris", True, 0.0)
    (call,) = row["tool_calls"]
    assert call["arguments"] is None
    assert call["raw_arguments"] == '{"city": "Paris", "unit": "celsius"}'
    assert call["arguments_error"].startswith("the call was cut at max_tokens")
