"""JSON-schema answers (``model.response_format``) on the Anthropic Messages API, which has
no ``response_format``: the schema becomes a tool the model is forced to call
(``tool_choice: {"type": "tool", "name"}``), and that call's input, the answer object, is
read back as the response's text (JSON), as if the model had written it.

Chat Completions (``response_format``) and the Responses API (``text.format``) take the
schema natively; their providers send it themselves.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from gradetrail.errors import BadRequest
from gradetrail.providers.base import Response
from gradetrail.spec.model import ResponseFormat

__all__ = ["answer_from_forced_tool", "force_answer_tool"]

_DESCRIPTION = "Give your final answer as this tool's input, following its schema exactly."


def force_answer_tool(body: dict[str, Any], fmt: ResponseFormat) -> None:
    """Add the answer tool to a Messages ``body`` and force the model to call it.

    Raises:
        BadRequest: the request offers tools of its own (a forced answer tool would keep
            the model from calling them).
    """
    if body.get("tools"):
        raise BadRequest(
            "model.response_format on anthropic forces an answer tool, so the request cannot "
            "offer tools of its own; remove the tools or the response_format",
            error_type="response_format_with_tools",
        )
    body["tools"] = [{"name": fmt.name, "description": _DESCRIPTION, "input_schema": fmt.schema_}]
    body["tool_choice"] = {"type": "tool", "name": fmt.name}


def answer_from_forced_tool(response: Response, fmt: ResponseFormat) -> Response:
    """The response with the answer tool's input as its text (JSON, keys in the model's
    order), that call removed from its tool calls, and stop reason ``end_turn`` (the raw
    ``tool_use`` kept). A response without the call (a refusal, say) is returned as it
    is: the scorer then finds no JSON. Nor is a response cut at max_tokens read: its
    call's input is what the API parsed of a cut object (``{}``, or a prefix that may
    still follow the schema), not an answer; its text stays the model's (often empty),
    the call kept in its tool calls, and the json scorer says it was cut."""
    calls = [c for c in response.tool_calls if c.get("name") == fmt.name]
    if not calls or response.stop_reason == "max_tokens":
        return response
    call = calls[0]
    if call.get("arguments") is None:
        text = str(call.get("raw_arguments") or "")
    else:
        text = json.dumps(call["arguments"], ensure_ascii=False)
    stop = "end_turn" if response.stop_reason == "tool_use" else response.stop_reason
    rest = tuple(c for c in response.tool_calls if c is not call)
    return replace(response, text=text, tool_calls=rest, stop_reason=stop)
