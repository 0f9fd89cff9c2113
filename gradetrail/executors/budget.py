"""A hard USD ceiling across a run (``run.max_cost_usd``, ``--max-cost``): model and judge
calls, online and in batches.

Before each paid call (or batch) its *worst case* is reserved: no call starts unless
spending so far, plus the worst case of everything in flight, plus its own, stays at or
under the ceiling. When a call ends its reservation is replaced by what it cost. So the
ceiling holds with any concurrency, whatever the responses turn out to be. An online call
that does not fit beside the calls in flight waits for them to land; the run stops only
when a call does not fit with none in flight.

Worst case of one request (a stated bound, no tokenizer needed): input tokens at most the
UTF-8 bytes of its messages, system prompt and tools plus :data:`MESSAGE_OVERHEAD` tokens
a message (a BPE token is at least one byte) and ``model.params.extra``'s own bytes (sent
in the body), output tokens at most its ``max_tokens`` (or the larger length a
``model.params.extra`` key sends in its place) times the completions ``extra.n`` asks for;
with ``model.pause_turn_continuations`` every part a paused answer may take is counted,
each part's input the request's and the parts before it. Priced by the provider's own
:meth:`~gradetrail.providers.base.Provider.price`, at the batch tier for a batch, and at
the dearest service tier that may serve it: the one ``model.params.extra.service_tier``
asks for (a priority request at priority rates), or, when it asks for none, any tier the
model has rates for (a project whose default tier is priority is billed at priority rates
without asking; ``service_tier: default`` holds it to the standard ones); and with its
every input token a one-hour prompt-cache write when ``extra`` sends a ``cache_control``
(Anthropic bills writes at up to twice the input rate). A
request without ``max_tokens`` (OpenAI sends none unless the spec sets one), a model
without a price, an ``extra`` length key or ``n`` that is not a whole number of at least
1, or a server tool in ``extra.tools`` (a fee per use, its results read as input) has no
worst case: a budgeted run refuses to start (never a silent "n/a"). A judge model is
checked the same way before the run's first call (:func:`check_bounded`).

A response billed and then refused on this side (``ProviderError.billed``: another served
model under ``model.require_served_model``) counts as paid, online and in batches
(:func:`billed_usd`). When what a call paid cannot be recorded (``on_spend`` raises an
OSError: the disk full), its response still goes on to the cache and no call starts after
it. An online call's reservation is recorded before it starts (``on_reserve``) and closed
when it ends with an outcome: one killed, cancelled or crashed in flight may have been
billed, so later runs count it at its worst case. So is an attempt cut off by its timeout,
or lost with the Ray worker that held it (the server may finish it and bill it, and never
says): it stays counted at its worst case,
in this run and in later ones, and the attempt that retries it reserves its own worst case
first (when that does not fit, the call stops there: the run stops starting calls).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gradetrail.errors import ProviderTimeout, RunError, SpecError
from gradetrail.executors.base import Executor
from gradetrail.executors.retry import AttemptListener, CallOutcome, RetriedAttempt
from gradetrail.providers.base import Provider, Request, Response

__all__ = [
    "Budget",
    "BudgetExhausted",
    "BudgetedExecutor",
    "Reservation",
    "billed_usd",
    "check_bounded",
    "worst_case_usd",
]

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
        SpecError: no ``max_tokens`` to bound the output, an ``extra`` length key or ``n``
            that is not a whole number of at least 1, a server tool in ``extra.tools``, or
            no price for the model.
    """
    if not provider.billed:  # replay: nothing is called, nothing is paid
        return 0.0
    output = _output_bound(provider, request)
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
    # input the request's and the parts so far (each at most `output` tokens)
    parts = 1 + (getattr(provider.model, "pause_turn_continuations", 0) or 0)
    # the dearest tier that may serve it: the one asked for (extra.service_tier: priority),
    # or, asking none, one the project may default to (priority)
    tiers = {None} if batch else set(provider.servable_tiers(request))  # batch: its own
    # a body that asks for prompt caching (a cache_control its extra sends) may have every
    # input token billed as a cache write, at up to the one-hour TTL's rate
    writes = (0, 1, 2) if _asks_caching(request) else (0,)
    total = 0.0
    for part in range(parts):
        tokens = _input_bound(request) + part * (output + MESSAGE_OVERHEAD)
        costs = {
            (served, write): provider.price(
                request,
                Response(
                    text="",
                    input_tokens=tokens,
                    output_tokens=output,
                    batch=batch,
                    service_tier=served,
                    cache_write_tokens=tokens if write else 0,
                    cache_write_1h_tokens=tokens if write == 2 else 0,
                ),
            )
            for served in sorted(tiers, key=str)
            for write in writes
        }
        if None in costs.values():
            raise SpecError(_unpriced(provider, request, costs.get((None, 0)) is None))
        total += max(c for c in costs.values() if c is not None)
    return total


def _unpriced(provider: Provider, request: Request, standard: bool) -> str:
    """Why ``request`` has no worst case: no price at all (``standard``), or none for a
    service tier that may serve it at this prompt size (OpenAI's priority rates stop at
    128K prompt tokens)."""
    where = f"{provider.model.provider}:{request.model}"
    if standard:
        return (
            f"model.price: no price is known for {where}, so run.max_cost_usd cannot be "
            "held; give model.price (USD per million tokens)"
        )
    return (
        f"run.max_cost_usd: {where} may be served on a service tier (a project may default "
        "to priority) whose price for a prompt this long is unknown, so the ceiling cannot "
        "be held; set model.params.extra.service_tier: default to be billed at standard "
        "rates, or give model.price"
    )


def _asks_caching(request: Request) -> bool:
    """True when what ``model.params.extra`` sends in the body asks for prompt caching
    (a ``cache_control`` at any depth: Anthropic's automatic caching, or a block's)."""

    def found(value: Any) -> bool:
        if isinstance(value, dict):
            return "cache_control" in value or any(found(v) for v in value.values())
        if isinstance(value, list):
            return any(found(v) for v in value)
        return False

    return found(request.params.get("extra") or {})


#: ``model.params.extra`` keys that, sent verbatim over the body, replace its bound on
#: each answer's length (Chat Completions, Responses, Messages)
_EXTRA_LENGTH_KEYS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def _output_bound(provider: Provider, request: Request) -> int:
    """Output tokens one part of ``request``'s answer can be billed for at most:
    ``max_tokens`` (the provider's default when the spec sets none), or the largest a
    ``params.extra`` length key sets (it replaces it in the body), times the completions
    ``extra.n`` asks for (each billed).

    Raises:
        SpecError: nothing bounds the output, or an ``extra`` count is not a whole number.
    """
    extra = request.params.get("extra") or {}
    limits = [_whole(extra, key) for key in _EXTRA_LENGTH_KEYS if key in extra]
    own = request.params.get("max_tokens") or _default_max_tokens(provider) or 0
    limit = max([int(own), *limits])
    if not limit:
        raise SpecError(
            f"model.params.max_tokens: a budgeted run needs a bound on each response's length "
            f"for {request.model}; set it (run.max_cost_usd is set)"
        )
    return limit * (_whole(extra, "n") if "n" in extra else 1)


def _whole(extra: dict[str, Any], key: str) -> int:
    """``extra[key]``, a count that bounds a response (a length limit, ``n`` answers).

    Raises:
        SpecError: it is not a whole number of at least 1.
    """
    value = extra[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(
            f"model.params.extra.{key}: a budgeted run needs a whole number here to bound each "
            f"response, got {value!r}; fix it or drop run.max_cost_usd"
        )
    return value


def check_bounded(provider: Provider) -> None:
    """Whether ``provider``'s calls (a judge's, with its model's params) have a worst case.

    Raises:
        SpecError: as :func:`worst_case_usd`: no price, no ``max_tokens``, ...
    """
    probe = Request(
        provider=provider.model.provider,
        model=provider.model.name,
        base_url=provider.model.base_url,
        system=None,
        messages=(),
        params=provider.model.params.model_dump(exclude_none=True),
    )
    worst_case_usd(provider, probe)


def _default_max_tokens(provider: Provider) -> int | None:
    """The ``max_tokens`` the provider sends when the spec sets none (Anthropic's)."""
    value = provider.identity().get("default_max_tokens")
    return int(value) if isinstance(value, int) else None


@dataclass(frozen=True)
class Reservation:
    """An online call's reservation (:meth:`Budget.reserve_when_fits`): its worst case,
    USD, and its id in the run's spending record (None without one)."""

    usd: float
    call: str | None = None


@dataclass(eq=False, repr=False)
class Budget:
    """The run's ceiling and what is spent and reserved against it.

    Attributes:
        ceiling_usd: the most the run may spend, USD.
        spent_usd: USD paid so far by this run.
        reserved_usd: USD reserved for calls and batches in flight (their worst case).
        unsettled_usd: USD of attempts cut off by their timeout, at their worst case
            (:meth:`keep_unsettled`).
        on_spend: called with the USD of each settled call that cost something, and the
            call's id from ``on_reserve`` (None for a batch); an online call that ended
            costing nothing is passed too (0 USD) when it has an id, to close it (the run
            directory records them, so the ceiling holds across re-runs), or None.
        on_reserve: called with an online call's worst case, USD, before it starts; returns
            the call's id in the record (so a call in flight when its process is killed
            counts at its worst case on a re-run), or None.
    """

    ceiling_usd: float
    spent_usd: float = 0.0
    reserved_usd: float = 0.0
    #: USD of attempts cut off by their timeout (:meth:`keep_unsettled`): they may be
    #: billed and will never say, so they count at their worst case for the whole run
    unsettled_usd: float = 0.0
    on_spend: Callable[[float, str | None], None] | None = field(default=None, repr=False)
    on_reserve: Callable[[float], str] | None = field(default=None, repr=False)
    #: why ``on_spend`` could not record a settled call (the disk full), or None
    unrecorded: OSError | None = field(default=None, repr=False)
    #: online calls reserved and not yet settled (:meth:`reserve_when_fits`)
    calls_in_flight: int = field(default=0, repr=False)
    _settled: asyncio.Event | None = field(default=None, init=False, repr=False)

    def _cannot_record(self, what: str) -> BudgetExhausted:
        """The refusal of ``what`` once what the run pays cannot be recorded."""
        reason = self.unrecorded.strerror if self.unrecorded is not None else "unknown"
        return BudgetExhausted(
            f"budget: {what} was not started: what the run paid cannot be recorded in "
            f"the run directory's spending.jsonl ({reason}), so "
            "run.max_cost_usd could not hold across re-runs; every response paid for "
            "is kept: free the run directory's disk and run the same command again"
        )

    def reserve(self, usd: float, what: str = "the next call") -> float:
        """Reserve ``usd`` for a call about to start; return it (to :meth:`settle`).

        Raises:
            BudgetExhausted: it does not fit under the ceiling, or what was paid could not
                be recorded (the ceiling would not hold across re-runs).
        """
        if self.unrecorded is not None:
            raise self._cannot_record(what)
        if not self.fits(usd):
            unsettled = (
                f" (${self.unsettled_usd:.6f} of it cut off by timeouts, billed or not)"
                if self.unsettled_usd
                else ""
            )
            raise BudgetExhausted(
                f"budget: {what} could cost up to ${usd:.6f}, and "
                f"${self.spent_usd + self.unsettled_usd:.6f} is spent{unsettled} with "
                f"${self.reserved_usd:.6f} in flight, under a ceiling of "
                f"${self.ceiling_usd:.6f} (run.max_cost_usd); the run stopped starting calls: "
                "re-run with a larger --max-cost to finish it (nothing paid is requested again)"
            )
        self.reserved_usd += usd
        return usd

    async def reserve_when_fits(self, usd: float, what: str = "the next call") -> Reservation:
        """:meth:`reserve` for an online call: while it does not fit but calls are in
        flight (each reserved its worst case and most cost far less), wait for them to
        settle; stop only when it does not fit with none in flight (or at once when what
        was paid could not be recorded). The reservation is recorded (``on_reserve``)
        before the call starts.

        Raises:
            BudgetExhausted: it does not fit, and no call in flight can free room; or what
                was paid (or this reservation) could not be recorded.
        """
        while self.unrecorded is None and not self.fits(usd) and self.calls_in_flight > 0:
            if self._settled is None:
                self._settled = asyncio.Event()
            await self._settled.wait()
        reservation = self.reserve_now(usd, what)
        self.calls_in_flight += 1
        return reservation

    def fits(self, usd: float) -> bool:
        """True when ``usd`` more could be reserved now."""
        spent = self.spent_usd + self.unsettled_usd
        return spent + self.reserved_usd + usd <= self.ceiling_usd + 1e-12

    def reserve_now(self, usd: float, what: str = "the next call") -> Reservation:
        """:meth:`reserve`, recorded (``on_reserve``) before the call starts, without
        waiting: for a retry inside a call that is already in flight (it cannot wait for
        itself to land), and by :meth:`reserve_when_fits` once it has waited.

        Raises:
            BudgetExhausted: it does not fit now, or it could not be recorded.
        """
        reserved = self.reserve(usd, what)
        call = None
        if self.on_reserve is not None:
            try:
                call = self.on_reserve(reserved)
            except OSError as exc:  # not started: nothing is paid that goes unrecorded
                self.reserved_usd = max(self.reserved_usd - reserved, 0.0)
                self.unrecorded = exc
                raise self._cannot_record(what) from None
        return Reservation(reserved, call)

    def count_unsettled(self, usd: float) -> None:
        """An attempt cut off by its timeout that no reservation covered (an executor
        that retries elsewhere reports its attempts at the end): ``usd``, its worst case,
        is recorded as an open reservation and counted as :meth:`keep_unsettled` counts
        one. It already happened, so it is counted even past the ceiling."""
        if self.on_reserve is not None and self.unrecorded is None:
            try:
                self.on_reserve(usd)
            except OSError as exc:
                self.unrecorded = exc
        self.unsettled_usd += usd

    def keep_unsettled(self, reservation: Reservation) -> None:
        """An attempt under ``reservation`` was cut off by its timeout: the server may
        still finish it and bill it, and will never say. It counts at its worst case
        (``unsettled_usd``) for the rest of the run, and its record stays open, so later
        runs count it too (as a call killed in flight)."""
        self.reserved_usd = max(self.reserved_usd - reservation.usd, 0.0)
        self.unsettled_usd += reservation.usd

    def settle(self, reserved: float, cost_usd: float | None, call: str | None = None) -> None:
        """A call that reserved ``reserved`` ended, costing ``cost_usd`` (None: nothing
        paid, e.g. an error); ``call``: its id in the record, which the settling closes.
        When ``on_spend`` cannot record it (an OSError: the disk full), the call's
        response still goes on to the cache, and no call starts after it (:meth:`reserve`
        refuses). Calls waiting for room are woken either way."""
        self.reserved_usd = max(self.reserved_usd - reserved, 0.0)
        self.spent_usd += cost_usd or 0.0
        if (cost_usd or call is not None) and self.on_spend is not None:
            try:
                self.on_spend(cost_usd or 0.0, call)
            except OSError as exc:  # never lose the response paid for: stop starting calls
                self.unrecorded = exc
        if self._settled is not None:  # wake the calls waiting for room
            self._settled.set()
            self._settled = None

    def describe(self) -> dict[str, Any]:
        """For the manifest: ceiling, spent, in flight, USD."""
        return {
            "ceiling_usd": self.ceiling_usd,
            "spent_usd": round(self.spent_usd, 10),
            "reserved_usd": round(self.reserved_usd, 10),
            "unsettled_usd": round(self.unsettled_usd, 10),
        }


def billed_usd(error: BaseException | None) -> float | None:
    """USD ``error`` was billed for before it was refused on this side
    (:attr:`~gradetrail.errors.ProviderError.billed`: an answer from another model under
    ``model.require_served_model``), or None when nothing was billed. Online calls
    (:func:`_paid`) and collected batches both settle with it."""
    billed = getattr(error, "billed", None)
    return billed.cost_usd if billed is not None else None


def _paid(outcome: CallOutcome, reserved: float) -> float | None:
    """USD ``outcome`` paid: its response's cost, and what attempts that were billed and
    then refused cost (:func:`billed_usd`), the retried ones included; None when none
    of them says. A response whose cost is unknown (a priority answer past the prompt
    size its rates are published for) or that counted no tokens at all (the server sent
    no usage: its tokens, and so its cost, read as 0) was billed all the same: it counts
    at ``reserved``, its worst case, never as free."""
    response = outcome.response
    costs: list[float | None] = []
    if response is not None:
        unread = response.total_input_tokens + response.output_tokens == 0
        costs.append(reserved if response.cost_usd is None or unread else response.cost_usd)
    costs += [billed_usd(error) for error in [a.error for a in outcome.retried] + [outcome.error]]
    known = [c for c in costs if c is not None]
    return sum(known) if known else None


def _cut_off(outcome: CallOutcome) -> int:
    """How many of ``outcome``'s attempts were cut off by their timeout (or lost with their
    Ray worker): the retried ones that were, and the last one when its error is one (an
    outcome of more attempts than retried ones ended on an attempt; the per-sample
    ceiling's own timeout reached after another error counts too: a bound, never less)."""
    cut = sum(_cut_off_one(a.error) for a in outcome.retried)
    last = outcome.attempts > len(outcome.retried)
    return cut + (last and _cut_off_one(outcome.error))


def _cut_off_one(error: BaseException | None) -> bool:
    """Whether an attempt that failed with ``error`` may have been billed without a
    word: cut off by its timeout, or lost with the Ray worker that held it
    (:attr:`~gradetrail.errors.ProviderError.maybe_billed`)."""
    return isinstance(error, ProviderTimeout) or bool(getattr(error, "maybe_billed", False))


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
        """Reserve the request's worst case (waiting for calls in flight to land while it
        does not fit beside theirs), call, settle with its cost: the response's, and what
        attempts were billed for before they were refused on this side (:func:`_paid`:
        a served model other than the requested one under ``model.require_served_model``).
        A failed attempt is not billed by either API, but one cut off by its timeout (or
        lost with the Ray worker that held it) may be: its reservation stays counted
        (:meth:`Budget.keep_unsettled`), and the attempt that retries it reserves its own
        worst case first. An executor that retries elsewhere reports its attempts at the
        end: those cut off are counted then.

        Raises:
            BudgetExhausted: the call would not fit under the ceiling (not made), or a
                retry after a timeout would not (not made: the call stops there).
        """
        budget = self.budget
        worst = worst_case_usd(self.provider, request)
        what = f"a call to {request.model}"
        current = [await budget.reserve_when_fits(worst, what)]
        heard = False  # the retry loop ran here and told each failed attempt as it ended

        def attempt_ended(number: int, attempt: RetriedAttempt) -> None:
            nonlocal heard
            heard = True
            if on_attempt is not None:
                on_attempt(number, attempt)
            if not _cut_off_one(attempt.error) or not current:
                return
            budget.keep_unsettled(current.pop())
            if attempt.backoff_s is not None:  # retried: its own worst case, or no retry
                current.append(budget.reserve_now(worst, f"a retry of {what}"))

        cost: float | None = None
        ended = False
        try:
            outcome = await self.inner.complete(request, attempt_ended)
            cost, ended = _paid(outcome, worst), True
            if not heard:  # retried elsewhere (Ray): its cut-off attempts counted now
                for _ in range(_cut_off(outcome)):
                    budget.count_unsettled(worst)
            return outcome
        finally:  # without an outcome (cancelled, a crash) the record keeps the worst case
            budget.calls_in_flight = max(budget.calls_in_flight - 1, 0)
            if current:
                budget.settle(current[0].usd, cost, current[0].call if ended else None)
            elif cost:  # every reservation kept: what the outcome says it paid, besides
                budget.settle(0.0, cost, None)

    def for_provider(self, provider: Provider) -> Executor:
        """A judge's executor, under the same budget (asked for before the run's first
        call).

        Raises:
            SpecError: ``provider``'s calls have no worst case (no price, no
                ``max_tokens``): the ceiling could not hold them.
        """
        check_bounded(provider)
        return BudgetedExecutor(self.inner.for_provider(provider), self.budget)

    async def aclose(self) -> None:
        """Close the inner executor."""
        await self.inner.aclose()
