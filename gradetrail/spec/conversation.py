"""Conversation and tool fields of the spec: message templates (``prompt`` as a list),
tool definitions, ``tool_choice`` and the ``tool_calls`` scorer's section."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from gradetrail.conversation.messages import ConversationError, check_order
from gradetrail.conversation.tools import ToolError, normalize_tool_choice, normalize_tools
from gradetrail.spec.base import _Strict


class MessageTemplate(_Strict):
    """One message of a multi-turn prompt; ``content`` is a Jinja2 template over the row."""

    role: Literal["system", "user", "assistant"] = Field(description="Who says it.")
    content: str = Field(description="Jinja2 template of the message text.")


def check_prompt(value: Any) -> Any:
    """A ``prompt`` is a template string or a list of ``{role, content}`` messages in a
    valid role order (see :mod:`gradetrail.conversation.messages`). Raises ValueError (one line)."""
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, list) or not value:
        raise ValueError("use a template string or a list of {role, content} messages")
    for i, item in enumerate(value, start=1):
        if not isinstance(item, dict) or set(item) != {"role", "content"}:
            raise ValueError(f"message {i} must have exactly the keys role and content")
        if item["role"] not in ("system", "user", "assistant"):
            raise ValueError(f"message {i}: role {item['role']!r}; use system, user or assistant")
        if not isinstance(item["content"], str):
            raise ValueError(f"message {i}: content must be a template string")
    try:
        check_order(value)
    except ConversationError as exc:
        raise ValueError(f"{exc}") from None
    return value


def check_tools(tools: Any, tool_choice: Any) -> None:
    """Tool definitions must be valid (JSON Schema parameters) and ``tool_choice`` name one
    of them. Raises ValueError (one line)."""
    try:
        defined = normalize_tools(tools) if tools is not None else ()
        if tools is not None:
            normalize_tool_choice(tool_choice, defined)
        elif isinstance(tool_choice, str):
            normalize_tool_choice(tool_choice, ())
    except ToolError as exc:
        raise ValueError(str(exc)) from None


class ToolCallsScorerSpec(_Strict):
    """Compare the model's tool calls (the whole trajectory in an agent loop) with the
    row's expected calls, BFCL style; deterministic, no judge."""

    type: Literal["tool_calls"]
    expected_field: str = Field(
        "expected_calls",
        description="Dotted path to the row's expected calls: [{TOOL: {ARG: [allowed "
        "values]}}]; '' among the values means the argument may be omitted.",
    )
    mode: Literal["ordered", "unordered", "subset"] = Field(
        "unordered",
        description="ordered: the expected calls in order, no others; unordered: in any "
        "order, no others; subset: every expected call made, others allowed.",
    )
    partial_credit: bool = Field(
        False,
        description="Score the call-level F1 of the matched calls instead of 1/0 (in subset "
        "mode, the recall).",
    )
    string_match: Literal["normalized", "exact"] = Field(
        "normalized",
        description="normalized: strings compare case-folded, without whitespace and "
        ",./-_*^ (as BFCL); exact: character for character.",
    )
