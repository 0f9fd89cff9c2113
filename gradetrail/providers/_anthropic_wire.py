"""The Anthropic Messages API's wire format: gradetrail's neutral messages and tools in
the API's shapes (consecutive same-role messages merged into one turn, as the API
requires), the API's request checks, and its tool calls read back."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gradetrail.conversation.messages import ConversationError, Message, ToolCall, make_tool_call
from gradetrail.conversation.tools import ToolDef

__all__ = [
    "anthropic_tool_choice",
    "anthropic_tools",
    "check_anthropic_content",
    "to_anthropic",
    "tool_calls_from_anthropic",
]


def anthropic_tools(tools: Sequence[ToolDef]) -> list[dict[str, Any]]:
    """Messages API ``tools``: ``{"name", "description", "input_schema"}``."""
    out = []
    for tool in tools:
        entry: dict[str, Any] = {"name": tool["name"], "input_schema": tool["parameters"]}
        if tool["description"]:
            entry["description"] = tool["description"]
        out.append(entry)
    return out


def anthropic_tool_choice(choice: str | Mapping[str, str]) -> dict[str, str]:
    """Messages API ``tool_choice``: ``auto``, ``none``, ``any`` (for ``required``) or
    ``{"type": "tool", "name": ...}``."""
    if isinstance(choice, str):
        return {"type": "any" if choice == "required" else choice}
    return {"type": "tool", "name": choice["name"]}


def to_anthropic(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Messages API ``messages`` (the system prompt goes apart, as ``system``): assistant
    tool calls as ``tool_use`` blocks, tool results as ``tool_result`` blocks of a user
    turn, and consecutive messages of one role (tool results and the user message after
    them included) merged into one turn of content blocks, so roles alternate as the API
    requires. A lone text message keeps its plain string content. An assistant message's
    ``reasoning_blocks`` (thinking, redacted thinking) open its turn, verbatim. Arguments
    that were not a JSON object are sent as ``{}`` (the API accepts only objects)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message["role"]
        if role == "assistant":
            calls = message.get("tool_calls")
            thinking = [dict(b) for b in message.get("reasoning_blocks") or ()]
            if not calls and not thinking:
                _add_turn(out, "assistant", message["content"])
                continue
            blocks: list[dict[str, Any]] = thinking  # first, verbatim
            if message["content"]:
                blocks.append({"type": "text", "text": message["content"]})
            for call in calls:
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call["id"],
                        "name": call["name"],
                        "input": call["arguments"] if call.get("arguments") is not None else {},
                    }
                )
            _add_turn(out, "assistant", blocks)
        elif role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": message["tool_call_id"],
                "content": message["content"],
            }
            if message.get("is_error"):
                block["is_error"] = True
            _add_turn(out, "user", [block])
        else:
            _add_turn(out, "user", message["content"])
    return out


def _add_turn(out: list[dict[str, Any]], role: str, content: str | list[dict[str, Any]]) -> None:
    """Append a turn, or merge it into the last one when that has the same role."""
    if not out or out[-1]["role"] != role:
        out.append({"role": role, "content": content})
        return
    before = out[-1]["content"]
    blocks = before if isinstance(before, list) else [{"type": "text", "text": before}]
    more = content if isinstance(content, list) else [{"type": "text", "text": content}]
    out[-1] = {"role": role, "content": [*blocks, *more]}


def check_anthropic_content(messages: Sequence[Message]) -> None:
    """The Messages API refuses a user or assistant message with no text (an assistant
    message that only calls tools excepted): check before any call.

    Args:
        messages: the normalized conversation, system messages included (so the message
            numbers are the row's).

    Raises:
        ConversationError: naming the first such message.
    """
    for number, message in enumerate(messages, start=1):
        if message["role"] not in ("user", "assistant") or message.get("tool_calls"):
            continue
        if not message["content"].strip():
            raise ConversationError(
                f"message {number} ({message['role']}) is empty, which the Anthropic API "
                "refuses; fill it or drop it"
            )


def tool_calls_from_anthropic(content: Any) -> tuple[ToolCall, ...]:
    """Normalized tool calls of a Messages answer's ``tool_use`` content blocks."""
    if not isinstance(content, list):
        return ()
    return tuple(
        make_tool_call(block.get("id"), block.get("name"), block.get("input"))
        for block in content
        if isinstance(block, dict) and block.get("type") == "tool_use"
    )
