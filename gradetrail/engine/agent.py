"""The agent loop, a pipeline stage: the model calls the user's Python tools
(``model.tools_module``), gradetrail executes them and returns their results, until the
model answers without calling a tool.

Every model turn is one request through :meth:`gradetrail.executors.calls.Calls.call`, keyed on
the conversation so far (its tool calls and tool results included), so a re-run replays
every turn from the cache and makes no call. The tools module's SHA-256 enters the key of
every turn after the first tool result (the first turn's input does not depend on the
tools' code), so editing a tool misses only from the first turn whose input it decides.
Tools are executed again on a re-run (their results are not cached): a tool whose result
changes (the clock, a live service) misses from the turn that sees the change.

Each executed tool call is a ``tool_call`` line in the run's log (``sample_id``,
``epoch``, ``turn``, ``tool``, ``outcome``, ``error``, ``latency_ms``), beside the
``provider_call`` line of every turn.

A ``tool_choice`` that forces a call (``required``, a named tool) holds for the first
turn; later turns are sent ``auto``, or the model could never answer.

Bounds: ``run.max_turns`` model turns (the last response is then scored, the transcript
saying ``max_turns``), a turn cut at max_tokens while calling tools (its calls are not
run: the last one's arguments were cut, parsed to ``{}`` or to a prefix that may still be
valid; the truncated response is scored as ``run.truncated`` says, the transcript saying
``max_tokens``), and ``run.sample_timeout_s`` over the whole sample (every turn and
tool call; past it the sample is a ``provider_error`` of kind ``ProviderTimeout``,
transcript kept). Each tool call is also bounded by ``run.timeout_s``. Parallel tool
calls run one after another, in the model's order, so results are deterministic. A tool
that raises, an unknown tool and arguments that are not a JSON object each return an
``Error: <kind>: <message>`` result to the model (``is_error``), recorded in the
transcript; the sample goes on. A result longer than ``run.max_tool_output`` bytes is
cut to its head inside a marker (see :mod:`gradetrail.engine.toolbox`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from gradetrail.conversation.messages import ToolCall, assistant_message
from gradetrail.conversation.transcript import (
    ToolResultRecord,
    Transcript,
    TranscriptStop,
    TurnRecord,
)
from gradetrail.errors import ProviderError, ProviderTimeout
from gradetrail.executors.calls import CallResult, Calls
from gradetrail.providers.base import Request, Response

if TYPE_CHECKING:
    from gradetrail.engine.toolbox import ToolBox, ToolOutcome
    from gradetrail.rundir.runlog import RunLog

__all__ = ["Agent", "Conversation", "converse", "single_turn", "totals"]


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Agent:
    """What the loop needs besides the sample: shared by every sample of a run.

    Attributes:
        toolbox: the imported tools module.
        max_turns: model turns per sample at most (``run.max_turns``).
        sample_timeout_s: seconds per sample at most (``run.sample_timeout_s``), or None.
        tool_timeout_s: seconds per tool call at most (``run.timeout_s``).
        max_tool_output: bytes of a tool result sent to the model at most
            (``run.max_tool_output``), 0 for no bound.
    """

    toolbox: ToolBox
    max_turns: int
    sample_timeout_s: float | None
    tool_timeout_s: float
    max_tool_output: int = 0


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Conversation:
    """The end of one sample's conversation.

    Attributes:
        response: the final turn's response with tokens, cost and latency summed over the
            turns and every tool call of the trajectory (None when a turn failed or the
            sample timed out).
        error: why there is no response, or None.
        transcript: every turn, tool call and tool result.
        cached: every turn came from the cache.
        attempts: calls made over all turns this run.
        billed: when the conversation failed, what its turns were billed for (the turns
            that answered, and a failing turn's billed response), summed as
            :func:`totals` sums them; None when nothing was billed or it did not fail.
    """

    response: Response | None
    error: ProviderError | None
    transcript: Transcript
    cached: bool
    attempts: int
    billed: Response | None = None


def _turn(number: int, key: str, call: CallResult) -> TurnRecord:
    r = call.response
    assert r is not None
    return TurnRecord(
        turn=number,
        response=r.text,
        tool_calls=[dict(c) for c in r.tool_calls],
        stop_reason=r.stop_reason,
        raw_stop_reason=r.raw_stop_reason,
        served_model=r.served_model,
        input_tokens=r.input_tokens,
        output_tokens=r.output_tokens,
        cached_input_tokens=r.cached_input_tokens,
        cost_usd=r.cost_usd,
        latency_s=r.latency_s,
        cached=call.cached,
        attempts=call.attempts,
        key=key,
    )


def totals(responses: Sequence[Response]) -> Response:
    """The last response with tokens (reasoning tokens included), server-tool uses,
    latency and cost summed over ``responses`` and every turn's tool calls, in order.
    The cost is None when any turn's cost is unknown (a model with no price): a sum of
    the other turns would pass for the conversation's cost."""
    last = responses[-1]
    costs = [r.cost_usd for r in responses]
    return replace(
        last,
        input_tokens=sum(r.input_tokens for r in responses),
        output_tokens=sum(r.output_tokens for r in responses),
        cached_input_tokens=sum(r.cached_input_tokens for r in responses),
        cache_write_tokens=sum(r.cache_write_tokens for r in responses),
        cache_write_1h_tokens=sum(r.cache_write_1h_tokens for r in responses),
        reasoning_tokens=sum(r.reasoning_tokens for r in responses),
        server_tool_uses=_summed(r.server_tool_uses for r in responses),
        latency_s=sum(r.latency_s for r in responses),
        cost_usd=None if None in costs else sum(c for c in costs if c is not None),
        tool_calls=tuple(c for r in responses for c in r.tool_calls),
    )


def _summed(counts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Per-name counts summed over turns."""
    out: dict[str, int] = {}
    for one in counts:
        for name, n in one.items():
            out[name] = out.get(name, 0) + n
    return out


def _input_messages(request: Request) -> list[dict[str, Any]]:
    head = [{"role": "system", "content": request.system}] if request.system is not None else []
    return head + [dict(m) for m in request.messages]


def single_turn(request: Request, key: str, call: CallResult) -> Transcript:
    """The transcript of a conversation sample answered in one turn (no tools module):
    ``tool_calls`` when the model called tools (they are the answer), else ``answered``."""
    turns = [_turn(1, key, call)] if call.response is not None else []
    stopped: TranscriptStop = "provider_error"
    if call.response is not None:
        stopped = "tool_calls" if call.response.tool_calls else "answered"
    return Transcript(
        messages=_input_messages(request),
        tools=[t["name"] for t in request.tools],
        turns=turns,
        stopped=stopped,
    )


def _unique_ids(calls: Sequence[ToolCall], turn: int) -> list[ToolCall]:
    """The calls with ids that are non-empty and unique within the turn (a server or a
    python function may send none); the conversation pairs results to calls by id."""
    seen: set[str] = set()
    out = []
    for i, call in enumerate(calls, start=1):
        call = dict(call)
        if not call.get("id") or call["id"] in seen:
            call["id"] = f"call_{turn}_{i}"
        seen.add(call["id"])
        out.append(call)
    return out


class _Loop:
    """One sample's conversation, turn by turn."""

    def __init__(self, agent: Agent, request: Request) -> None:
        self.agent = agent
        self.request = request
        self.messages = list(request.messages)
        self.turns: list[TurnRecord] = []
        self.responses: list[Response] = []
        self.attempts = 0
        self.cached = True
        self.failed_billed: Response | None = None  # a failing turn's billed response
        start = time.monotonic()
        self.deadline = start + agent.sample_timeout_s if agent.sample_timeout_s else None

    def remaining(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def turn_request(self, number: int, key: str) -> tuple[Request, str]:
        """Turn ``number``'s request and key: the first as given; a later one with the
        conversation so far, the tools module's hash, and a ``tool_choice`` that forced a
        call (``required`` or a named tool) sent as ``auto``, so the model can answer
        from the results (forced on every turn it could only call tools again, up to
        ``max_turns``)."""
        if number == 1:
            return self.request, key
        identity = {**self.request.identity, "tools_module_sha256": self.agent.toolbox.sha256}
        choice = self.request.tool_choice
        request = replace(
            self.request,
            messages=tuple(self.messages),
            identity=identity,
            tool_choice="auto" if choice not in (None, "auto", "none") else choice,
        )
        return request, request.key()

    async def call(self, number: int, request: Request, key: str, ctx: _Services) -> CallResult:
        """Turn ``number``'s call, within the sample's time bound; its log lines carry
        ``turn``."""
        left = self.remaining()
        if left is not None and left <= 0:
            raise TimeoutError
        coro = ctx.calls.call(request, key, kind="provider", epoch=ctx.epoch, turn=number)
        return await (coro if left is None else asyncio.wait_for(coro, left))

    async def run_tools(
        self, calls: list[ToolCall], record: TurnRecord, services: _Services
    ) -> None:
        """Execute the turn's calls in order, each result recorded in ``record`` as it
        lands (so a sample timeout keeps the results so far, and the call it cut short).

        Raises:
            TimeoutError: run.sample_timeout_s passed before or during a call.
        """
        offered = [t["name"] for t in self.request.tools]  # only these may run
        schemas = {t["name"]: t.get("parameters") for t in self.request.tools}
        for call in calls:
            left = self.remaining()
            if left is not None and left <= 0:
                raise TimeoutError
            cap = self.agent.tool_timeout_s
            limit = cap if left is None else min(left, cap)
            outcome = await self.agent.toolbox.execute(
                call["name"],
                call.get("arguments"),
                call.get("arguments_error"),
                limit,
                offered,
                self.agent.max_tool_output,
                schemas,
            )
            cut = outcome.error is not None and outcome.error["kind"] == "ToolTimeout"
            if cut and left is not None and limit == left:  # the sample's bound, not the tool's
                message = f"run.sample_timeout_s passed while {call['name']} ran"
                from gradetrail.engine.toolbox import ToolOutcome  # imported with the tools

                outcome = ToolOutcome(
                    f"Error: SampleTimeout: {message}",
                    {"kind": "SampleTimeout", "message": message},
                    outcome.latency_s,
                )
            self._record(call, outcome, record, services)
            if outcome.error is not None and outcome.error["kind"] == "SampleTimeout":
                raise TimeoutError

    def _record(
        self, call: ToolCall, outcome: ToolOutcome, record: TurnRecord, services: _Services
    ) -> None:
        """One executed call: into the conversation, the turn's record and the log."""
        result: dict[str, Any] = {
            "role": "tool",
            "tool_call_id": call["id"],
            "name": call["name"],
            "content": outcome.content,
        }
        if outcome.error is not None:
            result["is_error"] = True
        self.messages.append(result)
        if services.log is not None:
            services.log.event(
                "tool_call",
                sample_id=self.request.sample_id,
                epoch=services.epoch,
                turn=record.turn,
                tool=call["name"],
                outcome="ok" if outcome.error is None else "error",
                error=None if outcome.error is None else outcome.error["kind"],
                latency_ms=round(outcome.latency_s * 1000.0, 1),
            )
        record.tool_results.append(
            ToolResultRecord(
                tool_call_id=call["id"],
                name=call["name"],
                arguments=call.get("arguments"),
                content=outcome.content,
                is_error=outcome.error is not None,
                error=outcome.error,
                latency_s=round(outcome.latency_s, 6),
            )
        )

    def end(self, stopped: TranscriptStop, error: ProviderError | None = None) -> Conversation:
        transcript = Transcript(
            messages=_input_messages(self.request),
            tools=[t["name"] for t in self.request.tools],
            turns=self.turns,
            stopped=stopped,
        )
        response = totals(self.responses) if self.responses and error is None else None
        paid = [*self.responses, *([self.failed_billed] if self.failed_billed else [])]
        billed = totals(paid) if paid and error is not None else None
        return Conversation(response, error, transcript, self.cached, self.attempts, billed)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class _Services:
    calls: Calls
    epoch: int

    @property
    def log(self) -> RunLog | None:
        return self.calls.log


async def converse(
    agent: Agent,
    request: Request,
    key: str,
    *,
    calls: Calls,
    epoch: int,
) -> Conversation:
    """Run one sample's agent loop (see the module docstring).

    Args:
        agent: the run's tools and bounds.
        request: the first turn's request (the rendered conversation and tools).
        key: its cache key.
        calls: the run's calls (its cache, executor and log).
        epoch: the row's epoch.

    Returns:
        The conversation; never raises for a failed turn or tool (they are in it).
    """
    loop = _Loop(agent, request)
    services = _Services(calls, epoch)
    for number in range(1, agent.max_turns + 1):
        turn_request, turn_key = loop.turn_request(number, key)
        try:
            call = await loop.call(number, turn_request, turn_key, services)
        except TimeoutError:
            return loop.end("sample_timeout", _timeout(agent, number))
        loop.attempts += call.attempts
        loop.cached = loop.cached and call.cached
        if call.response is None:
            loop.failed_billed = call.billed
            return loop.end("provider_error", call.error or ProviderError("no response"))
        record = _turn(number, turn_key, call)
        loop.turns.append(record)
        loop.responses.append(call.response)
        if not call.response.tool_calls:
            return loop.end("answered")
        if call.response.stop_reason == "max_tokens":  # its last call's arguments were cut
            return loop.end("max_tokens")
        if number == agent.max_turns:
            return loop.end("max_turns")
        calls = _unique_ids(call.response.tool_calls, number)
        record.tool_calls = calls
        answer = call.response
        loop.messages.append(
            assistant_message(answer.text, calls, answer.reasoning_blocks, answer.content_blocks)
        )
        try:
            await loop.run_tools(calls, record, services)
        except TimeoutError:
            return loop.end("sample_timeout", _timeout(agent, number))
    return loop.end("max_turns")  # unreachable: the last turn returns above


def _timeout(agent: Agent, turn: int) -> ProviderTimeout:
    return ProviderTimeout(
        f"the agent loop passed run.sample_timeout_s ({agent.sample_timeout_s:g} s) in turn "
        f"{turn}; raise it or lower run.max_turns"
    )
