"""Conversations: normalization, role order, and the native shapes each provider gets."""

from __future__ import annotations

import pytest

from gradetrail.conversation.messages import ConversationError, normalize_messages, split_system
from gradetrail.conversation.transcript import flatten_transcript
from gradetrail.providers._anthropic_wire import to_anthropic, tool_calls_from_anthropic
from gradetrail.providers._openai_wire import to_openai, tool_calls_from_openai

CALL = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}
AGENTIC = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "1+1?"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "2"},
    {"role": "user", "content": "and now?"},
]


def test_openai_shaped_conversation_is_normalized_and_system_goes_apart() -> None:
    """Content parts are joined, tool calls get parsed arguments, system messages split off."""
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    messages = normalize_messages([{"role": "user", "content": parts}])
    assert messages == [{"role": "user", "content": "ab"}]
    system, rest = split_system(normalize_messages(AGENTIC))
    assert system == "Be brief."
    assert rest[1]["tool_calls"] == [{"id": "c1", "name": "add", "arguments": {"a": 1}}]
    assert rest[2] == {"role": "tool", "tool_call_id": "c1", "name": "", "content": "2"}


@pytest.mark.parametrize(
    ("messages", "problem"),
    [
        ([{"role": "assistant", "content": "hi"}, {"role": "user", "content": "x"}], "start"),
        (
            [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "", "tool_calls": [CALL]},
                {"role": "user", "content": "b"},
            ],
            "have no tool message",
        ),
        ([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], "ends with"),
        (
            [
                {"role": "user", "content": "a"},
                {"role": "system", "content": "late"},
                {"role": "user", "content": "b"},
            ],
            "open the conversation",
        ),
        (
            [
                {"role": "user", "content": "a"},
                {"role": "tool", "tool_call_id": "x", "content": "1"},
            ],
            "did not call",
        ),
        (
            [
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": "", "tool_calls": [CALL]},
                {"role": "user", "content": "b"},
            ],
            "no tool message",
        ),
        ([{"role": "robot", "content": "a"}], "role 'robot'"),
        ([], "non-empty"),
    ],
)
def test_invalid_role_orders_are_refused_naming_the_problem(messages, problem: str) -> None:
    """Each kind of invalid order is a ConversationError saying what is wrong."""
    with pytest.raises(ConversationError, match=problem):
        normalize_messages(messages)


def test_openai_shape_round_trips_tool_calls_as_json_text() -> None:
    """Chat Completions gets the system first, tool_calls with JSON-text arguments and
    role=tool results."""
    system, rest = split_system(normalize_messages(AGENTIC))
    out = to_openai(system, rest)
    assert out[0] == {"role": "system", "content": "Be brief."}
    assert out[2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}
        ],
    }
    assert out[3] == {"role": "tool", "tool_call_id": "c1", "content": "2"}


def test_anthropic_shape_alternates_roles_with_tool_use_and_tool_result_blocks() -> None:
    """The tool result and the user message after it become one user message; the call
    becomes a tool_use block with an object input."""
    _, rest = split_system(normalize_messages(AGENTIC))
    out = to_anthropic(rest)
    assert [m["role"] for m in out] == ["user", "assistant", "user"]
    assert out[1]["content"] == [{"type": "tool_use", "id": "c1", "name": "add", "input": {"a": 1}}]
    assert out[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "content": "2"},
        {"type": "text", "text": "and now?"},
    ]


def test_consecutive_turns_of_one_role_merge_into_one_anthropic_turn() -> None:
    """Both APIs take consecutive user (or assistant) messages; OpenAI gets them as they
    are, Anthropic as one turn of text blocks (tool results first), so roles alternate."""
    messages = normalize_messages(
        [
            {"role": "user", "content": "Hello there."},
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "Let me add."},
            {"role": "assistant", "content": "", "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "c1", "content": "4"},
            {"role": "user", "content": "So?"},
            {"role": "user", "content": "Answer."},
        ]
    )
    assert [m["role"] for m in to_openai(None, messages)] == [m["role"] for m in messages]
    out = to_anthropic(messages)
    assert [m["role"] for m in out] == ["user", "assistant", "user"]
    assert out[0]["content"] == [
        {"type": "text", "text": "Hello there."},
        {"type": "text", "text": "What is 2+2?"},
    ]
    assert [b["type"] for b in out[1]["content"]] == ["text", "tool_use"]
    assert [b["type"] for b in out[2]["content"]] == ["tool_result", "text", "text"]
    assert to_anthropic([{"role": "user", "content": "hi"}]) == [{"role": "user", "content": "hi"}]


def test_malformed_arguments_are_kept_and_flagged_never_guessed() -> None:
    """Arguments that are not a JSON object are None with the raw text and the reason."""
    (call,) = tool_calls_from_openai(
        [{"id": "x", "type": "function", "function": {"name": "f", "arguments": '{"a": 1'}}]
    )
    assert call["arguments"] is None and call["raw_arguments"] == '{"a": 1'
    assert "not valid JSON" in call["arguments_error"]
    (listy,) = tool_calls_from_openai([{"id": "y", "function": {"name": "f", "arguments": "[1]"}}])
    assert listy["arguments_error"] == "arguments are JSON list, not an object"
    use = {"type": "tool_use", "id": "t", "name": "g", "input": {}}
    blocks = [{"type": "text", "text": "hi"}, use]
    assert tool_calls_from_anthropic(blocks) == ({"id": "t", "name": "g", "arguments": {}},)


def test_a_transcript_flattens_to_messages_in_conversation_order() -> None:
    """Input messages, then each turn's assistant entry (with its tool calls and meta)
    and one tool entry per result: what the viewer lists turn by turn."""
    transcript = {
        "messages": [{"role": "user", "content": "1+1?"}],
        "turns": [
            {
                "turn": 1,
                "response": "",
                "tool_calls": [{"id": "c", "name": "add", "arguments": {"a": 1}}],
                "tool_results": [{"tool_call_id": "c", "name": "add", "content": "2"}],
                "stop_reason": "tool_use",
            },
            {"turn": 2, "response": "A: 2", "tool_calls": [], "tool_results": []},
        ],
    }
    flat = flatten_transcript(transcript)
    assert [(m["role"], m["content"]) for m in flat] == [
        ("user", "1+1?"),
        ("assistant", ""),
        ("tool", "2"),
        ("assistant", "A: 2"),
    ]
    assert flat[1]["tool_calls"][0]["name"] == "add" and flat[1]["stop_reason"] == "tool_use"
    assert flat[2]["tool_call_id"] == "c"
