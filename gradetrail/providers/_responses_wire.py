"""The OpenAI Responses API's wire format (``POST /v1/responses``): gradetrail's neutral
messages and tools as the API's input items, and its output items read back.

Input items (what :func:`to_responses_input` writes):

- a user message: ``{"role": "user", "content": TEXT}``;
- an assistant message: its reasoning items first, verbatim (``{"type": "reasoning", "id",
  "summary", "encrypted_content"}``, as the API returned them: with ``store: false`` the
  encrypted content is the only way its reasoning reaches the next turn, and the API
  requires a function call's reasoning item before it; an item without it is left out),
  then ``{"role": "assistant",
  "content": TEXT}`` when it has text, then one ``{"type": "function_call", "call_id",
  "name", "arguments": <JSON text>}`` a tool call;
- a tool result: ``{"type": "function_call_output", "call_id", "output": TEXT}``.

A tool-calling answer those parts do not rebuild (several messages, a message's
``phase``, reasoning between a message and a call; see :func:`rebuilt_exactly`) is kept
whole and sent back in its order, each message as ``{"role": "assistant", "content",
"phase"}``.

The system prompt travels apart, as ``instructions``. Tools are ``{"type": "function",
"name", "description", "parameters", "strict"}`` (flat, unlike Chat Completions' nested
``function``; ``strict: false`` unless the definition asks for it, as the other APIs
default), ``tool_choice`` is ``auto`` / ``none`` / ``required`` or ``{"type":
"function", "name"}``.

Output items (what :func:`read_output` reads): ``message`` items (their ``output_text``
parts are the answer, except a message labelled ``phase: commentary``, which is the
model's working; a ``refusal`` part is the model declining), ``function_call`` items
(``call_id`` is the tool call's id), and ``reasoning`` items (kept verbatim, their
``summary`` texts joined as the reasoning text; an item with no summary gives its
``reasoning_text`` content instead, as gpt-oss on vLLM returns it). Hosted tools billed per call
(:data:`BILLED_CALLS`: ``web_search_call``, ``file_search_call``) are counted by item type,
and every hosted tool's item (:data:`HOSTED_CALLS`) is noted; other item types are
skipped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gradetrail.conversation.messages import Message, ToolCall, make_tool_call
from gradetrail.conversation.tools import ToolDef

__all__ = [
    "ResponsesOutput",
    "read_output",
    "rebuilt_exactly",
    "responses_text_format",
    "responses_tool_choice",
    "responses_tools",
    "to_responses_input",
]


def responses_tools(tools: Sequence[ToolDef]) -> list[dict[str, Any]]:
    """Responses ``tools``: ``{"type": "function", "name", "description", "parameters",
    "strict"}``, ``strict: false`` unless the definition sets it: the Responses API
    makes a function without ``strict`` strict (every property required, so the model
    must fill parameters the schema leaves optional), where Chat Completions and the
    Messages API do not; a tool means the same on every API."""
    return [{"type": "function", **tool, "strict": bool(tool.get("strict"))} for tool in tools]


def responses_tool_choice(choice: str | Mapping[str, str]) -> Any:
    """Responses ``tool_choice``: the mode, or ``{"type": "function", "name"}``."""
    if isinstance(choice, str):
        return choice
    return {"type": "function", "name": choice["name"]}


def responses_text_format(name: str, schema: Mapping[str, Any], strict: bool) -> dict[str, Any]:
    """Responses ``text``: ``{"format": {"type": "json_schema", "name", "schema",
    "strict"}}`` (flat, unlike Chat Completions' ``response_format.json_schema``)."""
    return {
        "format": {"type": "json_schema", "name": name, "schema": dict(schema), "strict": strict}
    }


def _arguments_text(call: ToolCall) -> str:
    if call.get("arguments") is None:
        return str(call.get("raw_arguments") or "")
    return json.dumps(call["arguments"], ensure_ascii=False)


def _function_call(call: ToolCall) -> dict[str, Any]:
    return {
        "type": "function_call",
        "call_id": call["id"],
        "name": call["name"],
        "arguments": _arguments_text(call),
    }


def _sent_back(block: Mapping[str, Any], stored: bool) -> bool:
    """A reasoning item goes back when it is the Responses API's own and, unless the
    request is stored, carries its encrypted content."""
    return block.get("type") == "reasoning" and (
        stored or block.get("encrypted_content") is not None
    )


def _verbatim(
    items: Sequence[Mapping[str, Any]], calls: Sequence[ToolCall], stored: bool
) -> list[dict[str, Any]]:
    """A tool-calling answer's output items in their order: reasoning items as
    :func:`_sent_back` allows, each message as an assistant message with its ``phase``,
    each ``function_call`` written from the loop's call in order (it may have given a
    call a unique id); hosted tools' items are left out."""
    out: list[dict[str, Any]] = []
    rest = iter(calls)
    for item in items:
        kind = item.get("type")
        if kind == "reasoning" and _sent_back(item, stored):
            out.append(dict(item))
        elif kind == "message":
            text = "".join(_message_texts(item, "output_text", "text"))
            if text:
                out.append({"role": "assistant", "content": text, **_phase(item)})
        elif kind == "function_call":
            call = next(rest, None)
            if call is not None:
                out.append(_function_call(call))
    return out + [_function_call(call) for call in rest]


def to_responses_input(messages: Iterable[Message], stored: bool = False) -> list[dict[str, Any]]:
    """Responses ``input`` items for a conversation (see the module docstring); only
    reasoning items of the Responses API's own shape (``type: reasoning``) are sent back,
    and, unless the request is ``stored`` (``store: true``), only those carrying their
    ``encrypted_content``: with ``store: false`` the API kept nothing an item's id could
    name, and answers an item without it with a 404 ("Item with id 'rs_...' not found").
    An answer kept whole (``content_blocks``: its items out of the order reasoning,
    message, calls, several messages, or a message's ``phase``) goes back in its order,
    each message with its phase (see :func:`rebuilt_exactly`)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message["role"]
        if role == "assistant" and message.get("content_blocks"):
            calls = message.get("tool_calls") or ()
            out.extend(_verbatim(message["content_blocks"], calls, stored))
        elif role == "assistant":
            for block in message.get("reasoning_blocks") or ():
                if _sent_back(block, stored):
                    out.append(dict(block))
            if message["content"] or not message.get("tool_calls"):
                out.append({"role": "assistant", "content": message["content"]})
            for call in message.get("tool_calls") or ():
                out.append(_function_call(call))
        elif role == "tool":
            out.append(
                {
                    "type": "function_call_output",
                    "call_id": message["tool_call_id"],
                    "output": message["content"],
                }
            )
        else:
            out.append({"role": role, "content": message["content"]})
    return out


#: output items of hosted tools the API bills per call (besides the tokens), counted as
#: server-side tool uses under their item type
BILLED_CALLS = frozenset(["web_search_call", "file_search_call"])
#: output items of the tools the API runs itself (hosted tools: nothing for the client to
#: do), whether billed per call or not
HOSTED_CALLS = BILLED_CALLS | frozenset(
    ["code_interpreter_call", "image_generation_call", "mcp_call", "mcp_list_tools"]
)


@dataclass(frozen=True, slots=True)
class ResponsesOutput:
    """What a Responses answer's ``output`` holds.

    Attributes:
        text: the ``output_text`` parts of every message item, joined in order.
        refusal: the ``refusal`` parts' text, or None when the model did not decline.
        tool_calls: the ``function_call`` items, normalized (id = the item's ``call_id``).
        reasoning_items: the ``reasoning`` items, verbatim.
        reasoning: the reasoning items' summary texts (an item without a summary: its
            ``reasoning_text`` content, the raw reasoning open models return) and the
            ``commentary`` messages' texts, in order, joined by blank lines, or None.
        has_message: True when some message item was present (an empty answer is then
            still an answer).
        server_calls: hosted tool calls billed per call, by item type
            (``{"web_search_call": 2}``; see :data:`BILLED_CALLS`).
        hosted: how many items of the tools the API ran itself the output holds
            (:data:`HOSTED_CALLS`).
    """

    text: str
    refusal: str | None
    tool_calls: tuple[ToolCall, ...]
    reasoning_items: tuple[dict[str, Any], ...]
    reasoning: str | None
    has_message: bool
    server_calls: dict[str, int] = field(default_factory=dict)
    hosted: int = 0


def _part_texts(parts: Any) -> list[str]:
    """The texts of a reasoning item's ``summary`` or ``content`` parts."""
    if not isinstance(parts, list):
        return []
    return [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]


def _message_texts(item: Mapping[str, Any], kind: str, key: str) -> list[str]:
    """The ``key`` texts of a message item's content parts of type ``kind``."""
    parts = item.get("content")
    return [
        p[key]
        for p in (parts if isinstance(parts, list) else ())
        if isinstance(p, dict) and p.get("type") == kind and isinstance(p.get(key), str)
    ]


def _phase(item: Mapping[str, Any]) -> dict[str, str]:
    """``{"phase": ...}`` for a message item that has one, else empty."""
    phase = item.get("phase")
    return {"phase": phase} if isinstance(phase, str) else {}


#: the order :func:`to_responses_input` rebuilds an answer's items in from its parts
_REBUILT_ORDER = {"reasoning": 0, "message": 1, "function_call": 2}


def rebuilt_exactly(output: Sequence[Mapping[str, Any]]) -> bool:
    """True when an answer's parts (reasoning items, text, tool calls) give its output
    items back in their order: reasoning items, then at most one message without a
    ``phase``, then function calls (hosted tools' items, never sent back, aside). False
    for a message labelled ``commentary`` or ``final_answer`` (GPT-5.4 and later: the
    API asks for the phase back, or the model may take its preamble for its answer),
    several messages, or items interleaved (reasoning between a message and a call)."""
    rank = messages = 0
    for item in output:
        here = _REBUILT_ORDER.get(str(item.get("type")))
        if here is None:
            continue
        if here < rank:
            return False
        if here == 1:
            messages += 1
            if messages > 1 or _phase(item):
                return False
        rank = here
    return True


def read_output(output: Any) -> ResponsesOutput:
    """Read a Responses answer's ``output`` list (items that are not objects, or of types
    gradetrail does not use, are skipped). A message labelled ``phase: commentary`` (a
    preamble or progress note before the final answer) is the model's working, not its
    answer: its text joins the reasoning text, unless the answer has nothing else (no
    other message, no function call)."""
    texts: list[str] = []
    commentary: list[str] = []
    refusals: list[str] = []
    calls: list[ToolCall] = []
    reasoning_items: list[dict[str, Any]] = []
    notes: list[tuple[bool, str]] = []  # (commentary?, text): the reasoning text's parts
    has_message = False
    hosted = 0
    server_calls: dict[str, int] = {}
    for item in output if isinstance(output, list) else ():
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "message":
            has_message = True
            said = _message_texts(item, "output_text", "text")
            if item.get("phase") == "commentary":
                commentary.extend(said)
                notes.extend((True, t) for t in said if t)
            else:
                texts.extend(said)
            refusals.extend(_message_texts(item, "refusal", "refusal"))
        elif kind == "function_call":
            calls.append(
                make_tool_call(item.get("call_id"), item.get("name"), item.get("arguments"))
            )
        elif kind in HOSTED_CALLS:
            hosted += 1
            if kind in BILLED_CALLS:
                server_calls[kind] = server_calls.get(kind, 0) + 1
        elif kind == "reasoning":
            reasoning_items.append(item)
            # its summary; else its raw reasoning_text content (gpt-oss on vLLM: no summary)
            texts_of = [_part_texts(item.get("summary")), _part_texts(item.get("content"))]
            notes.extend((False, t) for t in next((t for t in texts_of if t), []))
    if commentary and not texts and not calls and not refusals:  # nothing else said
        texts = commentary
        notes = [(said, t) for said, t in notes if not said]
    summaries = [t for _, t in notes]
    return ResponsesOutput(
        text="".join(texts),
        refusal="".join(refusals) if refusals else None,
        tool_calls=tuple(calls),
        reasoning_items=tuple(reasoning_items),
        reasoning="\n\n".join(summaries) if summaries else None,
        has_message=has_message,
        server_calls=server_calls,
        hosted=hosted,
    )
