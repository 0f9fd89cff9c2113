"""The scorer interface: a response (and the sample's target) in, a :class:`Score` out."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from gradetrail.datasets import Sample

if TYPE_CHECKING:
    from gradetrail.executors.calls import Calls
    from gradetrail.rundir.results import JudgeRecord

__all__ = ["Score", "ScoreInput", "Scorer", "json_detail", "score_value", "scorer_error"]


# read-only, but not frozen: one is built a row, and a frozen __init__ costs 5x
@dataclass(slots=True, eq=False)
class ScoreInput:
    """What a scorer sees for one (sample, epoch).

    Attributes:
        sample: the dataset row and its id.
        epoch: 1-based epoch index.
        prompt: the rendered user message.
        system: the rendered system prompt, or None.
        target: the rendered target, or None when the spec has none.
        response: the model's response text (the final turn's, in a conversation).
        tool_calls: the model's tool calls, normalized (``{"id", "name", "arguments"}``),
            over every turn in order (an agent loop's whole trajectory).
        tools: the tool definitions the request offered (``{"name", "description",
            "parameters"}``, parameters a JSON Schema), for scorers that read their
            argument types.
        response_meta: what the provider reported with the response (``stop_reason``,
            ``truncated``, ``served_model``, ``input_tokens``, ``output_tokens``,
            ``cost_usd``, ``latency_s``, ``cached``), or None when not known (a check).
        app: what a python app handed back beside its answer, or None: any of
            ``metadata`` (a dict), ``metrics`` (name -> number), ``transcript`` (a list
            of dicts) and ``artifacts`` (file name -> content, str or bytes).
    """

    sample: Sample
    epoch: int
    prompt: str
    system: str | None
    target: str | None
    response: str
    tool_calls: tuple[dict[str, Any], ...] = ()
    tools: tuple[dict[str, Any], ...] = ()
    response_meta: dict[str, Any] | None = None
    app: dict[str, Any] | None = None


# read-only, but not frozen: one is built a row, and a frozen __init__ costs 5x
@dataclass(slots=True)
class Score:
    """A scorer's verdict.

    Attributes:
        value: the score in [0, 1], or None when scoring failed (see ``error``).
        detail: what the scorer saw and extracted, JSON-ready, so a failure can be audited
            without re-running (e.g. ``{"extracted": "18", "target": "18"}``).
        error: why no score could be given (a ``judge_error`` row), or None.
        judge: what the judge calls behind this score did and cost, or None for scorers
            that call no model.
        metrics: with several scorers (``scorers:``), each metric's value by name (None
            for a metric that could not score this row); None with one scorer.
    """

    value: float | None
    detail: dict[str, Any] = field(default_factory=dict)
    error: dict[str, Any] | None = None
    judge: JudgeRecord | None = None
    metrics: dict[str, float | None] | None = None


def score_value(value: Any) -> float | None:
    """``value``, a user's scorer's verdict, as a score in [0, 1], or None when it is none.

    Any real number or truth value counts, whatever its type: ``bool``, ``int``,
    ``float``, NumPy's ``float64``/``int64``/``bool_``, ``Decimal``, ``Fraction``, a
    one-element tensor (what ``float()`` reads). A string, bytes, None, NaN, an infinity,
    a complex number or a number outside [0, 1] is none.
    """
    if value is None or isinstance(value, str | bytes | bytearray | complex):
        return None
    try:
        number = float(value)
    except Exception:  # noqa: BLE001 - no float (TypeError), or the user's __float__ failing
        return None
    return number if math.isfinite(number) and 0.0 <= number <= 1.0 else None


def json_detail(detail: dict[Any, Any]) -> dict[str, Any]:
    """A user's scorer's ``detail`` as a row can hold it: keys as strings, tuples and sets
    as lists, NaN and infinities, bytes and any other object as their ``repr`` (at most
    200 characters), nesting past 20 levels as ``"..."``. What was JSON already is kept
    as it is."""
    return {str(k): _json_value(v, 0) for k, v in detail.items()}


def _json_value(value: Any, depth: int) -> Any:
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if depth >= 20:
        return "..."
    if isinstance(value, dict):
        return {str(k): _json_value(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_json_value(v, depth + 1) for v in value]
    try:
        return repr(value)[:200]
    except Exception:  # noqa: BLE001 - the user's __repr__
        return f"<{type(value).__name__}>"


def scorer_error(detail: dict[str, Any], reason: str, message: str) -> Score:
    """No score for this row, and why (``error.kind: scorer_error``): the row becomes a
    ``judge_error`` row left out of the mean, never a 0 counted as a wrong answer.

    Args:
        detail: what the scorer saw, as for any score.
        reason: a short machine-readable reason (``regex_timeout``, ``bad_row``...).
        message: one line for people, naming what to fix.
    """
    return Score(None, detail, error={"kind": "scorer_error", "reason": reason, "message": message})


class Scorer:
    """Base class of scorers. Override :meth:`score` (sync) or :meth:`ascore` (async, for
    scorers that call a model).

    What a scorer needs from the run is declared as class attributes, decided once when
    the class is created (a subclass may set them itself; else they follow from the
    methods it defines):

    Attributes:
        asynchronous: the pipeline awaits :meth:`ascore` (a scorer that calls a model);
            False: :meth:`score` is called directly, within the run's time bound.
        checks_rows: :meth:`check_row` has something to check in every row before any
            call; False: the runner skips it.
        wants_meta: the scorer reads the response's metadata besides its text (stop
            reason, tokens, cost, latency); the pipeline builds it only then.
        calls_models: the scorer calls a model through the run's calls (a judge): a
            sample's epochs that answered alike are then scored in epoch order, so the
            same row pays for the judge's request in every run.
        reads_target: the score compares the response with the row's target (exact,
            numeric, choice, math, json; a regex pattern or judge file reading ``{{
            target }}`` unguarded): a row whose target is empty is then refused before
            any call, as no such row can be scored. False for scorers that need no
            target (a rubric judge, a user's Python scorer, tool calls).
    """

    asynchronous: ClassVar[bool] = False
    checks_rows: ClassVar[bool] = False
    calls_models: bool = False
    reads_target: bool = False
    #: the pipeline builds each response's metadata (:attr:`ScoreInput.meta`) for it
    wants_meta: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "asynchronous" not in cls.__dict__ and "ascore" in cls.__dict__:
            cls.asynchronous = True
        if "checks_rows" not in cls.__dict__ and "check_row" in cls.__dict__:
            cls.checks_rows = True

    def score(self, item: ScoreInput) -> Score:
        """Score one response."""
        raise NotImplementedError(f"{type(self).__name__} implements neither score nor ascore")

    async def ascore(self, item: ScoreInput) -> Score:
        """Score one response; the pipeline awaits this. Default: :meth:`score`."""
        return self.score(item)

    def check(self, first: ScoreInput) -> None:
        """Validate the scorer against the first sample before any model call (e.g. render
        and compile a pattern). Raises SpecError."""

    def check_row(self, item: ScoreInput) -> None:
        """Check what this scorer derives from one sample's own data, before any model
        call (called for every sample of the run, with an empty response; e.g. compile
        the regex a row's values render). Default: nothing. Raises SpecError or
        DatasetError naming the sample."""

    def check_dataset(self, dataset_hash: str) -> None:
        """Check the run's dataset (its content hash, ``manifest.dataset_hash``) against
        what this scorer reads besides it, before any call (a pairwise baseline's run).
        Default: nothing. Raises SpecError."""

    def identity(self) -> dict[str, Any]:
        """Material beyond the spec that decides scores (e.g. a judge file's hash); enters
        the run's identity hash."""
        return {}

    async def bind(self, calls: Calls) -> None:
        """Receive the run's calls before the first :meth:`ascore`: its cache (None with
        ``--no-cache``), log and executor; ``calls.executor.for_provider`` and
        :meth:`~gradetrail.executors.calls.Calls.for_executor` give a model-calling scorer
        the run's retry policy, concurrency bound, cache and log for its own model. Called
        once per run by the runner, on the run's event loop. Default: nothing."""

    async def aclose(self) -> None:
        """Release what :meth:`bind` set up. Called once at the end of the run."""
