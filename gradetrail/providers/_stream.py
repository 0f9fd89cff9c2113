"""Streamed answers (server-sent events) folded back into the answer a non-streaming call
returns, so one parser (:meth:`~gradetrail.providers._http.HttpProvider.normalize`) reads
both.

- :class:`SseParser` turns lines into ``(event, data)`` pairs (the SSE format of the
  WHATWG HTML standard, as both APIs send it).
- :class:`AnthropicFold` folds Messages events (``message_start``,
  ``content_block_start`` / ``_delta`` / ``_stop``, ``message_delta``, ``message_stop``,
  ``ping``, ``error``) into a Message: text, thinking (with its signature), redacted
  thinking, tool use (its JSON input from ``input_json_delta`` pieces), server tool
  blocks and citations, stop reason and usage.
- :class:`OpenAIFold` folds Chat Completions chunks (``choices[0].delta`` content,
  refusal, reasoning content, tool call pieces; ``finish_reason``; the usage chunk;
  ``[DONE]``) into a chat completion.

A stream that ends before its terminal event (Anthropic ``message_stop``, OpenAI
``[DONE]`` or a finish reason with the usage asked for) was cut: a transient
:class:`~gradetrail.errors.ProviderConnectionError`, never a partial answer (so never
cached). An ``error`` event is the error body it carries, classified as any other.
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from typing import Any

from gradetrail.errors import InvalidResponse, ProviderConnectionError
from gradetrail.providers._openai_wire import thinking_text

__all__ = ["AnthropicFold", "Fold", "OpenAIFold", "SseParser"]


class SseParser:
    """Server-sent events from lines (without their line ends)."""

    def __init__(self) -> None:
        self._event: str | None = None
        self._data: list[str] = []

    def line(self, line: str) -> tuple[str | None, str] | None:
        """Take one line; return ``(event name or None, data)`` when it ends an event."""
        if not line:
            if not self._data:
                self._event = None
                return None
            event, data = self._event, "\n".join(self._data)
            self._event, self._data = None, []
            return event, data
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return None

    def end(self) -> tuple[str | None, str] | None:
        """The event a stream's last lines left pending (no blank line after them)."""
        return self.line("")


class Fold(ABC):
    """Folds one stream's events into the non-streaming answer.

    Attributes:
        started: ``time.perf_counter()`` when the request was sent.
        first_token_s: seconds from ``started`` to the first output (text, thinking,
            refusal or a tool call), or None before it.
        done: the terminal event arrived.
    """

    def __init__(self, started: float) -> None:
        self.started = started
        self.first_token_s: float | None = None
        self.done = False
        self.error: dict[str, Any] | None = None

    def _output(self) -> None:
        if self.first_token_s is None:
            self.first_token_s = time.perf_counter() - self.started

    def feed(self, event: str | None, data: str) -> None:
        """Take one event.

        Raises:
            InvalidResponse: its data is not JSON.
        """
        if data.strip() == "[DONE]":
            self.done = True
            return
        try:
            value = json.loads(data)
        except ValueError:
            raise InvalidResponse(
                f"stream event {event or 'data'} is not JSON: {data[:80]!r}", status=200
            ) from None
        if not isinstance(value, dict):
            return
        if event == "error" or value.get("type") == "error" or value.get("error"):
            # an error event whose data is the error object itself ({"message": ...}) is
            # read as the error envelope it stands for, its words classified as any other
            wrapped = "error" in value or value.get("type") == "error"
            self.error = value if wrapped else {"error": value}
            self.done = True
            return
        self.take(event, value)

    @abstractmethod
    def take(self, event: str | None, value: dict[str, Any]) -> None:
        """Fold one decoded event."""

    @abstractmethod
    def answer(self) -> dict[str, Any]:
        """The folded answer in the non-streaming shape.

        Raises:
            ProviderConnectionError: the stream ended before its terminal event (cut).
        """

    def _cut(self, what: str) -> ProviderConnectionError:
        return ProviderConnectionError(
            f"the stream ended before {what} (cut mid-way); a partial answer is never kept"
        )


class AnthropicFold(Fold):
    """Messages stream events -> a Message."""

    def __init__(self, started: float) -> None:
        super().__init__(started)
        self.message: dict[str, Any] = {}
        self.blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}

    def take(self, event: str | None, value: dict[str, Any]) -> None:
        """See :meth:`Fold.take`."""
        kind = value.get("type") or event
        if kind == "message_start":
            self.message = dict(value.get("message") or {})
        elif kind == "content_block_start":
            index = int(value.get("index", len(self.blocks)))
            block = dict(value.get("content_block") or {})
            if block.get("type") == "tool_use" or block.get("type") == "server_tool_use":
                self._json[index] = []
            self.blocks[index] = block
            if block.get("type") in ("redacted_thinking", "tool_use"):
                self._output()
        elif kind == "content_block_delta":
            self._delta(int(value.get("index", 0)), value.get("delta") or {})
        elif kind == "content_block_stop":
            index = int(value.get("index", 0))
            pieces = self._json.pop(index, None)
            if pieces:
                try:
                    self.blocks[index]["input"] = json.loads("".join(pieces))
                except ValueError:
                    self.blocks[index]["input"] = "".join(pieces)
        elif kind == "message_delta":
            delta = value.get("delta") or {}
            for key in ("stop_reason", "stop_sequence", "stop_details"):
                if key in delta:
                    self.message[key] = delta[key]
            usage = value.get("usage")
            if isinstance(usage, dict):  # cumulative counts: the later wins
                merged = dict(self.message.get("usage") or {})
                merged.update({k: v for k, v in usage.items() if v is not None})
                self.message["usage"] = merged
        elif kind == "message_stop":
            self.done = True

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        block = self.blocks.setdefault(index, {"type": "text", "text": ""})
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = (block.get("text") or "") + str(delta.get("text") or "")
            self._output()
        elif kind == "thinking_delta":
            block["thinking"] = (block.get("thinking") or "") + str(delta.get("thinking") or "")
            self._output()
        elif kind == "signature_delta":
            block["signature"] = (block.get("signature") or "") + str(delta.get("signature") or "")
        elif kind == "input_json_delta":
            self._json.setdefault(index, []).append(str(delta.get("partial_json") or ""))
        elif kind == "citations_delta":
            block.setdefault("citations", []).append(delta.get("citation"))

    def answer(self) -> dict[str, Any]:
        """See :meth:`Fold.answer`."""
        if self.error is not None:
            return self.error
        if not self.done:
            raise self._cut("message_stop")
        out = dict(self.message)
        out["content"] = [self.blocks[i] for i in sorted(self.blocks)]
        return out


class OpenAIFold(Fold):
    """Chat Completions chunks -> a chat completion (its first choice)."""

    def __init__(self, started: float) -> None:
        super().__init__(started)
        self.head: dict[str, Any] = {}
        self.message: dict[str, Any] = {"role": "assistant"}
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None
        self.extra: dict[str, Any] = {}
        self.usage: dict[str, Any] | None = None
        #: a chunk held the first choice (a stream of none answered nothing)
        self.chosen = False

    def take(self, event: str | None, value: dict[str, Any]) -> None:
        """See :meth:`Fold.take`."""
        for key in ("id", "object", "created", "model", "system_fingerprint", "service_tier"):
            # the first chunk that names it: Azure opens with a prompt-filter chunk whose
            # id and model are "" (and created 0)
            if value.get(key) not in (None, "", 0) and key not in self.head:
                self.head[key] = value[key]
        if isinstance(value.get("usage"), dict):
            self.usage = value["usage"]
        for choice in value.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            self.chosen = True
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if isinstance(content, list):  # Mistral: chunks of thinking and text
                self._chunks(content)
            for key in ("content", "refusal", "reasoning_content", "reasoning"):
                piece = delta.get(key)
                if isinstance(piece, str) and piece:
                    self.message[key] = (self.message.get(key) or "") + piece
                    self._output()
            for call in delta.get("tool_calls") or []:
                self._call(call)
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
            if "stop_reason" in choice:  # vLLM: the matched stop string
                self.extra["stop_reason"] = choice["stop_reason"]
            if isinstance(choice.get("error"), dict):  # OpenRouter: failed mid-answer
                self.extra["error"] = choice["error"]

    def _chunks(self, parts: list[Any]) -> None:
        """A ``delta.content`` that is a list of chunks (Mistral's reasoning models): the
        text chunks appended to the content, the thinking ones to the reasoning text."""
        for part in parts:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "text" and isinstance(part.get("text"), str):
                piece, key = part["text"], "content"
            else:
                piece, key = thinking_text([part]), "reasoning_content"
            if piece:
                self.message[key] = (self.message.get(key) or "") + piece
                self._output()

    def _call(self, piece: dict[str, Any]) -> None:
        index = int(piece.get("index", len(self.calls)))
        call = self.calls.setdefault(
            index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
        )
        if piece.get("id"):
            call["id"] = piece["id"]
        fn = piece.get("function") or {}
        if fn.get("name"):
            call["function"]["name"] += fn["name"]
        if fn.get("arguments"):
            call["function"]["arguments"] += fn["arguments"]
        self._output()

    def answer(self) -> dict[str, Any]:
        """See :meth:`Fold.answer`."""
        if self.error is not None:
            return self.error
        if not self.done and self.finish is None:
            raise self._cut("its finish_reason")
        message = dict(self.message)
        message.setdefault("content", None if (self.calls or "refusal" in message) else "")
        if self.calls:
            message["tool_calls"] = [self.calls[i] for i in sorted(self.calls)]
        choice = {"index": 0, "message": message, "finish_reason": self.finish, **self.extra}
        # no chunk held a choice: no answer, as a non-streamed `choices: []` is none
        out = {**self.head, "choices": [choice] if self.chosen else []}
        if self.usage is not None:
            out["usage"] = self.usage
        return out
