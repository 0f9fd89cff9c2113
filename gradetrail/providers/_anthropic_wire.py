"""The Anthropic Messages API's wire format: gradetrail's neutral messages and tools in
the API's shapes (consecutive same-role messages merged into one turn, as the API
requires), the API's request checks, and its tool calls read back."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gradetrail.conversation.messages import ConversationError, Message, ToolCall, make_tool_call
from gradetrail.conversation.tools import ToolDef

__all__ = [
    "anthropic_tool_choice",
    "anthropic_tools",
    "answer_blocks",
    "check_anthropic_content",
    "rebuilt_exactly",
    "to_anthropic",
    "tool_calls_from_anthropic",
]


def anthropic_tools(tools: Sequence[ToolDef]) -> list[dict[str, Any]]:
    """Messages API ``tools``: ``{"name", "description", "input_schema"}``, and ``strict``
    when the definition sets it."""
    out = []
    for tool in tools:
        entry: dict[str, Any] = {"name": tool["name"], "input_schema": tool["parameters"]}
        if tool["description"]:
            entry["description"] = tool["description"]
        if "strict" in tool:
            entry["strict"] = tool["strict"]
        out.append(entry)
    return out


def anthropic_tool_choice(choice: str | Mapping[str, str]) -> dict[str, str]:
    """Messages API ``tool_choice``: ``auto``, ``none``, ``any`` (for ``required``) or
    ``{"type": "tool", "name": ...}``."""
    if isinstance(choice, str):
        return {"type": "any" if choice == "required" else choice}
    return {"type": "tool", "name": choice["name"]}


def _tool_use(call: ToolCall) -> dict[str, Any]:
    """A ``tool_use`` block for a normalized call (arguments that were not a JSON object
    as ``{}``: the API accepts only objects)."""
    arguments = call.get("arguments")
    return {
        "type": "tool_use",
        "id": call["id"],
        "name": call["name"],
        "input": arguments if arguments is not None else {},
    }


def answer_blocks(
    text: str, tool_calls: Sequence[ToolCall], reasoning_blocks: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """An assistant turn's content rebuilt from its parts: the thinking blocks verbatim,
    then the text (when any), then one ``tool_use`` block a call."""
    blocks = [dict(b) for b in reasoning_blocks]
    if text:
        blocks.append({"type": "text", "text": text})
    return blocks + [_tool_use(call) for call in tool_calls]


#: the order :func:`answer_blocks` writes block types in
_REBUILT_ORDER = {"thinking": 0, "redacted_thinking": 0, "text": 1, "tool_use": 2}


def rebuilt_exactly(content: Sequence[Mapping[str, Any]]) -> bool:
    """True when :func:`answer_blocks` gives an answer's ``content`` back as the API sent
    it: thinking blocks, then at most one text block without citations, then tool uses
    (False for server-tool blocks, several text blocks, citations, another order)."""
    rank = texts = 0
    for block in content:
        kind = block.get("type")
        here = _REBUILT_ORDER.get(kind) if isinstance(kind, str) else None
        if here is None or here < rank:
            return False
        if kind == "text":
            texts += 1
            if texts > 1 or block.get("citations"):
                return False
        rank = here
    return True


def _verbatim(blocks: Sequence[Mapping[str, Any]], calls: Sequence[ToolCall]) -> list[Any]:
    """An answer's content blocks as the API sent them, each ``tool_use`` block written
    from its call in order (the loop may have given a call a unique id), and text blocks
    of whitespace only left out (the API refuses them in a request)."""
    uses = iter(calls)
    out: list[Any] = []
    for block in blocks:
        if block.get("type") == "tool_use":
            call = next(uses, None)
            out.append(_tool_use(call) if call is not None else dict(block))
        elif block.get("type") != "text" or str(block.get("text") or "").strip():
            out.append(dict(block))
    return out


def to_anthropic(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Messages API ``messages`` (the system prompt goes apart, as ``system``): assistant
    tool calls as ``tool_use`` blocks, tool results as ``tool_result`` blocks of a user
    turn, and consecutive messages of one role (tool results and the user message after
    them included) merged into one turn of content blocks, so roles alternate as the API
    requires. A lone text message keeps its plain string content. An assistant message's
    ``reasoning_blocks`` (thinking, redacted thinking) open its turn, verbatim; one with
    ``content_blocks`` (an answer its parts do not rebuild, see :func:`rebuilt_exactly`)
    is sent as those blocks, in their order. Arguments that were not a JSON object are
    sent as ``{}`` (the API accepts only objects)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message["role"]
        if role == "assistant":
            calls = message.get("tool_calls") or ()
            thinking = message.get("reasoning_blocks") or ()
            if message.get("content_blocks"):
                _add_turn(out, "assistant", _verbatim(message["content_blocks"], calls))
            elif not calls and not thinking:
                _add_turn(out, "assistant", message["content"])
            else:
                _add_turn(out, "assistant", answer_blocks(message["content"], calls, thinking))
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


#: why the last call of an answer cut at max_tokens has no arguments
CUT_CALL = (
    "the call was cut at max_tokens before its input ended (the API parsed what there was); "
    "raise max_tokens"
)


def tool_calls_from_anthropic(content: Any, cut: bool = False) -> tuple[ToolCall, ...]:
    """Normalized tool calls of a Messages answer's ``tool_use`` content blocks. With
    ``cut`` (the answer stopped at max_tokens), the last one was being written when it
    stopped: the input the API parsed of it (``{}``, or a prefix that may still follow the
    schema) is not the model's call, so its arguments are None, the parsed input kept as
    ``raw_arguments`` and :data:`CUT_CALL` as ``arguments_error`` (a Chat Completions or
    Responses call cut so is text that does not parse: the same fields)."""
    if not isinstance(content, list):
        return ()
    calls = [
        make_tool_call(block.get("id"), block.get("name"), block.get("input"))
        for block in content
        if isinstance(block, dict) and block.get("type") == "tool_use"
    ]
    if cut and calls:
        last = calls[-1]
        parsed = last.get("arguments")
        raw = json.dumps(parsed, ensure_ascii=False) if parsed is not None else None
        calls[-1] = {
            **last,
            "arguments": None,
            "raw_arguments": raw or last.get("raw_arguments"),
            "arguments_error": CUT_CALL,
        }
    return tuple(calls)
