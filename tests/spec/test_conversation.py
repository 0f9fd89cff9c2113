"""Conversation specs: message templates and a dataset's messages reach the provider
natively and are all in the cache key; bad conversations, tool schemas and tools modules
are one line with exit 2 before any call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from paths import EXAMPLES

import gradetrail

ECHO = """\
import json


def answer(request):
    return json.dumps({"system": request.system, "messages": list(request.messages),
                       "tools": [t["name"] for t in request.tools],
                       "tool_choice": request.tool_choice})
"""


def _write(tmp_path: Path, rows: list[dict], **spec) -> Path:
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "conv_echo_app.py").write_text(ECHO)
    body = {
        "name": "conv",
        "dataset": {"path": "data.jsonl"},
        "prompt": "{{ q }}",
        "model": {"provider": "python", "name": "echo", "function": "conv_echo_app:answer"},
        "scorer": {"type": "exact"},
        "target": "x",
        **spec,
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def test_message_templates_render_system_apart_and_alternate(tmp_path: Path) -> None:
    """A prompt list renders every turn over the row; its system message joins the spec's
    system prompt; the row records a transcript of the input."""
    path = _write(
        tmp_path,
        [{"q": "2+2?", "shot": "1+1?", "shot_a": "2"}],
        system="Be brief.",
        prompt=[
            {"role": "system", "content": "Answer with a number."},
            {"role": "user", "content": "{{ shot }}"},
            {"role": "assistant", "content": "{{ shot_a }}"},
            {"role": "user", "content": "{{ q }}"},
        ],
    )
    result = gradetrail.run_eval(gradetrail.load_spec(path), results_root=tmp_path / "r")
    (row,) = gradetrail.read_results(result.run_dir)
    seen = json.loads(row["response"])
    assert seen["system"] == "Be brief.\n\nAnswer with a number."
    assert seen["messages"] == [
        {"role": "user", "content": "1+1?"},
        {"role": "assistant", "content": "2"},
        {"role": "user", "content": "2+2?"},
    ]
    assert row["transcript"]["messages"][0] == {"role": "system", "content": seen["system"]}


def test_dataset_conversation_with_tool_turns_is_keyed_on_every_message(tmp_path: Path) -> None:
    """dataset.messages_field carries a whole conversation (tool calls and results
    included); two rows differing only in an early message are two cache entries."""
    convo = [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    other = [dict(convo[0], content="weather today?"), *convo[1:]]
    path = _write(
        tmp_path,
        [{"id": "a", "m": convo}, {"id": "b", "m": other}, {"id": "c", "m": convo}],
        dataset={"path": "data.jsonl", "messages_field": "m"},
        prompt=None,
        run={"concurrency": 1},
    )
    spec = gradetrail.load_spec(path)
    plan = gradetrail.plan_run(spec)
    keys = [p.key for p in plan.prepared]
    assert keys[0] != keys[1] and keys[0] == keys[2]
    result = gradetrail.run_eval(spec, results_root=tmp_path / "r")
    rows = gradetrail.read_results(result.run_dir)
    seen = json.loads(rows[0]["response"])
    assert seen["messages"][1]["tool_calls"] == [{"id": "c1", "name": "w", "arguments": {}}]
    assert seen["messages"][2]["content"] == "sunny"
    assert [r["cached"] for r in rows] == [False, False, True]


@pytest.mark.parametrize(
    ("choice", "sent"),
    [
        ("any", "required"),
        ({"type": "any"}, "required"),
        ({"type": "auto"}, "auto"),
        ({"type": "none"}, "none"),
        ({"type": "tool", "name": "f"}, {"name": "f"}),
        ({"type": "function", "function": {"name": "f"}}, {"name": "f"}),
    ],
)
def test_tool_choice_in_anthropic_or_openai_form_means_the_same(
    tmp_path: Path, choice: object, sent: object
) -> None:
    """Anthropic's tool_choice shapes (any, {type: tool, name}) and OpenAI's object shape
    are read as gradetrail's auto / none / required / {name} (before: refused)."""
    path = _write(tmp_path, [{"q": "hi"}], tools=[_tool("f")], tool_choice=choice)
    result = gradetrail.run_eval(gradetrail.load_spec(path), results_root=tmp_path / "r")
    (row,) = gradetrail.read_results(result.run_dir)
    assert json.loads(row["response"])["tool_choice"] == sent


def test_per_row_tools_a_null_field_and_a_row_without_tools(tmp_path: Path) -> None:
    """With dataset.tools_field, a row's own tools replace the spec's; a null field or a
    missing one keeps the spec's; a row offering no tool gets no tool_choice (auto and
    none mean what no tools mean), and a named tool_choice is checked against each row's
    own tools, not the spec's."""
    rows = [
        {"q": "own", "t": [_tool("g"), _tool("f")]},
        {"q": "null", "t": None},
        {"q": "missing"},
        {"q": "none", "t": []},
    ]
    path = _write(
        tmp_path,
        rows,
        dataset={"path": "data.jsonl", "tools_field": "t"},
        tools=[_tool("f")],
        tool_choice="auto",
    )
    result = gradetrail.run_eval(gradetrail.load_spec(path), results_root=tmp_path / "r")
    seen = [json.loads(r["response"]) for r in gradetrail.read_results(result.run_dir)]
    assert [(s["tools"], s["tool_choice"]) for s in seen] == [
        (["g", "f"], "auto"),
        (["f"], "auto"),
        (["f"], "auto"),
        ([], None),
    ]
    path = _write(
        tmp_path,
        rows[:1],
        dataset={"path": "data.jsonl", "tools_field": "t"},
        tool_choice={"name": "g"},
    )
    result = gradetrail.run_eval(gradetrail.load_spec(path), results_root=tmp_path / "r")
    (row,) = gradetrail.read_results(result.run_dir)
    assert json.loads(row["response"])["tool_choice"] == {"name": "g"}


def test_tools_and_tool_choice_enter_the_key(tmp_path: Path) -> None:
    """The same prompt with other tools, or another tool_choice, is another request."""
    tools = json.loads(
        json.dumps(yaml.safe_load((EXAMPLES / "function-calling.yaml").read_text())["tools"])
    )
    path = _write(tmp_path, [{"q": "hi"}], tools=tools, tool_choice="auto")
    keys = set()
    for extra in ([], ["tool_choice=required"], ["tool_choice={name: get_weather}"], ["tools=[]"]):
        plan = gradetrail.plan_run(gradetrail.load_spec(path, extra))
        keys.add(plan.prepared[0].key)
    assert len(keys) == 4


def _tool(name: str) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


BAD_SCHEMA = [
    {
        "type": "function",
        "function": {
            "name": "f",
            "parameters": {"type": "object", "properties": {"a": {"type": "strnig"}}},
        },
    }
]


@pytest.mark.parametrize(
    ("rows", "spec", "message"),
    [
        (
            [{"q": "x"}],
            {"tools": BAD_SCHEMA},
            "tools: tool 'f': parameters is not valid JSON Schema at properties/a/type",
        ),
        (
            [{"q": "x"}],
            {
                "tools": [
                    {"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}
                ]
            },
            "must describe an object",
        ),
        (
            [{"q": "x"}],
            {"tool_choice": {"name": "nope"}, "tools": BAD_SCHEMA[:0]},
            "tool_choice: no tool is named 'nope' (the tools: none)",
        ),
        (
            [{"q": "x"}],
            {"tool_choice": 5, "tools": BAD_SCHEMA[:0]},
            "tool_choice: use auto, none, required or {name: TOOL} (got 5)",
        ),
        (
            [{"q": "x"}],
            {"tool_choice": ["auto"], "tools": BAD_SCHEMA[:0]},
            "tool_choice: use auto, none, required or {name: TOOL}",
        ),
        (
            [{"q": "x", "t": [_tool("f")]}, {"q": "y"}],
            {"dataset": {"path": "data.jsonl", "tools_field": "t"}, "tool_choice": "required"},
            "sample '2' (line 2): tool_choice 'required' needs tools, and the row offers none",
        ),
        (
            [{"q": "x", "t": [_tool("f")]}, {"q": "y", "t": [_tool("g")]}],
            {"dataset": {"path": "data.jsonl", "tools_field": "t"}, "tool_choice": {"name": "f"}},
            "sample '2' (line 2): no tool is named 'f' (the tools: g)",
        ),
        (
            [{"q": "x"}],
            {
                "model": {
                    "provider": "python",
                    "name": "e",
                    "function": "conv_echo_app:answer",
                    "tools_module": "no_such_tools_mod",
                }
            },
            "model.tools_module: cannot import 'no_such_tools_mod'",
        ),
        (
            [{"q": "x"}],
            {
                "prompt": [
                    {"role": "assistant", "content": "hi"},
                    {"role": "user", "content": "{{ q }}"},
                ]
            },
            "prompt: message 1: the conversation must start with a user message",
        ),
        (
            [
                {"m": [{"role": "user", "content": "a"}]},
                {"m": [{"role": "user", "content": "a"}, {"role": "system", "content": "b"}]},
            ],
            {"dataset": {"path": "data.jsonl", "messages_field": "m"}, "prompt": None},
            "sample '2' (line 2): message 2: a system message may only open the conversation",
        ),
        (
            [{"q": "x", "t": BAD_SCHEMA}],
            {"dataset": {"path": "data.jsonl", "tools_field": "t"}},
            "dataset.tools_field 't': sample '1' (line 1): tool 'f': parameters is not valid",
        ),
    ],
)
def test_bad_conversations_and_tools_are_one_line_exit_2(
    tmp_path: Path, cli, rows, spec, message: str
) -> None:
    """Invalid JSON Schema, a tool_choice naming no tool, an unimportable tools module and
    an invalid role order (in the spec or in any row) stop the run before any call."""
    path = _write(tmp_path, rows, **spec)
    out = cli("run", str(path))
    assert out.exit_code == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert message in lines[0]
    assert not (tmp_path / "results").exists()


AGENT_APP = """\
from gradetrail import Response


def answer(request):
    return Response(
        text="",
        stop_reason="tool_use",
        tool_calls=[
            {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            {"name": "get_weather", "arguments": {"city": "Lyon", "unit": "celsius"}},
        ],
    )
"""


def test_a_python_application_s_tool_calls_are_normalized_and_scored(tmp_path: Path) -> None:
    """An application (the python provider) returning tool calls, with JSON-text or
    object arguments and no ids, is scored by tool_calls like a model; a developer
    message counts as the system prompt."""
    (tmp_path / "fc_app.py").write_text(AGENT_APP)
    expected = [{"get_weather": {"city": ["Paris"], "unit": ["", "celsius"]}}]
    path = _write(
        tmp_path,
        [
            {
                "id": "one",
                "m": [{"role": "developer", "content": "d"}, {"role": "user", "content": "x"}],
                "expected_calls": expected,
            },
            {
                "id": "both",
                "m": [{"role": "user", "content": "y"}],
                "expected_calls": [*expected, {"get_weather": {"city": ["Lyon"]}}],
            },
        ],
        dataset={"path": "data.jsonl", "messages_field": "m"},
        prompt=None,
        model={"provider": "python", "name": "fc", "function": "fc_app:answer"},
        scorer={"type": "tool_calls", "mode": "subset"},
        target=None,
    )
    result = gradetrail.run_eval(gradetrail.load_spec(path), results_root=tmp_path / "r")
    rows = gradetrail.read_results(result.run_dir)
    assert [r["score"] for r in rows] == [1.0, 0.0]  # Lyon passes a unit 'both' did not allow
    assert rows[0]["tool_calls"][0] == {
        "id": "call_1",
        "name": "get_weather",
        "arguments": {"city": "Paris"},
    }
    assert rows[0]["transcript"]["messages"][0] == {"role": "system", "content": "d"}
    lyon = rows[1]["scorer"]["expected"][1]
    assert lyon["arguments"]["unit"]["reason"] == "unexpected"


@pytest.mark.parametrize("protocol", ["openai_compatible", "anthropic"])
def test_a_few_shot_conversation_reaches_both_apis_natively(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, protocol: str
) -> None:
    """A system + few-shot message list goes to each API in its own shape (the server
    refuses a system role inside Anthropic messages and roles out of order) and scores
    the recorded GSM8K answers exactly as the one-message prompt does."""
    from http_support import gsm8k_spec
    from protocol_server import running_server

    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    few_shot = [
        {"role": "system", "content": "Solve the problem."},
        {"role": "user", "content": "Q: What is 1 + 1?"},
        {"role": "assistant", "content": "1 + 1 = 2.\nA: 2"},
        {"role": "user", "content": "Q: {{ question }}"},
    ]
    with running_server() as live:
        plain = gsm8k_spec(tmp_path / "plain", live, protocol, limit=20)
        base = gradetrail.run_eval(plain, results_root=tmp_path / "r", use_cache=False)
        spec = yaml.safe_load(Path(plain.source).read_text())
        spec["prompt"] = few_shot
        path = tmp_path / "few.yaml"
        path.write_text(yaml.safe_dump(spec))
        few = gradetrail.run_eval(gradetrail.load_spec(path), results_root=tmp_path / "r")
        stats = live.stats()
    assert few.manifest.counts == {"scored": 20}
    assert few.manifest.score.mean == base.manifest.score.mean
    assert stats["statuses"] == {"200": 40} and stats["unmatched"] == 0
    (row, *_) = gradetrail.read_results(few.run_dir)
    assert [m["role"] for m in row["transcript"]["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
    ]


def _conversation_spec(tmp_path: Path, live, protocol: str, rows: list[dict]) -> Path:  # noqa: ANN001
    (tmp_path / "conv.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    url = live.anthropic_base_url if protocol == "anthropic" else live.openai_base_url
    model = {"provider": protocol, "name": "scripted", "base_url": url}
    if protocol == "openai_compatible":
        model["api_key_required"] = False
    spec = {
        "name": "turns",
        "dataset": {"path": "conv.jsonl", "messages_field": "messages"},
        "target": "{{ answer }}",
        "model": model,
        "scorer": {"type": "numeric"},
    }
    path = tmp_path / "turns.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.parametrize("protocol", ["openai_compatible", "anthropic"])
def test_consecutive_turns_of_one_role_reach_both_apis(
    cli,  # noqa: ANN001
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    protocol: str,
) -> None:
    """A row whose conversation has two user messages in a row (and one with two
    assistant messages) is sent, not refused (before: exit 2): the server, which holds
    Anthropic to alternating roles, answers every request 200; the row keeps the
    messages as given, and a re-run is served from the cache."""
    from protocol_server import running_server

    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    user, assistant = "user", "assistant"
    rows = [
        {
            "id": "u",
            "answer": "4",
            "messages": [
                {"role": "system", "content": "Be terse."},
                {"role": user, "content": "Hello there."},
                {"role": user, "content": "What is 2+2?"},
            ],
        },
        {
            "id": "a",
            "answer": "4",
            "messages": [
                {"role": user, "content": "Hi."},
                {"role": assistant, "content": "Hello."},
                {"role": assistant, "content": "How can I help?"},
                {"role": user, "content": "What is 2+2?"},
            ],
        },
    ]
    script = [{"regex": r"(Hello there|Hello\.\nHow can I help).*What is 2\+2", "reply": "4"}]
    with running_server(models=["*"], script=script) as live:
        spec = str(_conversation_spec(tmp_path, live, protocol, rows))
        first = cli("run", spec, "--json")
        again = cli("run", spec, "--json")
        stats = live.stats()
    assert first.exit_code == 0, first.stderr
    assert stats["statuses"] == {"200": 2} and stats["unmatched"] == 0
    assert json.loads(again.stdout)["cache_hits"] == 2
    done = {r["sample_id"]: r for r in gradetrail.read_results(json.loads(first.stdout)["run_dir"])}
    assert {sid: r["score"] for sid, r in done.items()} == {"u": 1.0, "a": 1.0}
    assert [m["role"] for m in done["u"]["transcript"]["messages"]] == ["system", user, user]


@pytest.mark.parametrize("content", ["", "   ", [{"type": "text", "text": ""}]])
def test_an_empty_message_is_refused_before_any_call_for_anthropic_and_sent_to_openai(
    cli,  # noqa: ANN001
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    content: object,
) -> None:
    """The Messages API refuses a message with no text (the protocol server too): for
    Anthropic a row holding one, or a prompt that renders empty, stops the run with one
    line naming the sample and message, before any call; Chat Completions accepts it."""
    from protocol_server import running_server

    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    rows = [
        {"id": "ok", "answer": "4", "messages": [{"role": "user", "content": "What is 2+2?"}]},
        {
            "id": "empty",
            "answer": "4",
            "messages": [
                {"role": "user", "content": "What is 2+2?"},
                {"role": "assistant", "content": content},
                {"role": "user", "content": "What is 2+2?"},
            ],
        },
    ]
    with running_server(models=["*"], script=[{"contains": "2+2", "reply": "4"}]) as live:
        refused = cli("run", str(_conversation_spec(tmp_path, live, "anthropic", rows)))
        after_refusal = live.stats()["total"]
        sent = cli("run", str(_conversation_spec(tmp_path, live, "openai_compatible", rows)))
        stats = live.stats()
    assert refused.exit_code == 2
    (line,) = refused.stderr.strip().splitlines()
    assert "sample 'empty' (line 2): message 2 (assistant) is empty" in line
    assert after_refusal == 0
    assert sent.exit_code == 0, sent.stderr
    assert stats["statuses"] == {"200": 2}


def test_a_prompt_that_renders_empty_is_refused_before_any_call_for_anthropic(
    cli,  # noqa: ANN001
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The one-message path too: a row whose prompt renders to whitespace stops an
    Anthropic run with one line naming the sample, before any call."""
    from protocol_server import running_server

    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    (tmp_path / "d.jsonl").write_text('{"id": "a", "q": "2+2?"}\n{"id": "b", "q": "  "}\n')
    with running_server(models=["*"]) as live:
        spec = {
            "name": "empty",
            "dataset": {"path": "d.jsonl"},
            "prompt": "{{ q }}",
            "target": "4",
            "model": {"provider": "anthropic", "name": "m", "base_url": live.anthropic_base_url},
            "scorer": {"type": "numeric"},
        }
        (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
        out = cli("run", str(tmp_path / "s.yaml"))
        total = live.stats()["total"]
    assert out.exit_code == 2
    (line,) = out.stderr.strip().splitlines()
    assert "prompt: sample 'b' (line 2): the prompt renders empty" in line
    assert total == 0
