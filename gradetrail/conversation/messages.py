"""Conversations: the provider-neutral message shape, role-order validation and tool
calls. Each provider converts this shape to its own wire format (``providers/``); the
transcript of a multi-turn sample is :mod:`gradetrail.conversation.transcript`.

gradetrail keeps one message shape (in requests, cache keys and transcripts): OpenAI's
chat shape, normalized so equal conversations give equal keys.

- ``{"role": "user", "content": str}`` (a plain prompt is exactly this, so single-prompt
  cache keys are what they always were);
- ``{"role": "assistant", "content": str}``, plus ``"tool_calls": [ToolCall, ...]`` when
  the model called tools;
- ``{"role": "tool", "tool_call_id": str, "name": str, "content": str}``, plus
  ``"is_error": true`` when the tool failed (its error is the content).

Input in OpenAI's shape is accepted as it is: content as text parts, ``developer`` for
``system``, assistant ``tool_calls`` as ``{"id", "type": "function", "function": {"name",
"arguments": <JSON text>}}``.

A tool call (the normalized :data:`ToolCall` dict) is ``{"id": str, "name": str,
"arguments": dict | None}``; when the model sent arguments that are not a JSON object
(or hold a lone surrogate, which UTF-8 cannot encode), ``arguments`` is None,
``raw_arguments`` keeps the text (such a character escaped) and ``arguments_error`` says
why. System messages open the conversation and travel apart (``Request.system``), as the
Anthropic API requires.

Role order (checked before any call, :func:`check_order`): optional system messages
first, then a user message; an assistant message with tool calls is followed by one tool
message per call (each answering an id it made) before anything else; the conversation
ends with a user or tool message (the model answers it). Consecutive user (or assistant)
messages are allowed, as both APIs allow them: OpenAI receives them as they are, and
:func:`gradetrail.providers._anthropic_wire.to_anthropic` merges them into one turn of
several content blocks, so roles alternate as the Messages API requires.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gradetrail._util.jsontext import encodable, nests_deeper

__all__ = [
    "ConversationError",
    "Message",
    "ToolCall",
    "assistant_message",
    "check_order",
    "make_tool_call",
    "normalize_messages",
    "parse_arguments",
    "split_system",
]

#: the normalized tool call: {"id", "name", "arguments"} (+ raw_arguments, arguments_error)
ToolCall = dict[str, Any]
Message = dict[str, Any]

ROLES = ("system", "user", "assistant", "tool")


class ConversationError(ValueError):
    """A conversation that cannot be sent: an unknown role, an invalid role order, or a
    malformed message. The message names the 1-based message number; callers prefix the
    spec field or the sample and raise SpecError or DatasetError."""


def _text(content: Any, number: int) -> str:
    """A message's text: a string, or OpenAI content parts ``[{"type": "text", "text"}]``."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            else:
                raise ConversationError(
                    f"message {number}: content parts must be text ({{'type': 'text', "
                    f"'text': ...}}); got {str(part)[:60]!r}"
                )
        return "".join(parts)
    raise ConversationError(
        f"message {number}: content must be a string; got {type(content).__name__}"
    )


def parse_arguments(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """A tool call's arguments as a dict, from a JSON text (OpenAI) or an object
    (Anthropic); ``(None, why)`` when they are not a JSON object, or nest deeper than
    :data:`MAX_ARGUMENT_DEPTH` levels (which would break every later step that walks
    them: the cache, the transcript, the scorer)."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError as exc:
            return None, f"arguments are not valid JSON ({exc.msg} at char {exc.pos})"
        except RecursionError:
            return None, f"arguments nest deeper than {MAX_ARGUMENT_DEPTH} levels"
        if not isinstance(value, dict):
            return None, f"arguments are JSON {type(value).__name__}, not an object"
    elif isinstance(raw, dict):
        value = raw
    else:
        return None, f"arguments are {type(raw).__name__}, not a JSON object"
    if nests_deeper(value, MAX_ARGUMENT_DEPTH):
        return None, f"arguments nest deeper than {MAX_ARGUMENT_DEPTH} levels"
    bad = _unencodable(value)
    if bad is not None:
        return None, (
            f"the model's arguments hold U+{ord(bad):04X}, a lone surrogate (an unpaired "
            "\\ud800-\\udfff escape) that UTF-8 cannot encode: the model's output is at "
            "fault, not the dataset"
        )
    return value, None


def _unencodable(value: Any) -> str | None:
    """The first character UTF-8 cannot encode (a lone surrogate) in a JSON value's
    strings, keys included, or None; walked without recursion."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                return item[exc.start]
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


#: how deep a tool call's arguments may nest (objects and arrays)
MAX_ARGUMENT_DEPTH = 100


def make_tool_call(call_id: Any, name: Any, raw_arguments: Any) -> ToolCall:
    """A normalized tool call (see the module docstring)."""
    arguments, error = parse_arguments(raw_arguments)
    # the id and name go back in the next turn: a lone surrogate in them is escaped
    call: ToolCall = {
        "id": encodable(str(call_id or "")),
        "name": encodable(str(name or "")),
        "arguments": arguments,
    }
    if error is not None:  # kept to send back; escaped where UTF-8 cannot encode it
        raw = encodable(raw_arguments) if isinstance(raw_arguments, str) else None
        call["raw_arguments"] = raw
        call["arguments_error"] = error
    return call


def _tool_calls(raw: Any, number: int) -> list[ToolCall]:
    """Tool calls of an input assistant message, in the OpenAI shape (``{"id", "type":
    "function", "function": {"name", "arguments"}}``) or the normalized one."""
    if not isinstance(raw, list):
        raise ConversationError(f"message {number}: tool_calls must be a list")
    calls = []
    for i, item in enumerate(raw, start=1):
        if not isinstance(item, dict):
            raise ConversationError(f"message {number}: tool call {i} is not an object")
        fn = item.get("function") if isinstance(item.get("function"), dict) else item
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise ConversationError(f"message {number}: tool call {i} has no name")
        call_id = item.get("id") or f"call_{number}_{i}"
        calls.append(make_tool_call(call_id, name, fn.get("arguments")))
    return calls


def _message(raw: Any, number: int) -> Message:
    if not isinstance(raw, Mapping):
        raise ConversationError(f"message {number}: must be an object with role and content")
    role = raw.get("role")
    if role == "developer":  # OpenAI's newer name for the system role
        role = "system"
    if role not in ROLES:
        raise ConversationError(f"message {number}: role {role!r} is not one of {', '.join(ROLES)}")
    text = _text(raw.get("content"), number)
    if role == "assistant":
        message: Message = {"role": "assistant", "content": text}
        if raw.get("tool_calls"):
            message["tool_calls"] = _tool_calls(raw["tool_calls"], number)
        return message
    if role == "tool":
        call_id = raw.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise ConversationError(f"message {number}: a tool message needs tool_call_id")
        message = {"role": "tool", "tool_call_id": call_id, "name": str(raw.get("name") or "")}
        message["content"] = text
        if raw.get("is_error"):
            message["is_error"] = True
        return message
    return {"role": role, "content": text}


def normalize_messages(raw: Any) -> list[Message]:
    """Normalize and check a conversation given as OpenAI-shaped messages.

    Args:
        raw: a list of ``{role, content}`` objects (assistant ``tool_calls`` and ``tool``
            messages allowed; content a string or text parts).

    Returns:
        The normalized messages, system messages included (see :func:`split_system`).

    Raises:
        ConversationError: not a list, a malformed message or an invalid role order.
    """
    if not isinstance(raw, list) or not raw:
        raise ConversationError("a conversation must be a non-empty list of messages")
    messages = [_message(m, i) for i, m in enumerate(raw, start=1)]
    check_order(messages)
    return messages


def check_order(messages: Sequence[Mapping[str, Any]]) -> None:
    """Check the role order (see the module docstring).

    Raises:
        ConversationError: naming the first message out of order and what may come there.
    """
    previous: str | None = None
    pending: set[str] = set()
    for number, message in enumerate(messages, start=1):
        role = message.get("role")
        if role == "system":
            if previous not in (None, "system"):
                raise ConversationError(
                    f"message {number}: a system message may only open the conversation"
                )
        elif role == "user":
            if pending:
                raise ConversationError(
                    f"message {number}: tool call(s) {', '.join(sorted(pending))} have no "
                    "tool message answering them"
                )
        elif role == "assistant":
            if previous in (None, "system"):
                raise ConversationError(
                    f"message {number}: the conversation must start with a user message "
                    "(after any system messages), not an assistant one"
                )
            if pending:
                raise ConversationError(
                    f"message {number}: tool call(s) {', '.join(sorted(pending))} have no "
                    "tool message answering them"
                )
            pending = {str(c.get("id")) for c in message.get("tool_calls") or ()}
        elif role == "tool":
            call_id = str(message.get("tool_call_id"))
            if call_id not in pending:
                raise ConversationError(
                    f"message {number}: tool message answers {call_id!r}, which the "
                    "assistant message before it did not call (or was answered already)"
                )
            pending.discard(call_id)
        else:
            raise ConversationError(f"message {number}: unknown role {role!r}")
        previous = role
    if previous in (None, "system"):
        raise ConversationError("the conversation has no user message")
    if previous == "assistant":
        raise ConversationError(
            f"message {len(messages)}: the conversation ends with an assistant message; it "
            "must end with a user (or tool) message for the model to answer"
        )
    if pending:
        raise ConversationError(
            f"tool call(s) {', '.join(sorted(pending))} have no tool message answering them"
        )


def split_system(messages: Iterable[Message]) -> tuple[str | None, tuple[Message, ...]]:
    """The leading system messages joined by blank lines (None when there are none), and
    the rest of the conversation."""
    system: list[str] = []
    rest: list[Message] = []
    for message in messages:
        if message["role"] == "system" and not rest:
            system.append(message["content"])
        else:
            rest.append(message)
    return ("\n\n".join(system) if system else None), tuple(rest)


def assistant_message(
    text: str,
    tool_calls: Sequence[ToolCall],
    reasoning_blocks: Sequence[Mapping[str, Any]] = (),
    content_blocks: Sequence[Mapping[str, Any]] = (),
) -> Message:
    """The assistant message a response adds to the conversation; with its Anthropic
    ``thinking`` / ``redacted_thinking`` blocks, verbatim (signatures included), under
    ``reasoning_blocks`` when it has any: the Anthropic wire format
    (:func:`gradetrail.providers._anthropic_wire.to_anthropic`) sends them back first, as
    the API requires of a tool-use turn with thinking on; and, under ``content_blocks``,
    an Anthropic answer's whole content when its parts do not rebuild it (server-tool
    results, citations; see :attr:`gradetrail.providers.base.Response.content_blocks`),
    sent back in its order. Both enter the next turn's cache key with the rest of the
    conversation."""
    # the model's text goes back in the next turn's request: a lone surrogate it wrote
    # (no UTF-8 form) is sent as its escape, or the request could not be encoded
    message: Message = {"role": "assistant", "content": encodable(text)}
    if tool_calls:
        message["tool_calls"] = [dict(call) for call in tool_calls]
    if reasoning_blocks:
        message["reasoning_blocks"] = [dict(block) for block in reasoning_blocks]
    if content_blocks:
        message["content_blocks"] = [dict(block) for block in content_blocks]
    return message
