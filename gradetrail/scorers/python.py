"""The ``python`` scorer: a function the user writes.

``scorer: {type: python, function: "mypkg.grading:score"}`` imports ``mypkg.grading``
(the spec's directory and the working directory first on ``sys.path``) and calls
``score(sample)`` once a response, where ``sample`` is a :class:`ScoredSample`: the row,
the rendered prompt and system prompt, the target, the response text, its tool calls and
what the provider reported with it (``metadata``), and what a ``python`` app handed back
beside its text (``app``). The function may be sync or async and
returns:

- a number in [0, 1] (a ``bool`` is 0 or 1), or
- a :class:`~gradetrail.scorers.base.Score` (``gradetrail.Score(0.5, {"why": ...})``),
  whose detail dict is recorded in the row.

Anything else (a number outside [0, 1], NaN, a string), or an exception, is a scorer
error row (``error.kind: scorer_error``) naming the function: left out of the mean,
never a crash of the run and never a 0. A sync function runs under the run's scoring time
bound (``run.score_timeout_s``) as every scorer that calls no model does; an async one is
awaited with the same bound. The module file's SHA-256 enters the run's identity
(``python_scorer:<function>``), so runs graded by different code are never silently
comparable; re-scoring a run with changed grading code reads the cached responses and
makes no model call.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import importlib
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradetrail._util.bounded import CallAborted, CallTimedOut
from gradetrail._util.usercode import exception_text
from gradetrail._util.userloop import BLOCK_LIMIT_S, Escaped, UserLoop
from gradetrail.errors import SpecError
from gradetrail.scorers.base import (
    Score,
    ScoreInput,
    Scorer,
    json_detail,
    score_value,
    scorer_error,
)
from gradetrail.spec.scorer import PythonScorerSpec

__all__ = ["AsyncPythonScorer", "PythonScorer", "ScoredSample", "make_python_scorer"]

_SHOWN = 200  # characters of an exception's message kept in the row


@dataclass(frozen=True, slots=True)
class ScoredSample:
    """What a python scorer's function receives for one response.

    Attributes:
        id: the sample id.
        epoch: 1-based epoch.
        row: the dataset row's fields, a copy of its own (a change to it reaches no other
            scorer, epoch or row).
        prompt: the rendered user message.
        system: the rendered system prompt, or None.
        target: the rendered target, or None when the spec has none.
        response: the model's response text.
        tool_calls: the model's tool calls (``{"id", "name", "arguments"}`` each).
        metadata: what the provider reported with the response: ``stop_reason``,
            ``truncated``, ``served_model``, ``input_tokens``, ``output_tokens``,
            ``cost_usd`` (USD or None), ``latency_s`` (seconds or None), ``cached``.
        app: what a ``python`` provider's app handed back beside its text
            (``gradetrail.Response``'s ``metadata``, ``metrics``, ``transcript``,
            ``artifacts``), or None: ``ScoreInput.app``, a copy of its own.
    """

    id: str
    epoch: int
    row: dict[str, Any]
    prompt: str
    system: str | None
    target: str | None
    response: str
    tool_calls: tuple[dict[str, Any], ...]
    metadata: dict[str, Any]
    app: dict[str, Any] | None = None


def _sample(item: ScoreInput) -> ScoredSample:
    return ScoredSample(
        item.sample.id,
        item.epoch,
        copy.deepcopy(item.sample.row),  # its own: a change must not reach other scorers
        item.prompt,
        item.system,
        item.target,
        item.response,
        item.tool_calls,
        dict(item.response_meta or {}),
        copy.deepcopy(item.app),  # its own, as the row is
    )


class PythonScorer(Scorer):
    """A synchronous user function as a scorer (see the module docstring).

    Args:
        spec: the ``scorer`` section (``function: module:name``).
        base_dir: the spec's directory, put on ``sys.path`` to import the module.
        timeout_s: the run's ``score_timeout_s`` (seconds, None: no bound); the pipeline
            applies it to a sync function, :class:`AsyncPythonScorer` to an async one.

    Raises:
        SpecError: the module cannot be imported, or has no callable of that name.
    """

    #: the pipeline builds each response's metadata for this scorer
    wants_meta = True

    def __init__(self, spec: PythonScorerSpec, base_dir: Path, timeout_s: float | None) -> None:
        from gradetrail._util.usercode import import_user_module

        self.spec = spec
        self.timeout_s = timeout_s
        module_name, _, name = spec.function.partition(":")
        loaded = sys.modules.get(module_name)
        module = import_user_module(module_name, base_dir, "scorer.function")
        if loaded is not None:  # imported before (a run in this process): run the code
            module = _reloaded(module, module_name)  # whose hash enters the identity
        fn = getattr(module, name, None)
        if not callable(fn):
            have = sorted(n for n, v in vars(module).items() if callable(v) and n[0] != "_")
            raise SpecError(
                f"scorer.function: {module_name!r} has no function {name!r} (it has "
                f"{', '.join(have[:10]) or 'none'}); name one of its functions"
            )
        self.fn: Callable[[ScoredSample], Any] = fn
        source = getattr(module, "__file__", None)
        self.sha256 = (
            hashlib.sha256(Path(source).read_bytes()).hexdigest()
            if source and Path(source).is_file()
            else ""
        )

    def identity(self) -> dict[str, Any]:
        """The module file's SHA-256, so a change to the grading code changes the run's
        identity."""
        return {f"python_scorer:{self.spec.function}": self.sha256}

    def score(self, item: ScoreInput) -> Score:
        """Call the function and check what it returned."""
        try:
            result = self.fn(_sample(item))
        except (CallTimedOut, CallAborted, KeyboardInterrupt):  # the run's bound, its signals
            raise
        except BaseException as exc:  # noqa: BLE001 - SystemExit too: this row's error, never the run's end
            return self._raised(item, exc)
        return self._verdict(result)

    def _raised(self, item: ScoreInput, exc: BaseException) -> Score:
        said = exception_text(exc, _SHOWN)
        fix = "fix the function"
        if isinstance(exc, RuntimeError) and "running event loop" in said:
            fix = (  # asyncio.run() in a plain def: it is called on the run's event loop
                "a plain def scorer runs on the run's event loop: make it an async def "
                "and await instead of asyncio.run()"
            )
        return scorer_error(
            {"function": self.spec.function, "response_chars": len(item.response)},
            "python_scorer_failed",
            f"{self.spec.function} raised {said}; {fix} (the row is left out of the mean)",
        )

    def _verdict(self, result: Any) -> Score:
        """The function's result as a Score, or a scorer error saying what was wrong."""
        if isinstance(result, Score):
            value, detail = result.value, json_detail(result.detail)
            if result.error is not None:
                return Score(None, detail, error=dict(result.error))
        else:
            value, detail = result, {}
        detail.setdefault("function", self.spec.function)
        number = score_value(value)
        if number is None:
            shown = _shown(value)
            return scorer_error(
                detail,
                "python_scorer_bad_value",
                f"{self.spec.function} returned {shown} ({type(value).__name__}); return a "
                "number in [0, 1], a bool, or a gradetrail.Score",
            )
        return Score(number, detail)


def _shown(value: Any) -> str:
    """``repr(value)``, at most 80 characters, also when its ``__repr__`` raises."""
    try:
        return repr(value)[:80]
    except Exception:  # noqa: BLE001 - the user's __repr__
        return f"a {type(value).__name__}"


def _reloaded(module: Any, module_name: str) -> Any:
    """``module`` re-executed from its file, so the function run is the file's current
    code. Raises SpecError when re-executing it fails."""
    try:
        return importlib.reload(module)
    except (Exception, SystemExit) as exc:
        raise SpecError(
            f"scorer.function: re-importing {module_name!r} raised {type(exc).__name__}: "
            f"{exc}; fix the module"
        ) from None


#: the event loop async scorer functions run on, never the run's own: one that never
#: awaits (a CPU loop, time.sleep) would hold the run's loop, so that neither
#: score_timeout_s nor SIGTERM could stop it
_SCORER_LOOP = UserLoop("gradetrail-async-scorer", held_s=BLOCK_LIMIT_S)


class AsyncPythonScorer(PythonScorer):
    """An ``async def`` user function as a scorer, awaited with the run's time bound. It
    runs on an event loop of its own (:mod:`gradetrail._util.userloop`), so one that holds
    its loop without awaiting still times out, and the run stays reachable by signals."""

    async def ascore(self, item: ScoreInput) -> Score:
        """Await the function (at most ``timeout_s`` seconds) and check its result."""
        try:
            called = _SCORER_LOOP.run(self.fn(_sample(item)), label=item.sample.id)
            result = await asyncio.wait_for(called, self.timeout_s)
        except Escaped as exc:  # its own SystemExit, KeyboardInterrupt, GeneratorExit
            return self._raised(item, exc.original)
        except TimeoutError as exc:
            if self.timeout_s is None:  # no bound: the function's own TimeoutError
                return self._raised(item, exc)
            return Score(
                None,
                {"function": self.spec.function},
                error={
                    "kind": "ScorerTimeout",
                    "reason": "scorer_timeout",
                    "message": f"{self.spec.function} took more than {self.timeout_s:g} s on "
                    "this response and was cancelled (run.score_timeout_s)",
                },
            )
        except Exception as exc:  # noqa: BLE001 - the user's bug becomes this row's error
            return self._raised(item, exc)
        return self._verdict(result)

    def score(self, item: ScoreInput) -> Score:
        """Not used: the pipeline awaits :meth:`ascore`."""
        raise NotImplementedError("an async python scorer is awaited through ascore")


def make_python_scorer(
    spec: PythonScorerSpec, base_dir: Path, timeout_s: float | None
) -> PythonScorer:
    """The scorer for ``spec``: :class:`AsyncPythonScorer` for an ``async def`` function,
    else :class:`PythonScorer`.

    Raises:
        SpecError: the module cannot be imported or lacks the function.
    """
    scorer = PythonScorer(spec, base_dir, timeout_s)
    fn = scorer.fn
    is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - a callable object's async __call__
    )
    if is_async:
        scorer.__class__ = AsyncPythonScorer
    return scorer
