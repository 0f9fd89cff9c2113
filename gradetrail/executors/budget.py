"""A hard USD ceiling across a run (``run.max_cost_usd``, ``--max-cost``): model and judge
calls, online and in batches.

Before each paid call (or batch) its *worst case* is reserved: no call starts unless
spending so far, plus the worst case of everything in flight, plus its own, stays at or
under the ceiling. When a call ends its reservation is replaced by what it cost. So the
ceiling holds with any concurrency, whatever the responses turn out to be.

Worst case of one request (a stated bound, no tokenizer needed): input tokens at most the
UTF-8 bytes of its messages, system prompt and tools plus :data:`MESSAGE_OVERHEAD` tokens
a message (a BPE token is at least one byte), output tokens at most its ``max_tokens``
(or the larger length a ``model.params.extra`` key sends in its place) times the
completions ``extra.n`` asks for, and with ``model.pause_turn_continuations`` every part
(each part's input the request's and the parts before it); ``extra``'s own bytes count as
input, and a server tool in ``extra.tools`` (a fee per use) has no worst case;
priced by the provider's own :meth:`~gradetrail.providers.base.Provider.price`, at the
batch tier for a batch. A request without ``max_tokens`` (OpenAI sends none unless the
spec sets one) or a model without a price has no worst case: a budgeted run refuses to
start (never a silent "n/a").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gradetrail.errors import RunError, SpecError
from gradetrail.executors.base import Executor
from gradetrail.executors.retry import AttemptListener, CallOutcome
from gradetrail.providers.base import Provider, Request, Response

__all__ = ["Budget", "BudgetExhausted", "BudgetedExecutor", "worst_case_usd"]

#: tokens a message may add to its text (role and framing), in the worst-case bound
MESSAGE_OVERHEAD = 16


class BudgetExhausted(RunError):
    """The next call could push spending past ``run.max_cost_usd``: the run stops starting
    calls (those in flight land), resumable: re-run with a larger ceiling."""

    exit_code = 3


def _input_bound(request: Request) -> int:
    """Input tokens ``request`` can count at most (see the module docstring)."""
    size = len((request.system or "").encode("utf-8", "surrogatepass"))
    for message in request.messages:
        size += len(json.dumps(message, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    if request.tools:
        size += len(json.dumps(request.tools, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    extra = request.params.get("extra")
    if extra:  # sent verbatim in the body (tool definitions, say): read as input too
        size += len(json.dumps(extra, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    return size + MESSAGE_OVERHEAD * (len(request.messages) + 1)


def worst_case_usd(provider: Provider, request: Request, *, batch: bool = False) -> float:
    """The most ``request`` can cost, USD (see the module docstring).

    Raises:
        SpecError: no ``max_tokens`` to bound the output, or no price for the model.
    """
    limit = _output_bound(request) or _default_max_tokens(provider)
    if not limit:
        raise SpecError(
            f"model.params.max_tokens: a budgeted run needs a bound on each response's length "
            f"for {request.model}; set it (run.max_cost_usd is set)"
        )
    tools = (request.params.get("extra") or {}).get("tools")
    for tool in tools if isinstance(tools, list) else ():
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind not in (None, "function", "custom"):
            raise SpecError(
                f"model.params.extra.tools: {kind} is a server tool, billed per use with its "
                "results read as input, which no worst case bounds; run.max_cost_usd cannot "
                "be held: leave out the tool or the budget"
            )
    # a paused answer sent back (model.pause_turn_continuations): each part is billed, its
    # input the request's and the parts so far (each at most `limit` tokens)
    parts = 1 + _count(request.identity.get("pause_turn_continuations"))
    total = 0.0
    for part in range(parts):
        probe = Response(
            text="",
            input_tokens=_input_bound(request) + part * (int(limit) + MESSAGE_OVERHEAD),
            output_tokens=int(limit),
            batch=batch,
        )
        cost = provider.price(request, probe)
        if cost is None:
            raise SpecError(
                f"model.price: no price is known for {provider.model.provider}:{request.model}, "
                "so run.max_cost_usd cannot be held; give model.price (USD per million tokens)"
            )
        total += cost
    return total


#: ``model.params.extra`` keys that, sent verbatim over the body, replace its bound on
#: each answer's length (Chat Completions, Responses, Messages)
_EXTRA_LENGTH_KEYS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def _count(value: Any) -> int:
    """``value`` as a positive count (a bool or anything else not a positive int: 0)."""
    return value if type(value) is int and value > 0 else 0


def _output_bound(request: Request) -> int:
    """Output tokens ``request`` can be billed for at most, 0 when nothing bounds them:
    ``max_tokens``, or the largest a ``params.extra`` length key sets (it replaces it in
    the body), times the completions ``extra.n`` asks for (each billed)."""
    extra = request.params.get("extra") or {}
    limit = max(
        [_count(request.params.get("max_tokens"))]
        + [_count(extra.get(k)) for k in _EXTRA_LENGTH_KEYS]
    )
    return limit * max(_count(extra.get("n")), 1)


def _default_max_tokens(provider: Provider) -> int | None:
    """The ``max_tokens`` the provider sends when the spec sets none (Anthropic's)."""
    value = provider.identity().get("default_max_tokens")
    return int(value) if isinstance(value, int) else None


@dataclass(eq=False, repr=False)
class Budget:
    """The run's ceiling and what is spent and reserved against it.

    Attributes:
        ceiling_usd: the most the run may spend, USD.
        spent_usd: USD paid so far by this run.
        reserved_usd: USD reserved for calls and batches in flight (their worst case).
        on_spend: called with the USD of each settled call that cost something (the run
            directory records it, so the ceiling holds across re-runs), or None.
    """

    ceiling_usd: float
    spent_usd: float = 0.0
    reserved_usd: float = 0.0
    on_spend: Callable[[float], None] | None = field(default=None, repr=False)
    #: why ``on_spend`` could not record a settled call (the disk full), or None
    unrecorded: OSError | None = field(default=None, repr=False)

    def reserve(self, usd: float, what: str = "the next call") -> float:
        """Reserve ``usd`` for a call about to start; return it (to :meth:`settle`).

        Raises:
            BudgetExhausted: it does not fit under the ceiling, or what was paid could not
                be recorded (the ceiling would not hold across re-runs).
        """
        if self.unrecorded is not None:
            raise BudgetExhausted(
                f"budget: {what} was not started: what the run paid cannot be recorded in "
                f"the run directory's spending.jsonl ({self.unrecorded.strerror}), so "
                "run.max_cost_usd could not hold across re-runs; every response paid for "
                "is kept: free the run directory's disk and run the same command again"
            )
        if self.spent_usd + self.reserved_usd + usd > self.ceiling_usd + 1e-12:
            raise BudgetExhausted(
                f"budget: {what} could cost up to ${usd:.6f}, and ${self.spent_usd:.6f} is "
                f"spent with ${self.reserved_usd:.6f} in flight, under a ceiling of "
                f"${self.ceiling_usd:.6f} (run.max_cost_usd); the run stopped starting calls: "
                "re-run with a larger --max-cost to finish it (nothing paid is requested again)"
            )
        self.reserved_usd += usd
        return usd

    def fits(self, usd: float) -> bool:
        """True when ``usd`` more could be reserved now."""
        return self.spent_usd + self.reserved_usd + usd <= self.ceiling_usd + 1e-12

    def settle(self, reserved: float, cost_usd: float | None) -> None:
        """A call that reserved ``reserved`` ended, costing ``cost_usd`` (None: nothing
        paid, e.g. an error). When ``on_spend`` cannot record it (an OSError: the disk
        full), the call's response still goes on to the cache, and no call starts after
        it (:meth:`reserve` refuses)."""
        self.reserved_usd = max(self.reserved_usd - reserved, 0.0)
        self.spent_usd += cost_usd or 0.0
        if cost_usd and self.on_spend is not None:
            try:
                self.on_spend(cost_usd)
            except OSError as exc:  # never lose the response paid for: stop starting calls
                self.unrecorded = exc

    def describe(self) -> dict[str, Any]:
        """For the manifest: ceiling, spent, in flight, USD."""
        return {
            "ceiling_usd": self.ceiling_usd,
            "spent_usd": round(self.spent_usd, 10),
            "reserved_usd": round(self.reserved_usd, 10),
        }


class BudgetedExecutor(Executor):
    """``inner``'s calls, each reserved against ``budget`` before it starts.

    Args:
        inner: the executor that makes the calls.
        budget: the run's one budget (judges' executors share it).
    """

    def __init__(self, inner: Executor, budget: Budget) -> None:
        self.inner = inner
        self.budget = budget
        self.provider = inner.provider
        self.concurrency = inner.concurrency

    def describe(self) -> dict[str, Any]:
        """The inner executor's description, with the budget."""
        return {**self.inner.describe(), "budget": self.budget.describe()}

    def start(self) -> None:
        """Start the inner executor."""
        self.inner.start()

    async def complete(
        self, request: Request, on_attempt: AttemptListener | None = None
    ) -> CallOutcome:
        """Reserve the request's worst case, call, settle with its cost: the response's,
        or on an error what it was billed for before it was refused on this side
        (``ProviderError.billed``: a served model other than the requested one under
        ``model.require_served_model``). (A failed attempt is not billed by either API;
        one the client timed out may be: the reservation covers one attempt.)

        Raises:
            BudgetExhausted: the call would not fit under the ceiling (not made).
        """
        worst = worst_case_usd(self.provider, request)
        reserved = self.budget.reserve(worst, f"a call to {request.model}")
        cost: float | None = None
        try:
            outcome = await self.inner.complete(request, on_attempt)
            paid = outcome.response if outcome.error is None else outcome.error.billed
            cost = paid.cost_usd if paid is not None else None
            return outcome
        finally:
            self.budget.settle(reserved, cost)

    def for_provider(self, provider: Provider) -> Executor:
        """A judge's executor, under the same budget."""
        return BudgetedExecutor(self.inner.for_provider(provider), self.budget)

    async def aclose(self) -> None:
        """Close the inner executor."""
        await self.inner.aclose()
