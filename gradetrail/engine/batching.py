"""The batch driver of ``gradetrail run --batch``: send what the cache lacks through the
provider's batch API (half price), wait, collect, and leave the scoring pass nothing to
pay for.

One pass, resumable at every step (the ledger is :mod:`gradetrail.rundir.batches`):

1. **Resume.** A submission the ledger saw sent but never acknowledged (a ``kill -9``
   between the request and its answer) is looked up at the API (``find``): adopted when
   it exists, else marked lost (never created: its requests are sent again).
2. **Send.** Requests that are neither cached nor in an open batch are cut into batches
   (the API's request and byte limits, or smaller ones given) and each is written to the
   ledger *before* it is sent, then its batch id once acknowledged.
3. **Wait.** Open batches are polled on the injected clock, the interval doubling from
   ``first_poll_s`` to ``max_poll_s``, for at most ``max_wait_s`` in all; ``--detach``
   returns at once, and a stop (Ctrl-C) between polls leaves the batches running.
4. **Collect.** An ended batch's results are validated by the provider's own parser;
   successes are cached at once at the batch price; failures go through the run's one
   retry policy: a transient one (expired, cancelled, 429, 5xx) is sent again in a new
   batch while attempts remain (or left to the online executor with
   ``fallback="online"``), a permanent one is the request's final error.

Control calls (upload, create, poll, results) are retried by the same policy.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from gradetrail.errors import ProviderError, RunError, ServerError, UsageError
from gradetrail.executors.budget import Budget, BudgetExhausted, billed_usd, worst_case_usd
from gradetrail.executors.retry import Drained, RetryPolicy, call_with_retry
from gradetrail.rundir.batches import BatchLedger, Submission

if TYPE_CHECKING:
    from gradetrail.cache.store import ResponseCache
    from gradetrail.providers._batch import BatchAPI
    from gradetrail.providers.base import Request
    from gradetrail.rundir.runlog import RunLog

__all__ = ["BatchOptions", "BatchReport", "check_batch_executor", "run_batches"]

#: times an ended batch's results are read when some lines are not JSON (a torn transfer)
_READS = 3


def check_batch_executor(on_ray: bool) -> None:
    """Refuse a batched run on Ray, for ``gradetrail run --batch --executor ray`` and
    ``run_eval(batch=..., executor=RayOptions())`` alike: a batch run sends its requests
    from this process through the provider's batch API, so no call would run on the
    workers (and starting a cluster for none costs seconds).

    Raises:
        UsageError: ``on_ray``.
    """
    if on_ray:
        raise UsageError(
            "--batch sends the requests from this process through the provider's batch "
            "API, so no call would run on Ray workers: drop --executor ray (or --batch)"
        )


@dataclass(frozen=True)
class BatchOptions:
    """How a batched run sends and waits.

    Attributes:
        fallback: ``batch`` (failed requests go in a new batch while retries remain) or
            ``online`` (they go to the online executor at the online price).
        detach: send, record, and return without waiting.
        first_poll_s: seconds before the second poll; doubles each poll.
        max_poll_s: the longest wait between polls, seconds.
        max_wait_s: seconds to wait for the batches in all before leaving them running.
        max_requests: requests a batch at most (None: the API's limit).
        max_bytes: bytes a batch at most (None: the API's limit).
        sleep, clock: injected for tests (defaults: asyncio.sleep, time.time).
    """

    fallback: Literal["batch", "online"] = "batch"
    detach: bool = False
    first_poll_s: float = 15.0
    max_poll_s: float = 300.0
    max_wait_s: float = 26 * 3600.0
    max_requests: int | None = None
    max_bytes: int | None = None
    sleep: Callable[[float], Awaitable[None]] = field(default=asyncio.sleep, repr=False)
    clock: Callable[[], float] = field(default=time.time, repr=False)


@dataclass
class BatchReport:
    """What the batch pass did.

    Attributes:
        sent: requests sent in batches by this process.
        collected: responses collected and cached by this process.
        cost_usd: USD of those responses at the batch price (None when a price is unknown).
        failed: cache key -> (last error, batch attempts) of requests every attempt failed.
        online: cache keys left to the online executor (``fallback="online"``).
        waiting: batch ids still running when the pass returned (detached, stopped, or
            past ``max_wait_s``): re-run the same command to collect them.
        batch_ids: every batch id the run directory knows.
        cancelled: batch ids that ended cancelled.
        protocol: the batch API's name.
        over_budget: why requests were left unsent (the budget), or None.
        paid: cache keys whose responses this process collected (paid for by this run:
            their rows are not cache hits).
    """

    sent: int = 0
    collected: int = 0
    cost_usd: float | None = 0.0
    failed: dict[str, tuple[ProviderError, int]] = field(default_factory=dict)
    online: set[str] = field(default_factory=set)
    waiting: list[str] = field(default_factory=list)
    batch_ids: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    protocol: str = ""
    over_budget: BudgetExhausted | None = None
    paid: set[str] = field(default_factory=set)
    judges: list[BatchReport] = field(default_factory=list)

    def add_judges(self, judges: BatchReport) -> None:
        """Count a judge model's batches in (they wait as the answers' do)."""
        self.judges.append(judges)
        self.waiting += judges.waiting
        if judges.over_budget is not None and self.over_budget is None:
            self.over_budget = judges.over_budget

    def describe(self) -> dict[str, Any]:
        """The manifest's record of the batches (execution only: not in the identity);
        a judge model's batches under ``judges``."""
        judges = {"judges": [j.describe() for j in self.judges]} if self.judges else {}
        return {
            **judges,
            "protocol": self.protocol,
            "price_tier": "batch",
            "batch_ids": self.batch_ids,
            "sent": self.sent,
            "collected": self.collected,
            "cost_usd": None if self.cost_usd is None else round(self.cost_usd, 10),
            "failed": len(self.failed),
            "online": len(self.online),
            "waiting": self.waiting,
            "cancelled": self.cancelled,
        }


async def run_batches(
    requests: Mapping[str, Request],
    *,
    api: BatchAPI,
    ledger: BatchLedger,
    cache: ResponseCache,
    policy: RetryPolicy,
    options: BatchOptions,
    budget: Budget | None = None,
    log: RunLog | None = None,
    kind: str = "provider",
    stopping: Callable[[], bool] = lambda: False,
) -> BatchReport:
    """Send the requests the cache lacks in batches, wait, collect (see the module
    docstring).

    Args:
        requests: cache key -> request, every request of the pass (cached ones too).
        api: the provider's batch API client.
        ledger: the run directory's ledger.
        cache: the run's cache (successes go in at once).
        policy: the run's retry policy (control calls and failed requests).
        options: how to send and wait.
        budget: the run's budget: each batch's worst case (at the batch price) is reserved
            before it is sent, and only the requests that fit are sent (batches resumed
            from an earlier process are reserved first).
        log: the run's log.
        kind: ``provider`` or ``judge``.
        stopping: True once the run should start nothing new (Ctrl-C).

    Raises:
        RunError: a batch could not be sent and the API's answer does not say whether it
            was created (the re-run asks the API first), or the ledger is damaged.
    """
    batch = _Pass(requests, api, ledger, cache, policy, options, log, kind, stopping)
    batch.budget = budget
    return await batch.run()


class _Pass:
    def __init__(
        self,
        requests: Mapping[str, Request],
        api: BatchAPI,
        ledger: BatchLedger,
        cache: ResponseCache,
        policy: RetryPolicy,
        options: BatchOptions,
        log: RunLog | None,
        kind: str,
        stopping: Callable[[], bool],
    ) -> None:
        self.requests, self.api, self.ledger, self.cache = requests, api, ledger, cache
        self.policy, self.options, self.log, self.kind = policy, options, log, kind
        self.stopping = stopping
        self.report = BatchReport(protocol=api.protocol)
        self.attempts: dict[str, int] = {}
        self.budget: Budget | None = None
        #: submission -> USD reserved for it (its worst case at the batch price)
        self.reserved: dict[str, float] = {}
        self.over_budget: BudgetExhausted | None = None

    def _all(self) -> list[Submission]:
        """The ledger's submissions of this pass: its API and kind, holding its requests
        (a run's answers and each judge model's have passes of their own, possibly through
        one API: custom_ids are cache keys, which name the model, so a submission holds
        one pass's requests only; another's is never polled or collected here)."""
        protocol, kind, mine = self.api.protocol, self.kind, self.requests
        return [
            s
            for s in self.ledger.submissions.values()
            if s.protocol == protocol and s.kind == kind and any(k in mine for k in s.custom_ids)
        ]

    def _open(self) -> list[Submission]:
        """This pass's submissions still to be collected, in the order sent."""
        return [s for s in self._all() if s.open]

    def _event(self, name: str, **fields: Any) -> None:
        if self.log is not None:
            self.log.event(name, **fields)

    async def _control(self, call: Callable[[], Awaitable[Any]]) -> Any:
        """One control call under the retry policy; raises its last error."""
        outcome = await call_with_retry(
            call,  # type: ignore[arg-type]
            self.policy,
            sleep=self.options.sleep,
            clock=self.options.clock,
            rand=random.random,
        )
        if outcome.error is not None:
            raise outcome.error
        return outcome.response

    async def run(self) -> BatchReport:
        report = self.report
        await self._resolve()
        unread = 0  # rounds an ended batch's results could not be read
        if self.budget is not None:  # what earlier processes sent is in flight: reserve it
            for sub in self._open():
                worst = sum(self._worst(k) for k in sub.custom_ids if k in self.requests)
                self.reserved[sub.submission] = worst
                self.budget.reserved_usd += worst
        while True:
            todo = self._todo()
            if todo and not self.stopping():
                await self._send(todo)
            if self.options.detach:
                break
            if not await self._wait():
                break
            retry, hold = await self._collect_ended()
            if hold is not None and not self.stopping() and unread < self.policy.max_retries:
                unread += 1  # results that could not be read yet: wait, read them again
                await self._pause(max(hold, self.options.first_poll_s * 2**unread))
                continue
            if not retry or self.stopping():
                break
        report.waiting = [s.batch_id for s in self._open() if s.batch_id is not None]
        report.batch_ids = [s.batch_id for s in self._all() if s.batch_id]
        report.over_budget = self.over_budget
        return report

    def _worst(self, key: str) -> float:
        return worst_case_usd(self.api.provider, self.requests[key], batch=True)

    # -- 1. resume -----------------------------------------------------------------------

    async def _resolve(self) -> None:
        """Find (or mark lost) each submission sent but never acknowledged."""
        for sub in self._open():
            if sub.state != "intent":
                continue
            taken = set(self.ledger.batch_ids())
            find = partial(self.api.find, sub.submission, len(sub.custom_ids), sub.sent_at, taken)
            found = await self._control(find)
            if found is None:
                self.ledger.lost(sub.submission)
                self._event("batch_lost", submission=sub.submission, requests=len(sub.custom_ids))
            else:
                self.ledger.submitted(sub.submission, found)
                self._event("batch_found", submission=sub.submission, batch_id=found)

    # -- 2. send -------------------------------------------------------------------------

    def _todo(self) -> list[str]:
        """Keys neither cached, nor in an open batch, nor finished with an error."""
        flying = {c for sub in self._open() for c in sub.custom_ids}
        report = self.report
        keys = [
            k
            for k in self.requests
            if k not in flying and k not in report.failed and k not in report.online
        ]
        if not keys:
            return []
        cached = self.cache.get_many(keys)
        return [k for k in keys if k not in cached]

    def _chunks(self, keys: list[str]) -> list[list[tuple[str, dict[str, Any]]]]:
        api, options = self.api, self.options
        most = min(options.max_requests or api.max_requests, api.max_requests)
        most_bytes = min(options.max_bytes or api.max_bytes, api.max_bytes)
        chunks: list[list[tuple[str, dict[str, Any]]]] = []
        chunk: list[tuple[str, dict[str, Any]]] = []
        size = 0
        for key in keys:
            entry = api.entry(key, self.requests[key])
            bytes_ = api.size(entry)
            if bytes_ > most_bytes:
                self.report.failed[key] = (
                    ProviderError(
                        f"the request takes {bytes_:,} bytes, over the batch limit of "
                        f"{most_bytes:,}; run it without --batch"
                    ),
                    0,
                )
                continue
            if chunk and (len(chunk) >= most or size + bytes_ > most_bytes):
                chunks.append(chunk)
                chunk, size = [], 0
            chunk.append((key, entry))
            size += bytes_
        if chunk:
            chunks.append(chunk)
        return chunks

    def _affordable(
        self, chunk: list[tuple[str, dict[str, Any]]]
    ) -> tuple[list[tuple[str, dict[str, Any]]], float]:
        """The part of ``chunk`` whose worst case fits under the budget, and that worst
        case (USD); all of it without a budget."""
        if self.budget is None:
            return chunk, 0.0
        kept: list[tuple[str, dict[str, Any]]] = []
        total = 0.0
        for key, entry in chunk:
            worst = self._worst(key)
            if not self.budget.fits(total + worst):
                try:
                    self.budget.reserve(total + worst, f"a batch of {len(kept) + 1} requests")
                except BudgetExhausted as exc:
                    self.over_budget = exc
                break
            kept.append((key, entry))
            total += worst
        return kept, total

    async def _send(self, keys: list[str]) -> None:
        for whole in self._chunks(keys):
            if self.stopping() or self.over_budget is not None:
                return
            chunk, worst = self._affordable(whole)
            if not chunk:
                return
            name = uuid.uuid4().hex
            if self.budget is not None:
                self.reserved[name] = self.budget.reserve(worst, "a batch")
            custom_ids = [key for key, _ in chunk]
            entries = [entry for _, entry in chunk]
            self.ledger.intent(
                name,
                self.api.protocol,
                self.kind,
                custom_ids,
                self.options.clock(),
                worst if self.budget is not None else None,
            )
            try:
                batch_id = await self._control(partial(self.api.submit, entries, name))
            except ProviderError as exc:
                if exc.status is not None and not exc.transient:  # refused: never created
                    self._settle(name, 0.0)
                    self.ledger.lost(name)
                    for key in custom_ids:
                        self.report.failed[key] = (exc, self.attempts.get(key, 0) + 1)
                    self._event("batch_refused", submission=name, message=str(exc))
                    continue
                raise RunError(
                    f"a batch of {len(custom_ids)} requests could not be sent ({exc}); it may "
                    "or may not have reached the API: re-run the same command, which asks the "
                    "API first and never sends it twice"
                ) from None
            self.ledger.submitted(name, batch_id)
            for key in custom_ids:
                self.attempts[key] = self.attempts.get(key, 0) + 1
            self.report.sent += len(custom_ids)
            self._event(
                "batch_submitted",
                submission=name,
                batch_id=batch_id,
                requests=len(custom_ids),
                kind=self.kind,
            )

    def _settle(self, name: str, cost_usd: float) -> None:
        """Replace submission ``name``'s reservation with what it cost, recorded under
        its id (``batch:NAME``: a batch collected again, after a kill between this record
        and the ledger's, counts once in the run's spending)."""
        if self.budget is not None:
            self.budget.settle(self.reserved.pop(name, 0.0), cost_usd, f"batch:{name}")

    # -- 3. wait -------------------------------------------------------------------------

    async def _wait(self) -> bool:
        """Poll until every open batch has ended (True), or stop waiting (False)."""
        interval, waited = self.options.first_poll_s, 0.0
        while True:
            hold = 0.0  # what a throttled poll asked to wait (Retry-After), seconds
            for sub in self._open():
                if sub.state == "submitted":
                    try:
                        await self._poll(sub)
                    except Drained:  # a first Ctrl-C during a poll's backoff: stop waiting
                        return False
                    except ProviderError as exc:
                        hold = max(hold, self._poll_failed(sub, exc))
            if all(s.state != "submitted" for s in self._open()):
                return True
            if self.stopping() or waited >= self.options.max_wait_s:
                return False
            delay = min(max(interval, hold), self.options.max_wait_s - waited)
            await self._pause(delay)
            waited += delay
            interval = min(interval * 2, self.options.max_poll_s)

    async def _pause(self, delay: float) -> None:
        """Sleep ``delay`` seconds on the injected clock, ended early by a stop (Ctrl-C
        is seen within a fifth of a second, whatever the poll interval)."""
        sleeper = asyncio.ensure_future(self.options.sleep(delay))
        try:
            while not sleeper.done():
                if self.stopping():
                    return
                await asyncio.wait({sleeper}, timeout=0.2)
        finally:
            sleeper.cancel()

    def _poll_failed(self, sub: Submission, exc: ProviderError) -> float:
        """A poll that failed past the retry policy: a transient failure (throttled, the
        API down) is waited out, the batch polled again at the next interval (seconds to
        wait at least: its Retry-After); a permanent one (the key refused, the batch not
        found) ends the run, one line, the batch left running and recorded.

        Raises:
            RunError: the failure is permanent.
        """
        if exc.transient:
            self._event("batch_poll_failed", batch_id=sub.batch_id, message=str(exc))
            return exc.retry_after or 0.0
        raise RunError(
            f"polling batch {sub.batch_id} ({sub.protocol}) was refused: {exc}; it stays "
            "recorded in batches.jsonl: with the key that sent it, re-run the same command "
            "to collect it"
        ) from None

    async def _poll(self, sub: Submission) -> None:
        assert sub.batch_id is not None
        state = await self._control(lambda: self.api.retrieve(sub.batch_id))
        self._event(
            "batch_poll", batch_id=sub.batch_id, status=state.raw_status, counts=state.counts
        )
        if state.done:
            self.ledger.ended(sub.submission, state.status, state.counts)
            if state.status == "cancelled":
                self.report.cancelled.append(sub.batch_id)

    # -- 4. collect ----------------------------------------------------------------------

    async def _collect_ended(self) -> tuple[bool, float | None]:
        """Collect every ended batch: whether some request is to be sent again, and, when
        some batch's results could not be read for a reason that passes (the download
        failing past the retry policy), the seconds it asked to wait (else None); such a
        batch stays ended, to be read again (by this pass, or a re-run).

        Raises:
            RunError: the API refused to give a batch's results (permanent), one line.
        """
        again, hold = False, None
        for sub in self._open():
            if sub.state != "ended":
                continue
            try:
                again |= await self._collect(sub)
            except Drained:
                return again, None
            except ProviderError as exc:
                if not exc.transient:
                    run_dir = self.ledger.path.parent
                    raise RunError(
                        f"reading the results of batch {sub.batch_id} ({sub.protocol}) was "
                        f"refused: {exc}; it stays recorded in batches.jsonl: with the key "
                        "that sent it, re-run the same command to collect it; if its "
                        "results are gone (expired at the API), `gradetrail batches "
                        f"{run_dir} --abandon {sub.batch_id}` gives it up and the next run "
                        "sends its requests again"
                    ) from None
                self._event("batch_results_failed", batch_id=sub.batch_id, message=str(exc))
                hold = max(hold or 0.0, exc.retry_after or 0.0)
        return again, hold

    async def _read(
        self,
        sub: Submission,
        mine: dict[str, Request],
        order: list[str],
        seen: _Collected,
    ) -> None:
        """Read the batch's results once, each as its line arrives: a response is cached
        the moment it is read (never all held), an error kept unless a success for its
        custom_id comes (see :class:`_Collected`)."""
        assert sub.batch_id is not None
        async for result in self.api.results(sub.batch_id, mine, order):
            key = result.custom_id
            if key in seen.ok:
                continue  # cached and paid already (a repeated line, or a re-read)
            if result.response is not None:
                self.cache.put(key, mine[key], result.response)
                seen.ok.add(key)
                seen.failures.pop(key, None)
                seen.billed.pop(key, None)
                self.report.paid.add(key)
                seen.succeeded += 1
                cost = result.response.cost_usd
                seen.paid += cost or 0.0
                seen.priced = seen.priced and cost is not None
            elif seen.failures.get(key) is None:
                seen.failures[key] = result.error
                billed = billed_usd(result.error)  # answered, paid, then refused here
                if billed is not None:
                    seen.billed[key] = billed

    async def _collect(self, sub: Submission) -> bool:
        assert sub.batch_id is not None
        mine = {k: self.requests[k] for k in sub.custom_ids if k in self.requests}
        order = list(sub.custom_ids)
        seen = _Collected(dict.fromkeys(mine))
        for _ in range(_READS):  # a torn download is read again; a damaged file stays so
            await self._control(lambda: self._read(sub, mine, order, seen))
            unreadable = self.api.unreadable
            if not unreadable:
                break
        missing: ProviderError = ServerError("batch: the batch returned no result for the request")
        if unreadable:  # the lines not read may be answers the API billed: never resent here
            missing = ProviderError(
                f"batch {sub.batch_id}: {unreadable} line(s) of its results are not JSON and "
                "this request has no readable result (it may have been billed); re-run to "
                "send it again",
                transient=False,
                error_type="batch",
                code="unreadable_result",
            )
        report, again = self.report, False
        succeeded, failures, priced = seen.succeeded, seen.failures, seen.priced
        paid = seen.paid + math.fsum(seen.billed.values())
        report.cost_usd = None if not priced or report.cost_usd is None else report.cost_usd + paid
        report.collected += succeeded
        for key, error in failures.items():
            error = error or missing
            attempts = self.attempts.get(key, 1)
            if not error.transient:
                report.failed[key] = (error, attempts)
            elif self.options.fallback == "online":
                report.online.add(key)
            elif attempts <= self.policy.max_retries:
                again = True  # not cached, not open: the next round sends it again
            else:
                report.failed[key] = (error, attempts)
        self._settle(sub.submission, paid)
        self.ledger.collected(sub.submission, succeeded, len(failures), paid if priced else None)
        self._event(
            "batch_collected",
            batch_id=sub.batch_id,
            status=sub.status,
            succeeded=succeeded,
            failed=len(failures),
            **({"unreadable_lines": unreadable} if unreadable else {}),
        )
        return again


@dataclass
class _Collected:
    """What a batch's results have given so far, one result a custom_id: a success over
    an error, else the first error (a results file may repeat a line, and a download cut
    mid-way is read again: a response is cached and paid once).

    Attributes:
        failures: custom_id -> its error, None while it has no result; a success leaves.
        succeeded: responses cached.
        paid: USD of the cached responses.
        billed: custom_id -> USD of an answer billed, then refused here (its error kept).
        priced: every cached response has a price.
        ok: custom_ids whose response is cached (a later line for one is skipped).
    """

    failures: dict[str, ProviderError | None]
    succeeded: int = 0
    paid: float = 0.0
    billed: dict[str, float] = field(default_factory=dict)
    priced: bool = True
    ok: set[str] = field(default_factory=set)
