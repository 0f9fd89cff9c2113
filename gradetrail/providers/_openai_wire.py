"""OpenAI Chat Completions' wire format: gradetrail's neutral messages and tools in the
API's shapes, and the API's tool calls read back into the neutral shape."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gradetrail.conversation.messages import Message, ToolCall, make_tool_call
from gradetrail.conversation.tools import ToolDef

__all__ = [
    "openai_client",
    "openai_headers",
    "openai_tool_choice",
    "openai_tools",
    "thinking_text",
    "to_openai",
    "tool_calls_from_openai",
]


def openai_tools(tools: Sequence[ToolDef]) -> list[dict[str, Any]]:
    """Chat Completions ``tools``: ``{"type": "function", "function": {...}}``."""
    return [{"type": "function", "function": dict(tool)} for tool in tools]


def openai_tool_choice(choice: str | Mapping[str, str]) -> Any:
    """Chat Completions ``tool_choice``."""
    if isinstance(choice, str):
        return choice
    return {"type": "function", "function": {"name": choice["name"]}}


def _arguments_text(call: ToolCall) -> str:
    if call.get("arguments") is None:
        return str(call.get("raw_arguments") or "")
    return json.dumps(call["arguments"], ensure_ascii=False)


def to_openai(system: str | None, messages: Iterable[Message]) -> list[dict[str, Any]]:
    """Chat Completions ``messages``: the system prompt first, assistant ``tool_calls``
    as ``{"id", "type": "function", "function": {"name", "arguments": <JSON text>}}``
    (with the reasoning fields the server sent on that message, ``reasoning_content`` /
    ``reasoning``, kept in ``reasoning_blocks`` as ``{field: text}``) and tool results as
    ``role: tool`` messages."""
    out: list[dict[str, Any]] = []
    if system is not None:
        out.append({"role": "system", "content": system})
    for message in messages:
        role = message["role"]
        if role == "assistant" and message.get("tool_calls"):
            fields = {
                name: value
                for block in message.get("reasoning_blocks") or ()
                if "type" not in block  # a Chat message's own fields, not another API's
                for name, value in block.items()
            }
            out.append(
                {
                    "role": "assistant",
                    "content": message["content"] or None,
                    **fields,
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


def thinking_text(parts: list[Any]) -> str:
    """The text of Mistral's ``thinking`` content chunks (``{"type": "thinking",
    "thinking": [{"type": "text", "text"}, ...]}``, its reasoning models' answer
    content), joined; empty when there are none."""
    out = []
    for part in parts:
        if isinstance(part, dict) and part.get("type") == "thinking":
            inner = part.get("thinking")
            for chunk in inner if isinstance(inner, list) else [inner]:
                text = chunk.get("text") if isinstance(chunk, dict) else chunk
                if isinstance(text, str):
                    out.append(text)
    return "".join(out)


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


def openai_headers(key: str, at_openai: bool) -> dict[str, str]:
    """``Authorization: Bearer <key>``; at OpenAI itself (``at_openai``) also
    ``OpenAI-Organization`` / ``OpenAI-Project`` from ``OPENAI_ORG_ID`` /
    ``OPENAI_PROJECT_ID`` when set, as the SDK sends them (never to another server)."""
    headers = {"Authorization": f"Bearer {key}"}
    if at_openai:
        for header, env in (
            ("OpenAI-Organization", "OPENAI_ORG_ID"),
            ("OpenAI-Project", "OPENAI_PROJECT_ID"),
        ):
            if os.environ.get(env):
                headers[header] = os.environ[env]
    return headers


def openai_client(key: str, base_url: str, http_client: Any, at_openai: bool = True) -> Any:
    """An ``openai.AsyncOpenAI`` with the SDK's own retries off around ``http_client``
    (the run's one retry policy decides). Away from OpenAI (not ``at_openai``) it sends
    no ``OpenAI-Organization`` / ``OpenAI-Project``, which the SDK reads from the
    environment by itself (as :func:`openai_headers` sends them: at OpenAI only). It
    sends none of the headers of ``OPENAI_CUSTOM_HEADERS`` either, and the key it is
    given whatever ``Authorization`` that variable names (see
    :func:`~gradetrail.providers._transport.sdk_env_headers`)."""
    import openai

    from gradetrail.providers._transport import sdk_env_headers

    omit = openai.Omit()
    headers: dict[str, Any] = {name: omit for name in sdk_env_headers("OPENAI_CUSTOM_HEADERS")}
    if not at_openai:
        headers.update({"OpenAI-Organization": omit, "OpenAI-Project": omit})
    headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
    headers["Authorization"] = f"Bearer {key}"  # the SDK's own, named: no other replaces it
    return openai.AsyncOpenAI(
        api_key=key,
        base_url=base_url,
        max_retries=0,
        http_client=http_client,
        default_headers=headers,
    )
