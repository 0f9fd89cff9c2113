"""The ``judge`` scorer: an LLM grades each response, through the run's cache and retries.

The judge prompt is a Jinja2 template in its own file (the judge file), rendered per
sample over the row's fields plus ``prompt``, ``system``, ``response``, ``target``,
``sample_id`` and ``row`` (these names win over row fields of the same name). The
rendered prompt is one user message to the judge model; that request is the cache key,
so it holds the response, the judge file's text, the judge model and its params. With
``samples: k`` the judge is asked k times, the j-th request carrying ``epoch = j`` so the
k requests are distinct cache entries; the k verdicts are reduced by ``reduce``. (The
judge request's ``epoch`` is the judge sample, not the run's epoch: the same response in
two run epochs is the same judge request, and gets the same cached verdict.)

Failures are rows in state ``judge_error``, never scores of 0. ``error.reason`` is one of
``unparseable`` (no verdict in the reply; a truncated copy is in ``error.reply``),
``truncated`` (the reply stopped at the judge's max_tokens before a verdict),
``provider_error`` (the judge could not be reached or its request was refused;
``error.provider_error`` holds the classified error), ``refusal`` (the judge declined to
answer, stop reason ``refusal``, or its provider withheld the reply, ``content_filter``:
whatever text came before is not read for a verdict) or ``template_error`` (the judge
file failed on this row's data). If any of the k verdicts fails the row is a judge_error
(the other verdicts are still recorded, and cached, so a re-run asks only for the failed
ones). A reply cut at max_tokens *after* its verdict is scored, and counted in
``judge.truncated``; one cut right at its verdict's end (``SCORE: 1``, which may have
been ``SCORE: 10``) is ``truncated``.

The verdict is read from what follows the judge's own reasoning in the scorer's
``reasoning_tags`` (an open model's ``<think>...</think>``), never from inside it; a tag
left open is no verdict (``truncated`` at max_tokens, else ``unparseable``).
"""

from __future__ import annotations

import asyncio
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2

from gradetrail._util.bounded import CURRENT, CallAborted, CallTimedOut
from gradetrail._util.files import not_a_file, path_fix
from gradetrail._util.terminal import one_line
from gradetrail.datasets import file_sha256
from gradetrail.errors import (
    DatasetError,
    GradetrailError,
    ProviderError,
    RunError,
    SpecError,
    UsageError,
)
from gradetrail.prompts.templates import Template, compile_template
from gradetrail.providers import make_provider
from gradetrail.providers.base import Request, Response
from gradetrail.rundir.results import JudgeRecord
from gradetrail.scorers.base import Score, ScoreInput, Scorer
from gradetrail.scorers.reasoning import split_reasoning
from gradetrail.scorers.targets import require_target, template_needs_target
from gradetrail.scorers.verdicts import (
    Verdict,
    VerdictError,
    VerdictParser,
    make_parser,
    reduce_verdicts,
    truncate_reply,
)
from gradetrail.spec import EvalSpec, JudgeScorerSpec, ModelSpec

if TYPE_CHECKING:
    from gradetrail.executors.calls import Calls

__all__ = [
    "JudgeCaller",
    "JudgeFile",
    "JudgeReply",
    "JudgeScorer",
    "failure",
    "judge_fields",
    "judge_record",
    "template_failure",
]

#: template variables every judge file may use besides the row's fields
JUDGE_NAMES = frozenset({"prompt", "system", "response", "target", "sample_id", "row"})


class JudgeFile:
    """A judge file, read and compiled once.

    Args:
        spec: the eval spec (its directory anchors ``path``).
        path: the judge file's path as written in the spec.

    Raises:
        SpecError: the file is missing, unreadable or not a valid template.
    """

    def __init__(self, spec: EvalSpec, path: str) -> None:
        self.path = spec.resolve(path)
        where = f"{spec.source}: scorer.file"
        problem = not_a_file(self.path)
        if problem is not None:
            fix = path_fix(path, spec.base_dir)
            raise SpecError(f"{where}: {self.path} {problem}; {fix}")
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise SpecError(f"{where}: {self.path} not found; check the path in the spec") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise SpecError(f"{where}: cannot read {self.path} ({exc})") from None
        self.sha256 = file_sha256(self.path)
        self.template: Template = compile_template(text, f"{where} ({path})")

    def check(self, row: dict[str, Any], names: frozenset[str]) -> None:
        """Check that the first row plus ``names`` has every variable the file reads.

        Raises:
            SpecError: naming the missing variables.
        """
        self.template.check(row, extra=names)

    def check_row(self, item: ScoreInput, names: frozenset[str]) -> None:
        """Check that one sample's row plus ``names`` has every field the file reads
        unguarded, before any call (as every row's prompt and regex pattern are): a row
        without one would otherwise be paid for, then be a judge_error.

        Raises:
            DatasetError: naming the sample, its line and the missing fields.
        """
        missing = self.template.names - names - item.sample.row.keys()
        if not missing:
            return
        try:
            self.template.check(item.sample.row, extra=names)
        except SpecError:
            raise DatasetError(
                f"{self.template.where}: sample {item.sample.id!r} (line {item.sample.line}): "
                f"the judge file reads {', '.join(sorted(missing))}, which this row lacks; fix "
                "the judge file (read it under 'is defined') or the row"
            ) from None

    def check_reads(self, names: tuple[str, ...], what: str) -> None:
        """The file must show the judge what it grades (each of ``names``), before any
        call: a file that never reads ``{{ response }}`` had every row graded on the row
        alone (rows alike shared one cached verdict).

        Raises:
            SpecError: naming the first variable the file never reads.
        """
        for name in names:
            if name not in self.template.names:
                shown = " and ".join(f"{{{{ {n} }}}}" for n in names)
                raise SpecError(
                    f"{self.template.where}: the judge file never reads {{{{ {name} }}}}, so "
                    f"the judge would {what}; show {'both with ' if len(names) > 1 else 'it with '}"
                    f"{shown}"
                )

    def check_target(self, first: ScoreInput) -> None:
        """A judge file that reads ``{{ target }}`` (outside an ``{% if target %}``) needs
        the spec's target.

        Raises:
            SpecError: it does, and the spec has no ``target``.
        """
        if template_needs_target(self.template):
            require_target(
                first, f"{self.template.where}: the judge file reads {{{{ target }}}} and"
            )

    def render(self, context: dict[str, Any], sample_id: str) -> str:
        """Render for one sample.

        Raises:
            DatasetError: the template fails on this sample's data (naming the sample).
        """
        try:
            return self.template.render(context)
        except jinja2.UndefinedError as exc:
            raise DatasetError(
                f"{self.template.where}: sample {sample_id!r}: {exc.message}; fix the judge file"
            ) from None
        except Exception as exc:  # a template expression failing on one row's data
            raise DatasetError(
                f"{self.template.where}: sample {sample_id!r}: {type(exc).__name__}: {exc}"
            ) from None


@dataclass(frozen=True, slots=True)
class JudgeReply:
    """One judge request's end: a parsed verdict, or why there is none.

    Attributes:
        index: the judge sample index, 1-based (the request's ``epoch``).
        verdict: the parsed verdict, or None on failure.
        reason: None, or ``unparseable``, ``truncated``, ``refusal``, ``provider_error``.
        message: what went wrong, one line (None on success).
        response: the judge's response, or None when it could not be reached.
        provider_error: the classified provider error, or None.
        cached: the response came from the cache.
        attempts: calls made this run (0 on a cache hit).
        billed: on a provider_error, what the judge was billed for before the call was
            refused (its tokens and cost count in the row's judge record), or None.
    """

    index: int
    verdict: Verdict | None
    reason: str | None
    message: str | None
    response: Response | None
    provider_error: ProviderError | None
    cached: bool
    attempts: int
    billed: Response | None = None

    def detail(self) -> dict[str, Any]:
        """The verdict as recorded in a row: index, grade and value (or the error), the
        stop reason, whether the reply was cut at max_tokens or cached, the reply
        (truncated to head and tail)."""
        out: dict[str, Any] = {"sample": self.index}
        if self.verdict is not None:
            out["grade"] = self.verdict.grade
            out["value"] = self.verdict.value
        else:
            out["error"] = self.reason
            out["message"] = self.message
        if self.response is not None:
            out["truncated"] = self.response.truncated
            out["stop_reason"] = self.response.stop_reason
            out["cached"] = self.cached
            out["reply"] = truncate_reply(self.response.text)
        return out


def judge_fields(message: str) -> str:
    """``message`` (a provider's or the budget's) with the spec fields it names as a
    model's own (``model.price``) named where a judge's live (``scorer.model.price``)."""
    return re.sub(r"(?<![\w.])model\.", "scorer.model.", message)


class JudgeCaller:
    """One judge model, called through the run's cache and retry policy.

    Args:
        model: the judge's model section (provider, name, params).
        base_dir: the spec's directory (for the provider's relative paths).
        where: names the spec file in errors.
        reasoning_tags: the scorer's ``reasoning_tags``: a verdict is read only after the
            judge's own reasoning in these tags (``<think>...</think>``), never inside it.
    """

    def __init__(
        self,
        model: ModelSpec,
        base_dir: Path,
        where: str = "spec",
        reasoning_tags: tuple[str, ...] = (),
    ) -> None:
        self.model = model
        self.where = where
        self.reasoning_tags = reasoning_tags
        self.name = f"{model.provider}:{model.name}"
        try:
            self.provider = make_provider(model, base_dir)
        except SpecError as exc:  # its message names model.provider: say which model
            raise SpecError(f"{where}: scorer.{exc}") from None
        params = model.params.model_dump(exclude_none=True)
        if not params.get("extra"):
            params.pop("extra", None)
        self.params = params
        self._identity: dict[str, Any] | None = None
        self._calls: Calls | None = None

    def check_ready(self) -> None:
        """Fail before any call when the judge cannot serve (missing key, file, function).

        Raises:
            GradetrailError: what the judge's provider reports, naming the judge.
        """
        try:
            self.provider.check_ready()
        except GradetrailError as exc:
            message = judge_fields(str(exc))
            raise type(exc)(f"{self.where}: judge {self.name}: {message}") from None
        self._identity = self.provider.identity()

    def bind(self, calls: Calls) -> None:
        """Use the run's cache and log, and an executor like the run's for the judge's
        provider.

        Raises:
            RunError: the run's executor cannot call another model (see
                :meth:`~gradetrail.executors.base.Executor.for_provider`).
            SpecError: the run's budget cannot bound the judge's calls.
            UsageError: the Ray executor cannot send the judge's provider to its workers.
        """
        if calls.executor is None:
            raise RunError(f"judge {self.name}: the run has no executor to call the judge")
        try:
            executor = calls.executor.for_provider(self.provider)
        except (
            SpecError,
            UsageError,
        ) as exc:  # a budget that cannot bound it, Ray that cannot ship it
            message = f"{self.where}: judge {self.name}: {judge_fields(str(exc))}"
            raise type(exc)(message) from None
        self._calls = calls.for_executor(executor)
        if calls.log is not None:
            calls.log.follow(self.provider.events)

    async def aclose(self) -> None:
        """Close the judge's executor and provider."""
        if self._calls is not None and self._calls.executor is not None:
            await self._calls.executor.aclose()
        self._calls = None

    def request(self, prompt: str, sample_id: str, index: int) -> Request:
        """The judge request for one rendered judge prompt; ``index`` (1-based judge
        sample) is its ``epoch``, so k judge samples are k distinct cache entries."""
        if self._identity is None:
            self._identity = self.provider.identity()
        return Request(
            provider=self.model.provider,
            model=self.model.name,
            base_url=self.model.base_url,
            system=None,
            messages=({"role": "user", "content": prompt},),
            params=self.params,
            epoch=index,
            sample_id=sample_id,
            identity=(
                {**self._identity, "sample_id": sample_id}
                if self.provider.keyed_by_sample  # replayed verdicts depend on the sample
                else self._identity
            ),
        )

    async def ask(
        self, request: Request, parser: VerdictParser, epoch: int = 1, graded: str = ""
    ) -> JudgeReply:
        """Serve one judge request (cache, else the executor with retries; successful
        responses are cached at once, parseable or not), read its verdict, and log the
        call in the run's log (``judge_call``, for the row's sample id and ``epoch``).
        ``graded`` is the response(s) the judge grades: a verdict written in one is the
        judge quoting it, read only when the reply has no other.

        Raises:
            RunError: the scorer was not bound to the run (a bug in the caller).
        """
        if self._calls is None:
            raise RunError(f"judge {self.name}: a judge call was made before the run bound it")
        call = await self._calls.call(request, request.key(), kind="judge", epoch=epoch)
        if call.response is None:
            error = call.error
            message = f"judge {self.name}: {type(error).__name__}: {error}"
            message += f" (after {call.attempts} attempt{'s' * (call.attempts != 1)})"
            return JudgeReply(
                request.epoch,
                None,
                "provider_error",
                message,
                None,
                error,
                False,
                call.attempts,
                call.billed,
            )
        prompt = str(request.messages[-1].get("content") or "")
        return _read(
            request.epoch, call.response, parser, call.cached, call.attempts, self, prompt, graded
        )


def _verdict_text(text: str, tags: tuple[str, ...]) -> str:
    """The part of a judge reply its verdict is read from: what follows its reasoning in
    ``tags`` (an open model's ``<think>...</think>``), as a candidate's answer is split.

    Raises:
        VerdictError: a reasoning tag is left open, so no verdict was given outside it.
    """
    if not tags or "<" not in text:
        return text
    split = split_reasoning(text, tags)
    if split.unclosed is not None:
        raise VerdictError(f"its <{split.unclosed}> reasoning was never closed")
    return split.answer


def _read(
    index: int,
    response: Response,
    parser: VerdictParser,
    cached: bool,
    attempts: int,
    caller: JudgeCaller,
    prompt: str = "",
    graded: str = "",
) -> JudgeReply:
    model = caller.model
    if response.refused:  # declined or withheld: what text it has is no verdict
        why = one_line(response.refusal or "no explanation given")[:200]
        message = (
            f"judge reply {index} was declined (stop reason "
            f"{response.raw_stop_reason or response.stop_reason}): {why}; no verdict is read "
            "from a refused reply"
        )
        return JudgeReply(index, None, "refusal", message, response, None, cached, attempts)
    bounded = CURRENT.get()
    try:
        text = _verdict_text(response.text, caller.reasoning_tags)
        # within the run's scoring bound: a parse.pattern that backtracks catastrophically
        # is stopped after run.score_timeout_s, and SIGTERM or a second Ctrl-C reach it
        # the prompt tells the judge's verdict from its rubric's lines repeated after it
        verdict = (
            parser(text, prompt, graded)
            if bounded is None
            else bounded.call(parser, text, prompt, graded)
        )
    except CallTimedOut:
        limit = bounded.timeout_s if bounded is not None else None
        message = (
            f"judge reply {index}: reading its verdict took more than {limit:g} s and was "
            "stopped (run.score_timeout_s); a parse.pattern that backtracks catastrophically, "
            "e.g. ((a|a)+)$, does this: fix the pattern"
        )
        return JudgeReply(index, None, "unparseable", message, response, None, cached, attempts)
    except CallAborted:
        raise asyncio.CancelledError from None
    except VerdictError as exc:
        if response.truncated:
            limit = model.params.max_tokens
            at = f" ({limit} tokens)" if limit else ""
            message = (
                f"judge reply {index} was cut at max_tokens{at} before a verdict ({exc}); "
                "raise scorer.model.params.max_tokens"
            )
            return JudgeReply(index, None, "truncated", message, response, None, cached, attempts)
        message = f"judge reply {index} holds no verdict: {exc}; see error.reply"
        return JudgeReply(index, None, "unparseable", message, response, None, cached, attempts)
    if response.truncated and _ends_with(text, verdict.grade):
        limit = model.params.max_tokens
        at = f" ({limit} tokens)" if limit else ""
        message = (
            f"judge reply {index} was cut at max_tokens{at} right after {verdict.grade!r}, "
            "which may have gone on ('SCORE: 1' of 'SCORE: 10', 'GRADE: I' of \"GRADE: I'm "
            'not sure"); raise scorer.model.params.max_tokens'
        )
        return JudgeReply(index, None, "truncated", message, response, None, cached, attempts)
    return JudgeReply(index, verdict, None, None, response, None, cached, attempts)


def _ends_with(text: str, grade: str) -> bool:
    """``text`` ends with ``grade`` (closing marks and spaces aside): a reply cut there may
    have gone on to another verdict."""
    tail = re.compile(re.escape(grade) + r"[\s*_\])\"'`\u201d\u2019]*\Z", re.IGNORECASE)
    end = unicodedata.normalize("NFKC", text[-len(grade) - 16 :])  # as the parser read it
    return tail.search(end) is not None


def _add(total: float | None, value: float | None, first: bool) -> float | None:
    """``total + value``; None (unknown) once any part is unknown."""
    if value is None or (total is None and not first):
        return None
    return (total or 0.0) + value


def judge_record(replies: list[JudgeReply], outcome: str | None = None) -> JudgeRecord:
    """Totals of a row's judge replies: requests, calls, cache hits, tokens, cost (paid
    this run, and read from the cache): None when any reply's cost is unknown (a judge
    with no price), never the sum of the others."""
    record = JudgeRecord(requests=len(replies), outcome=outcome)
    seen = {True: False, False: False}  # a cached / paid reply's cost added yet
    for reply in replies:
        record.calls += not reply.cached
        record.attempts += reply.attempts
        record.cache_hits += reply.cached
        record.verdicts += reply.verdict is not None
        response = reply.response if reply.response is not None else reply.billed
        if response is None:
            continue
        record.truncated += response.truncated
        record.input_tokens += response.total_input_tokens
        record.output_tokens += response.output_tokens
        first, seen[reply.cached] = not seen[reply.cached], True
        if reply.cached:
            record.cost_usd_cached = _add(record.cost_usd_cached, response.cost_usd, first)
        else:
            record.cost_usd = _add(record.cost_usd, response.cost_usd, first)
    return record


def failure(replies: list[JudgeReply], judge: str) -> dict[str, Any] | None:
    """The row's ``error`` for the first failed reply (None when all succeeded): kind
    ``JudgeError``, ``reason``, one-line ``message``, the judge, how many replies failed,
    the truncated ``reply`` when there was one and the ``provider_error`` when there was
    one."""
    failed = [r for r in replies if r.verdict is None]
    if not failed:
        return None
    first = failed[0]
    error: dict[str, Any] = {
        "kind": "JudgeError",
        "reason": first.reason,
        "message": first.message,
        "judge": judge,
        "failed": len(failed),
        "of": len(replies),
    }
    if first.response is not None:
        error["reply"] = truncate_reply(first.response.text)
        error["truncated"] = first.response.truncated
    if first.provider_error is not None:
        error["provider_error"] = first.provider_error.detail()
    return error


def template_failure(exc: DatasetError, judge: str) -> Score:
    """The judge_error score of a judge file that fails on one sample's data."""
    error = {"kind": "JudgeError", "reason": "template_error", "message": str(exc)}
    return Score(None, {"judge": judge}, {**error, "judge": judge}, JudgeRecord())


class JudgeScorer(Scorer):
    """Grades each response with a judge model (see the module docstring).

    Args:
        spec: the eval spec, whose ``scorer`` is a :class:`JudgeScorerSpec`.

    Raises:
        SpecError: the judge file is missing or invalid, or the judge's provider unknown.
    """

    calls_models = True

    def __init__(self, spec: EvalSpec) -> None:
        assert isinstance(spec.scorer, JudgeScorerSpec)
        self.spec = spec.scorer
        self.file = JudgeFile(spec, self.spec.file)
        self.reads_target = template_needs_target(self.file.template)
        self.caller = JudgeCaller(
            self.spec.model, spec.base_dir, spec.source, tuple(self.spec.reasoning_tags)
        )
        self.parser = make_parser(self.spec.parse)

    def identity(self) -> dict[str, Any]:
        """The judge file's content hash, as ``{"judge": sha256}``."""
        return {"judge": self.file.sha256}

    def context(self, item: ScoreInput) -> dict[str, Any]:
        """The judge file's variables for one response."""
        return {
            **item.sample.row,
            "row": item.sample.row,
            "sample_id": item.sample.id,
            "prompt": item.prompt,
            "system": item.system,
            "response": item.response,
            "target": item.target,
        }

    def check(self, first: ScoreInput) -> None:
        """Check the judge file against the first sample (render it) and the judge's
        provider (keys, files), before any call.

        Raises:
            SpecError, DatasetError, GradetrailError: what would stop every judge call.
        """
        self.file.check(first.sample.row, JUDGE_NAMES)
        self.file.check_reads(("response",), "grade without seeing the response")
        self.file.check_target(first)
        self.file.render(self.context(first), first.sample.id)
        self.caller.check_ready()

    @property
    def checks_rows(self) -> bool:
        """Only a judge file that reads row fields has something to check in every row."""
        return bool(self.file.template.names - JUDGE_NAMES)

    def check_row(self, item: ScoreInput) -> None:
        """A row lacking a field the judge file reads stops the run before any call.

        Raises:
            DatasetError: naming the sample and the field.
        """
        self.file.check_row(item, JUDGE_NAMES)

    async def bind(self, calls: Calls) -> None:
        """Call the judge through the run's cache and log and an executor like the run's."""
        self.caller.bind(calls)

    async def aclose(self) -> None:
        """Close the judge's connections."""
        await self.caller.aclose()

    async def ascore(self, item: ScoreInput) -> Score:
        """Ask the judge ``samples`` times (concurrently, within the run's concurrency
        bound) and reduce the verdicts; the detail records every verdict.

        A judge file that fails on this sample's data is a judge_error (reason
        ``template_error``), not a crash of the run.
        """
        try:
            prompt = self.file.render(self.context(item), item.sample.id)
        except DatasetError as exc:
            return template_failure(exc, self.caller.name)
        requests = [
            self.caller.request(prompt, item.sample.id, j) for j in range(1, self.spec.samples + 1)
        ]
        asks = (self.caller.ask(r, self.parser, item.epoch, item.response) for r in requests)
        replies = list(await asyncio.gather(*asks))
        detail: dict[str, Any] = {
            "judge": self.caller.name,
            "prompt": prompt,
            "verdicts": [r.detail() for r in replies],
            "reduce": self.spec.reduce,
        }
        record = judge_record(replies)
        error = failure(replies, self.caller.name)
        if error is not None:
            return Score(None, detail, error, record)
        values = [r.verdict.value for r in replies if r.verdict is not None]
        return Score(reduce_verdicts(values, self.spec.reduce), detail, None, record)
