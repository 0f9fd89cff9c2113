"""The ``math`` scorer: symbolic equivalence through Hugging Face's ``math-verify``.

The library does the mathematics: it extracts the response's final answer (a
``\\boxed{}`` first, then LaTeX, then plain expressions), parses it to SymPy, and
decides equivalence with the target (``\\frac{1}{2}`` = ``0.5``, ``\\sqrt{2}/2`` =
``1/\\sqrt{2}``, intervals, sets, equations). gradetrail wraps it:

- the row records both parses (``parsed_response``, ``parsed_target``: the SymPy value
  and the text it came from), so a verdict can be audited;
- a response with no parsable answer scores 0 with the reason recorded
  (``reason: no parsable answer``), never a silent 0;
- a parse or comparison that exceeds ``timeout_s`` (interrupted by the library's alarm,
  or finished late because the alarm landed where the library swallowed it), a target that
  does not parse, or an error inside the library is a scorer error row (``error.kind:
  scorer_error``), never a score.

math-verify bounds its work with ``signal.alarm``, which only the main thread may set;
when scoring runs in another thread (off the event loop) its alarm cannot be used and the
run's own bound on scoring applies instead (``detail.timeout_applied`` says which).
Install with ``pip install 'gradetrail[math]'``.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from gradetrail.errors import SpecError
from gradetrail.scorers.base import Score, ScoreInput, Scorer, scorer_error
from gradetrail.scorers.targets import require_target
from gradetrail.spec import MathScorerSpec

__all__ = ["MathScorer"]

_SHOWN = 200  # characters of a parse or message kept in the row


def _import() -> Any:
    try:
        import math_verify
    except ImportError:
        raise SpecError(
            "scorer: type math needs math-verify; pip install 'gradetrail[math]'"
        ) from None
    return math_verify


class MathScorer(Scorer):
    """1.0 when math-verify finds the response's answer equivalent to the target."""

    def __init__(self, spec: MathScorerSpec) -> None:
        self.spec = spec
        self.mv = _import()
        from math_verify.errors import TimeoutException

        self._timeout_error = TimeoutException

    def _in_time(self, began: float, timeout: int | None) -> None:
        """Raise the library's timeout when a call ran past it anyway: its alarm can land
        inside library code that catches every exception and goes on, so whether a slow
        parse is a timeout must not depend on where the alarm fell."""
        if timeout is not None and time.monotonic() - began > timeout:
            raise self._timeout_error(f"ran past {timeout} s")

    def _timeout(self) -> int | None:
        in_main = threading.current_thread() is threading.main_thread()
        return self.spec.timeout_s if in_main else None

    def _parse_target(self, target: str, timeout: int | None) -> list[Any]:
        """The target as LaTeX math (``$target$``: plain numbers parse too), else as text."""
        parsed = self.mv.parse(f"${target}$", parsing_timeout=timeout, raise_on_error=True)
        if not parsed:
            parsed = self.mv.parse(target, parsing_timeout=timeout, raise_on_error=True)
        return parsed

    def check(self, first: ScoreInput) -> None:
        """The first target must parse.

        Raises:
            SpecError: no target, or math-verify finds no expression in the first one.
        """
        require_target(first, "scorer: the math scorer")
        try:
            parsed = self._parse_target(first.target, self._timeout())
        except Exception as exc:  # the library's own failure, named
            raise SpecError(
                f"target: math-verify cannot parse {first.target[:80]!r}: {str(exc)[:_SHOWN]}"
            ) from None
        if not parsed:
            raise SpecError(
                f"target: math-verify finds no expression in the first target "
                f"{first.target[:80]!r}; use exact, numeric or regex for text targets"
            )

    def score(self, item: ScoreInput) -> Score:
        """Parse both, verify; every outcome is recorded (see the module docstring)."""
        timeout = self._timeout()
        detail: dict[str, Any] = {"timeout_applied": timeout is not None}
        stage = "parse the target"
        try:
            began = time.monotonic()
            gold = self._parse_target(item.target or "", timeout)
            self._in_time(began, timeout)
            detail["parsed_target"] = _shown(gold)
            if not gold:
                return _error(
                    detail, "target_unparsed", "math-verify finds no expression in the target"
                )
            stage = "parse the response"
            began = time.monotonic()
            pred = self.mv.parse(item.response, parsing_timeout=timeout, raise_on_error=True)
            self._in_time(began, timeout)
            detail["parsed_response"] = _shown(pred)
            if not pred:
                detail["reason"] = "no parsable answer in the response"
                return Score(0.0, detail)
            stage = "compare"
            began = time.monotonic()
            ok = self.mv.verify(gold, pred, timeout_seconds=timeout, raise_on_error=True)
            self._in_time(began, timeout)
        except self._timeout_error:
            return _error(
                detail, "timeout", f"math-verify did not {stage} within {self.spec.timeout_s} s"
            )
        except Exception as exc:  # noqa: BLE001 - the library's failure becomes a row
            return _error(detail, "math_verify_error", f"{stage}: {type(exc).__name__}: {exc}")
        return Score(float(bool(ok)), detail)


def _shown(parsed: list[Any]) -> list[str] | None:
    """math-verify's parse ([sympy value, source text]) as short strings."""
    return [str(p)[:_SHOWN] for p in parsed] if parsed else None


def _error(detail: dict[str, Any], reason: str, message: str) -> Score:
    return scorer_error(detail, reason, message[:_SHOWN])
