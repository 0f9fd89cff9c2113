"""Values nested past what recursive code can walk never end a run: a model's tool-call
arguments nested deeper than 100 levels are kept as text and flagged, an answer nested
past Python's recursion limit is an InvalidResponse row (before, both were a
RecursionError traceback, on every re-run, after paying), and a tool schema nested deeper
than 64 levels is one line, exit 2 (before: a traceback from the schema checker). Real
SDK-shaped answers from the local protocol server, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

import gradetrail

server = protocol_server_fixture(scope="module", name="server", models=["*"])
srv = fresh_protocol_server_fixture("server", name="srv")


def _nested(levels: int) -> dict:
    value: dict = {"leaf": 1}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def _spec(tmp_path: Path, srv, protocol: str, parameters: dict | None = None) -> str:  # noqa: ANN001
    (tmp_path / "d.jsonl").write_text(json.dumps({"id": "1", "q": "weather?", "expected": []}))
    url = srv.anthropic_base_url if protocol == "anthropic" else srv.openai_base_url
    model = {"provider": protocol, "name": "scripted", "base_url": url}
    if protocol == "openai_compatible":
        model["api_key_required"] = False
    tool = {"name": "get_weather", "parameters": parameters or {"type": "object"}}
    spec = {
        "name": "deep",
        "dataset": {"path": "d.jsonl"},
        "prompt": "{{ q }}",
        "tools": [{"type": "function", "function": tool}],
        "model": {**model},
        "scorer": {"type": "tool_calls", "expected_field": "expected"},
        "run": {"max_retries": 0},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")


@pytest.mark.parametrize("protocol", ["openai_compatible", "anthropic"])
def test_deeply_nested_tool_arguments_are_flagged_not_a_crash(
    cli,  # noqa: ANN001
    srv,  # noqa: ANN001
    tmp_path: Path,
    protocol: str,
) -> None:
    """Arguments nested past the bound (OpenAI: JSON text 5,000 levels deep, which
    Python's JSON reader cannot read; Anthropic: an object 150 levels deep): the call is
    recorded with its arguments None and the reason, scored, cached; a re-run pays
    nothing. Arguments 100 levels deep are kept as they are."""
    fine = _nested(100)
    deep: object = _nested(150)
    if protocol == "openai_compatible":  # sent verbatim as the arguments text
        deep = '{"a": ' + "[" * 5000 + "]" * 5000 + "}"
    srv.configure(
        script=[{"contains": "weather", "tool_calls": [{"name": "get_weather", "arguments": deep}]}]
    )
    spec = _spec(tmp_path, srv, protocol)
    out = cli("run", spec, "--json")
    assert out.exit_code == 0, out.stderr
    (row,) = gradetrail.read_results(json.loads(out.stdout)["run_dir"])
    (call,) = row["tool_calls"]
    assert call["arguments"] is None
    assert call["arguments_error"] == "arguments nest deeper than 100 levels"
    assert row["state"] == "scored" and row["score"] == 0.0
    assert json.loads(cli("run", spec, "--json").stdout)["cache_hits"] == 1
    assert srv.stats()["total"] == 1
    srv.configure(
        script=[{"contains": "weather", "tool_calls": [{"name": "get_weather", "arguments": fine}]}]
    )
    out = cli("run", spec, "--json", "--no-cache")
    (row,) = gradetrail.read_results(json.loads(out.stdout)["run_dir"])
    assert row["tool_calls"][0]["arguments"] == fine


def test_an_answer_nested_past_the_recursion_limit_is_an_invalid_response_row(
    cli,  # noqa: ANN001
    srv,  # noqa: ANN001
    tmp_path: Path,
) -> None:
    """A 200 body nested 5,000 levels deep: one provider_error row (InvalidResponse),
    never cached, and the run ends with its summary (exit 1: nothing scored)."""
    body = '{"choices": [{"message": {"content": "x", "junk": ' + "[" * 5000 + "]" * 5000
    srv.configure(faults=[{"kind": "garbage_200", "body": body + "}}]}"}])
    out = cli("run", _spec(tmp_path, srv, "openai_compatible"), "--json")
    assert out.exit_code == 1
    (row,) = gradetrail.read_results(json.loads(out.stdout)["run_dir"])
    assert row["state"] == "provider_error"
    assert row["error"]["kind"] == "InvalidResponse"
    assert "nested too deeply" in row["error"]["message"]


def test_a_tool_schema_nested_too_deeply_is_one_line_exit_2(
    cli,  # noqa: ANN001
    srv,  # noqa: ANN001
    tmp_path: Path,
) -> None:
    """A tool's parameters 70 levels deep: one line naming the tool and the bound, before
    any call, nothing written."""
    schema: dict = {"type": "object"}
    for _ in range(70):
        schema = {"type": "object", "properties": {"a": schema}}
    out = cli("run", _spec(tmp_path, srv, "openai_compatible", schema))
    assert out.exit_code == 2
    (line,) = out.stderr.strip().splitlines()
    assert "tool 'get_weather': parameters nest deeper than 64 levels" in line
    assert srv.stats()["total"] == 0 and not (tmp_path / "results").exists()
