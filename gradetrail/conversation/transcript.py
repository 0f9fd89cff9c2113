"""The transcript of a multi-turn sample (each model turn, its tool calls and their
results) and the run's totals over transcripts (``manifest.conversation``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ConversationStats",
    "ConversationTally",
    "ToolResultRecord",
    "TranscriptStop",
    "Transcript",
    "TurnRecord",
    "flatten_transcript",
]

TranscriptStop = Literal[
    "answered", "tool_calls", "max_tokens", "max_turns", "sample_timeout", "provider_error"
]


class ToolResultRecord(BaseModel):
    """One tool call's execution in an agent loop."""

    model_config = ConfigDict(defer_build=True)  # built on first use, not at import

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

    model_config = ConfigDict(defer_build=True)  # built on first use, not at import

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


class Transcript(BaseModel):
    """A conversation sample: the input messages and every model turn (row key
    ``transcript``).

    ``stopped`` says why it ended: ``answered`` (the model replied without calling a
    tool), ``tool_calls`` (no tools module: the model's calls are the answer),
    ``max_turns`` (run.max_turns reached while the model still called tools),
    ``sample_timeout`` (run.sample_timeout_s passed) or ``provider_error`` (a turn
    failed; the row's error says how).
    """

    model_config = ConfigDict(defer_build=True)  # built on first use, not at import

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

    model_config = ConfigDict(defer_build=True)  # built on first use, not at import

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
