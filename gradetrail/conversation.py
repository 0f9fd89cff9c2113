"""Conversations: the message shape, role-order validation, conversion to each
provider's native shape, tool calls, and the transcript of a multi-turn sample.

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
"arguments": dict | None}``; when the model sent arguments that are not a JSON object,
``arguments`` is None, ``raw_arguments`` keeps the text and ``arguments_error`` says
why. System messages open the conversation and travel apart (``Request.system``), as the
Anthropic API requires.

Role order (checked before any call, :func:`check_order`): optional system messages
first, then a user message; an assistant message with tool calls is followed by one tool
message per call (each answering an id it made) before anything else; the conversation
ends with a user or tool message (the model answers it). Consecutive user (or assistant)
messages are allowed, as both APIs allow them: OpenAI receives them as they are, and
:func:`to_anthropic` merges them into one turn of several content blocks, so roles
alternate as the Messages API requires. That API also refuses a message with no text
(:func:`check_anthropic_content`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field

from gradetrail.jsontext import nests_deeper

__all__ = [
    "ConversationError",
    "ConversationStats",
    "ConversationTally",
    "ToolCall",
    "ToolResultRecord",
    "Transcript",
    "TurnRecord",
    "check_anthropic_content",
    "check_order",
    "flatten_transcript",
    "normalize_messages",
    "split_system",
    "to_anthropic",
    "to_openai",
    "tool_calls_from_anthropic",
    "tool_calls_from_openai",
]

#: the normalized tool call: {"id", "name", "arguments"} (+ raw_arguments, arguments_error)
ToolCall = dict[str, Any]
Message = dict[str, Any]

ROLES = ("system", "user", "assistant", "tool")


class ConversationError(ValueError):
    """A conversation that cannot be sent: an unknown role, an invalid role order, or a
    malformed message. The message names the 1-based message number; callers prefix the
    spec field or the sample and raise SpecError or DatasetError."""


# --------------------------------------------------------------------------- normalizing


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
    return value, None


#: how deep a tool call's arguments may nest (objects and arrays)
MAX_ARGUMENT_DEPTH = 100


def make_tool_call(call_id: Any, name: Any, raw_arguments: Any) -> ToolCall:
    """A normalized tool call (see the module docstring)."""
    arguments, error = parse_arguments(raw_arguments)
    call: ToolCall = {"id": str(call_id or ""), "name": str(name or ""), "arguments": arguments}
    if error is not None:
        call["raw_arguments"] = raw_arguments if isinstance(raw_arguments, str) else None
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


# --------------------------------------------------------------------------- native shapes


def _arguments_text(call: ToolCall) -> str:
    if call.get("arguments") is None:
        return str(call.get("raw_arguments") or "")
    return json.dumps(call["arguments"], ensure_ascii=False)


def to_openai(system: str | None, messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Chat Completions ``messages``: the system prompt first, assistant ``tool_calls``
    as ``{"id", "type": "function", "function": {"name", "arguments": <JSON text>}}`` and
    tool results as ``role: tool`` messages."""
    out: list[dict[str, Any]] = []
    if system is not None:
        out.append({"role": "system", "content": system})
    for message in messages:
        role = message["role"]
        if role == "assistant" and message.get("tool_calls"):
            out.append(
                {
                    "role": "assistant",
                    "content": message["content"] or None,
                    "tool_calls": [
                        {
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["name"], "arguments": _arguments_text(call)},
                        }
                        for call in message["tool_calls"]
                    ],
                }
            )
        elif role == "tool":
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": message["tool_call_id"],
                    "content": message["content"],
                }
            )
        elif len(message) == 2:  # {"role", "content"}: sent as it is, no copy
            out.append(message)
        else:
            out.append({"role": role, "content": message["content"]})
    return out


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


def tool_calls_from_openai(raw: Any) -> tuple[ToolCall, ...]:
    """Normalized tool calls of a Chat Completions ``message.tool_calls`` (arguments are
    JSON text there; text that does not parse is kept and flagged)."""
    if not isinstance(raw, list):
        return ()
    calls = []
    for item in raw:
        if not isinstance(item, dict):
            continue
        fn = item.get("function") if isinstance(item.get("function"), dict) else {}
        calls.append(make_tool_call(item.get("id"), fn.get("name"), fn.get("arguments")))
    return tuple(calls)


def tool_calls_from_anthropic(content: Any) -> tuple[ToolCall, ...]:
    """Normalized tool calls of a Messages answer's ``tool_use`` content blocks."""
    if not isinstance(content, list):
        return ()
    return tuple(
        make_tool_call(block.get("id"), block.get("name"), block.get("input"))
        for block in content
        if isinstance(block, dict) and block.get("type") == "tool_use"
    )


def assistant_message(
    text: str,
    tool_calls: Sequence[ToolCall],
    reasoning_blocks: Sequence[Mapping[str, Any]] = (),
) -> Message:
    """The assistant message a response adds to the conversation; with its Anthropic
    ``thinking`` / ``redacted_thinking`` blocks, verbatim (signatures included), under
    ``reasoning_blocks`` when it has any: :func:`to_anthropic` sends them back first, as
    the API requires of a tool-use turn with thinking on, and they enter the next turn's
    cache key with the rest of the conversation."""
    message: Message = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = [dict(call) for call in tool_calls]
    if reasoning_blocks:
        message["reasoning_blocks"] = [dict(block) for block in reasoning_blocks]
    return message


# --------------------------------------------------------------------------- transcripts


class ToolResultRecord(BaseModel):
    """One tool call's execution in an agent loop."""

    tool_call_id: str = Field(description="The id of the call it answers.")
    name: str = Field(description="The tool the model called.")
    arguments: dict[str, Any] | None = Field(
        None, description="The arguments it was called with (null: they were not JSON)."
    )
    content: str = Field(description="What was returned to the model (the error text if any).")
    is_error: bool = Field(False, description="The tool raised, was unknown, or timed out.")
    error: dict[str, Any] | None = Field(
        None, description="kind and message of the failure, when is_error."
    )
    latency_s: float = Field(0.0, description="Seconds the tool took.")


class TurnRecord(BaseModel):
    """One model turn: the response, its tool calls and what the tools returned."""

    turn: int = Field(description="1-based turn number.")
    response: str = Field(description="The response text of this turn.")
    tool_calls: list[dict[str, Any]] = Field(
        default_factory=list, description="Normalized tool calls: id, name, arguments."
    )
    tool_results: list[ToolResultRecord] = Field(
        default_factory=list, description="The executed calls' results (agent loop only)."
    )
    stop_reason: str | None = Field(None, description="Normalized stop reason.")
    raw_stop_reason: str | None = Field(None, description="The provider's own stop reason.")
    served_model: str | None = Field(None, description="The model that served this turn.")
    input_tokens: int = Field(0, description="Prompt tokens, excluding cached input tokens.")
    output_tokens: int = Field(0, description="Completion tokens.")
    cached_input_tokens: int = Field(0, description="Prompt tokens read from a prompt cache.")
    cost_usd: float | None = Field(None, description="USD for this turn; null if unknown.")
    latency_s: float = Field(0.0, description="Seconds the model call took.")
    cached: bool = Field(False, description="Served from gradetrail's cache.")
    attempts: int = Field(0, description="Calls made for this turn this run (0 when cached).")
    key: str = Field(description="The turn's cache key (SHA-256 of the conversation so far).")


TranscriptStop = Literal["answered", "tool_calls", "max_turns", "sample_timeout", "provider_error"]


class Transcript(BaseModel):
    """A conversation sample: the input messages and every model turn (row key
    ``transcript``).

    ``stopped`` says why it ended: ``answered`` (the model replied without calling a
    tool), ``tool_calls`` (no tools module: the model's calls are the answer),
    ``max_turns`` (run.max_turns reached while the model still called tools),
    ``sample_timeout`` (run.sample_timeout_s passed) or ``provider_error`` (a turn
    failed; the row's error says how).
    """

    messages: list[dict[str, Any]] = Field(
        description="The input conversation, normalized; the system prompt first (role "
        "system) when there is one."
    )
    tools: list[str] = Field(default_factory=list, description="Names of the tools offered.")
    turns: list[TurnRecord] = Field(default_factory=list, description="Model turns, in order.")
    stopped: TranscriptStop = Field("answered", description="Why the conversation ended.")


def flatten_transcript(transcript: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A row's ``transcript`` (the JSON form of :class:`Transcript`) as one list of
    messages in conversation order, for display: the input messages, then for each turn
    an ``assistant`` entry (``content``, ``tool_calls``, ``turn``, ``stop_reason``,
    tokens, ``cost_usd``, ``latency_s``, ``cached``) followed by a ``tool`` entry per
    tool result (``name``, ``tool_call_id``, ``content``, ``is_error``, ``error``,
    ``latency_s``). Tool calls and tool results are distinct entries (roles
    ``assistant`` with ``tool_calls`` and ``tool``)."""
    out: list[dict[str, Any]] = [dict(m) for m in transcript.get("messages") or ()]
    for turn in transcript.get("turns") or ():
        entry = {k: v for k, v in turn.items() if k not in ("response", "tool_results")}
        out.append({"role": "assistant", "content": turn.get("response", ""), **entry})
        for result in turn.get("tool_results") or ():
            out.append({"role": "tool", **result})
    return out


class ConversationStats(BaseModel):
    """A run's conversations in numbers (``manifest.conversations``)."""

    rows: int = Field(description="Rows with a transcript.")
    turns: int = Field(description="Model turns over those rows.")
    tool_calls: int = Field(description="Tool calls the model made.")
    tool_errors: int = Field(
        description="Tool results that were errors (the tool raised, was unknown, got "
        "arguments that were not JSON, or timed out)."
    )
    stopped: dict[str, int] = Field(description="Rows per reason the conversation ended.")


class ConversationTally:
    """Counts transcripts row by row (see :class:`ConversationStats`)."""

    def __init__(self) -> None:
        self.rows = self.turns = self.tool_calls = self.tool_errors = 0
        self.stopped: dict[str, int] = {}

    def add(self, transcript: Transcript | None) -> None:
        """Count one row's transcript (None: not a conversation row)."""
        if transcript is None:
            return
        self.rows += 1
        self.turns += len(transcript.turns)
        for turn in transcript.turns:
            self.tool_calls += len(turn.tool_calls)
            self.tool_errors += sum(r.is_error for r in turn.tool_results)
        self.stopped[transcript.stopped] = self.stopped.get(transcript.stopped, 0) + 1

    def stats(self) -> ConversationStats | None:
        """The totals, or None when no row was a conversation."""
        if not self.rows:
            return None
        return ConversationStats(
            rows=self.rows,
            turns=self.turns,
            tool_calls=self.tool_calls,
            tool_errors=self.tool_errors,
            stopped=dict(sorted(self.stopped.items())),
        )
