"""A scorer a user writes, passed to :func:`gradetrail.run_eval` as an object.

``run_eval(spec, scorer=...)`` takes a :class:`~gradetrail.scorers.base.Scorer` instance
(its own ``score`` or ``ascore``) or a plain function of one
:class:`~gradetrail.scorers.base.ScoreInput`, sync or async, returning a
:class:`~gradetrail.scorers.base.Score`, a number in [0, 1], a bool, or None (no score:
the row becomes a ``judge_error`` left out of the mean). Such a scorer replaces the
spec's own, and its class or function (and its source file's SHA-256) enters the run's
identity hash, so runs scored by different code never compare as equal.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from gradetrail.errors import SpecError
from gradetrail.scorers.base import (
    Score,
    ScoreInput,
    Scorer,
    json_detail,
    score_value,
    scorer_error,
)

__all__ = ["FunctionScorer", "as_scorer", "code_identity"]

ScoreFunction = Callable[[ScoreInput], Any]


def code_identity(obj: Any) -> str:
    """``module.qualname`` of a class or function, with ``@sha256`` of its source file
    when it has one: what identifies a user's scorer in a run's identity hash."""
    target = obj if inspect.isclass(obj) or inspect.isfunction(obj) else type(obj)
    name = f"{target.__module__}.{target.__qualname__}"
    try:
        source = inspect.getsourcefile(target)
    except TypeError:  # a builtin
        source = None
    if source and Path(source).is_file():
        name += "@" + hashlib.sha256(Path(source).read_bytes()).hexdigest()
    return name


class FunctionScorer(Scorer):
    """A plain function as a scorer (see the module docstring).

    Args:
        fn: ``fn(item) -> Score | float | bool | None``, or an ``async def`` of that.
    """

    def __init__(self, fn: ScoreFunction) -> None:
        self.fn = fn
        self.name = getattr(fn, "__name__", type(fn).__name__)
        self.asynchronous = inspect.iscoroutinefunction(fn)  # type: ignore[misc]

    def score(self, item: ScoreInput) -> Score:
        """The function's verdict on one response."""
        return self._score_of(self.fn(item))

    async def ascore(self, item: ScoreInput) -> Score:
        """The verdict of the function, awaited when it is async."""
        value = self.fn(item)
        if inspect.isawaitable(value):
            value = await value
        return self._score_of(value)

    def identity(self) -> dict[str, Any]:
        """The function's module, name and source hash (see :func:`code_identity`)."""
        return {"scorer": code_identity(self.fn)}

    def _score_of(self, value: Any) -> Score:
        if isinstance(value, Score):
            return replace(value, detail=json_detail(value.detail))
        if value is None:
            return scorer_error({}, "no_score", f"scorer {self.name} returned no score")
        number = score_value(value)
        if number is not None:
            return Score(number)
        return scorer_error(
            {"returned": repr(value)[:200]},
            "bad_score",
            f"scorer {self.name} returned {value!r}; return a Score, a number in [0, 1], "
            "a bool or None",
        )


def as_scorer(obj: Scorer | ScoreFunction | Awaitable[Any]) -> Scorer:
    """A :class:`Scorer` for what a user passed as ``scorer=``.

    Raises:
        SpecError: ``obj`` is neither a Scorer instance nor a callable (a Scorer class
            itself, not an instance, is refused with the fix).
    """
    if isinstance(obj, Scorer):
        return obj
    if inspect.isclass(obj) and issubclass(obj, Scorer):
        raise SpecError(f"scorer={obj.__name__}: pass an instance, {obj.__name__}(...)")
    if callable(obj):
        return FunctionScorer(obj)
    raise SpecError(f"scorer={obj!r}: pass a Scorer instance or a function of one ScoreInput")
