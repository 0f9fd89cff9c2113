"""The ``math`` scorer: symbolic equivalence through Hugging Face's ``math-verify``.

The library does the mathematics: it extracts the response's final answer (a
``\\boxed{}`` first, then LaTeX, then plain expressions), parses it to SymPy, and
decides equivalence with the target (``\\frac{1}{2}`` = ``0.5``, ``\\sqrt{2}/2`` =
``1/\\sqrt{2}``, intervals, sets, equations). gradetrail wraps it:

- target and response are read by one reader (:func:`read_answer`), as math-verify's
  authors compare them: a response written exactly as its target always equals it
  (``(0, 1)``, ``{1,2,3}``, ``[1,2]``), and a target is never rewritten on its own;
- answers without LaTeX delimiters are read whole (``-1 + sqrt(3)``, ``x<2``,
  ``33.5\\%``; an escaped ``\\$`` is a dollar sign, not a delimiter: the target
  ``\\$18.90`` is 18.90), digits grouped by thin or plain spaces are one number
  (``1\\,234``), ``74°`` is ``74^\\circ`` and Markdown emphasis is not part of an
  answer (``**6**`` is 6); full-width digits, mixed numbers (``3 1/2``), E notation
  (``2.5e3``), ``×`` between numbers and dotted thousands (``1.234.567``) are the numbers
  they write, and a formula the text denies (``$12$ (not $13$)``) is not its answer;
  ``A ≈ B`` states A (as math-verify reads ``$A \\approx B$``), a repeating decimal
  (``0.\\overline{3}``) is its fraction, an AMC label opening a box (``\\boxed{\\textbf{(C)
  } 12}``) is not part of the value, and a closing ``The answer is Monday.`` is the text
  ``\\text{Monday}`` when nothing else is found; a reply that is one JSON object answers
  with its ``answer`` / ``final_answer`` key (``{"answer": 0.5, "confidence": 0.9}`` is
  0.5); an answer stated on its own line (``Answer: 12``, ``The answer is 12.``, ``####
  12``, a ``Final Answer`` heading, ``Réponse :``, ``答案：``) is the answer whatever
  formulas the explanation after it holds; a number in English words or with a scale
  word (``\\boxed{five}``, ``2 million``) is that number;
- the row records both parses (``parsed_response``, ``parsed_target``: the SymPy value
  and the text it came from), so a verdict can be audited;
- a response with no parsable answer, or whose parse or comparison runs past
  ``timeout_s`` (``\\boxed{2^{2^{2^{49}}}}``), scores 0 with the reason recorded
  (``detail.reason``), as math-verify itself counts it, never a silent 0;
- a target in which math-verify finds no answer at all, a target whose parse runs out of
  time, or an error inside the library while reading the target is a scorer error row
  (``error.kind: scorer_error``) naming what to fix, never a score; a target math-verify
  reads only as text (``12:00``) is compared as math-verify compares it.

math-verify bounds its work with ``signal.alarm``, which only the main thread may set;
when scoring runs in another thread (off the event loop) its alarm cannot be used and the
run's own bound on scoring applies instead (``detail.timeout_applied`` says which).
Install with ``pip install 'gradetrail[math]'``.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

from gradetrail.errors import SpecError
from gradetrail.scorers.base import Score, ScoreInput, Scorer, scorer_error
from gradetrail.scorers.json_answer import parse_answer
from gradetrail.scorers.numbers import last_statement, spelled_number
from gradetrail.scorers.targets import require_target
from gradetrail.spec import MathScorerSpec

__all__ = ["MathScorer", "bare_answer", "read_answer"]

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

    reads_target = True

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

    def _read(self, text: str, timeout: int | None) -> list[Any]:
        """What math-verify parses from ``text``, read the same way for a target and a
        response (see :func:`bare_answer` for answers written without LaTeX delimiters)."""
        return read_answer(self.mv, text, timeout)

    def check(self, first: ScoreInput) -> None:
        """The first target must parse.

        Raises:
            SpecError: no target, or math-verify finds no expression in the first one.
        """
        require_target(first, "scorer: the math scorer")
        try:
            parsed = self._read(first.target, self._timeout())
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
        """Read both sides the same way, verify; every outcome is recorded (see the module
        docstring). A response whose parse or comparison runs out of time is a wrong answer
        with its reason, as in math-verify itself; the target's failures are scorer errors."""
        timeout = self._timeout()
        detail: dict[str, Any] = {"timeout_applied": timeout is not None}
        try:
            began = time.monotonic()
            gold = self._read(item.target or "", timeout)
            self._in_time(began, timeout)
        except self._timeout_error:
            message = f"math-verify did not parse the target within {self.spec.timeout_s} s"
            return _error(detail, "timeout", message)
        except Exception as exc:  # noqa: BLE001 - the library's failure becomes a row
            return _error(detail, "math_verify_error", f"parse the target: {_named(exc)}")
        detail["parsed_target"] = _shown(gold)
        if not gold:
            return _error(
                detail,
                "target_unparsed",
                "math-verify finds no answer in the target; fix the dataset's target or use "
                "exact, numeric or regex for text targets",
            )
        stage = "parse the response"
        try:
            began = time.monotonic()
            pred = self._read(item.response, timeout)
            self._in_time(began, timeout)
            detail["parsed_response"] = _shown(pred)
            if not pred:
                detail["reason"] = "no parsable answer in the response"
                return Score(0.0, detail)
            stage = "compare"
            began = time.monotonic()
            # as the library's authors call it: a pair of readings it cannot compare
            # (zoo, a matrix against a number) is unequal, and the next pair is tried
            ok = self.mv.verify(gold, pred, timeout_seconds=timeout, raise_on_error=False)
            self._in_time(began, timeout)
        except self._timeout_error:
            detail.setdefault("parsed_response", None)
            detail["reason"] = (
                f"timeout: math-verify did not {stage} within {self.spec.timeout_s} s"
            )
            return Score(0.0, detail)
        except Exception as exc:  # noqa: BLE001 - math-verify counts these as not equal
            detail.setdefault("parsed_response", None)
            detail["reason"] = f"math-verify could not {stage}: {_named(exc)}"[:_SHOWN]
            return Score(0.0, detail)
        return Score(float(bool(ok)), detail)


def _json_answer(text: str) -> str | None:
    """The ``answer`` (or ``final_answer``) of a reply that is one JSON object, fenced or
    not (``{"answer": 0.5, "confidence": 0.9}`` answers 0.5), as text; None otherwise."""
    value, _, _ = parse_answer(text)
    if not isinstance(value, dict):
        return None
    for key in ("answer", "final_answer", "Answer", "final answer"):
        found = value.get(key)
        if isinstance(found, str | int | float) and not isinstance(found, bool):
            return str(found)
    return None


def _plain_numbers(text: str) -> str:
    """``text`` with numbers written as math-verify cannot read them rewritten, on both
    sides alike: full-width forms as ASCII (``４２`` is 42), digits grouped by thin or
    plain spaces or by dots (``1\\,234``, ``12 500``, ``1.234.567``) as one number,
    ``74°`` as ``74^\\circ``, a mixed number as its fraction (``3 1/2`` is ``7/2``, as
    ``3\\frac{1}{2}`` already is), and E notation as a power of ten (``2.5e3`` is
    ``2.5*10^(3)``, not ``2.5 e 3``), ``\\beginboxed{...}`` as the ``\\boxed`` it means,
    and a ``×`` between numbers as ``*`` (``6.02 × 10^23``
    was read as 10). A formula the text denies (``So $x = 12$ (not $13$)``, ``$12$
    instead of $13$``) is dropped when another formula is left: it is not the answer,
    though math-verify's extraction would take it as the last one."""
    if not text.isascii():
        text = text.translate(_FULL_WIDTH)
    if "\\beginboxed" in text:  # a model's slip for \boxed, as Inspect's cases read it
        text = text.replace("\\beginboxed", "\\boxed")
    if "≈" in text:  # 5/36 ≈ 0.139 states 5/36, as math-verify reads $5/36 \approx 0.139$
        text = text.replace("≈", " \\approx ")
    if "\\overline" in text:  # 0.\overline{3} is 1/3
        text = _REPEATING.sub(_repeating, text)
    if "(" in text and "box" in text:  # \boxed{\textbf{(C) } 12}: an AMC label, then 12
        text = _BOX_LABEL.sub(r"\g<box>", text)
    text = _GROUPED.sub(lambda m: _GROUP_SEP.sub("", m.group()), text)
    text = _DOTTED.sub(lambda m: m.group().replace(".", ""), text)
    text = _DEGREE.sub(r"^\\circ", text)
    text = _MIXED.sub(_improper, text)
    text = _TIMES.sub("*", text)
    if "box" in text:  # \boxed{five}, \boxed{2 million}: the number, not f*i*v*e
        text = _BOXED_TEXT.sub(_spelled_box, text)
    if _DENIED.search(text):  # So $x = 12$ (not $13$): 12, not the last formula
        kept = _DENIED.sub(lambda m: m.group("word"), text)
        text = kept if _MATH_DELIMITED.search(kept) else text
    return _E_NOTATION.sub(r"\g<mantissa>*10^(\g<exp>)", text)


#: a formula in inline math right after a denial: ``not $13$``, ``instead of \\(13\\)``
_DENIED = re.compile(
    r"(?i)(?P<word>\b(?:not|rather\s+than|instead\s+of)[ \t]+)"
    r"(?:(?<!\\)\$[^$\n]+(?<!\\)\$|\\\(.*?\\\))"
)
#: full-width ASCII forms (``４２``, ``－３``) as ASCII, one character for one; zero-width
#: characters and the byte-order mark dropped
_FULL_WIDTH = {0xFF01 + i: 0x21 + i for i in range(94)} | dict.fromkeys(
    (0x200B, 0x200C, 0x200D, 0x2060, 0xFEFF)
)
#: digits grouped in threes by dots, two groups or more (``1.234.567``; ``1.234`` is a
#: decimal)
_DOTTED = re.compile(r"(?<![\d.,])\d{1,3}(?:\.\d{3}){2,}(?!\d|\.\d)")
#: a whole number, a space and a proper fraction: ``3 1/2``
_MIXED = re.compile(r"(?<![\d.,/^])(?P<whole>\d+)[ \t]+(?P<num>\d+)/(?P<den>\d+)(?![\d/^]|\.\d)")
#: ``×`` between two numbers: multiplication (math-verify's plain reader stops at it)
_TIMES = re.compile(r"(?<=\d)[ \t]*×[ \t]*(?=\d)")
#: a number in E notation, standing alone: ``2.5e3``, ``1E-3`` (not ``2e`` nor ``x3e2``)
_E_NOTATION = re.compile(r"(?<![\w.])(?P<mantissa>\d+(?:\.\d+)?)[eE](?P<exp>[-+]?\d+)(?!\w|\.\d)")


#: a repeating decimal: ``0.\\overline{3}``, ``1.2\\overline{45}``
_REPEATING = re.compile(
    r"(?<![\d.])(?P<whole>\d*)\.(?P<fixed>\d*)\\overline\s*\{(?P<rep>\d{1,12})\}"
)
#: a multiple-choice label opening a box before its value: ``\\boxed{\\textbf{(C) } 12}``
_BOX_LABEL = re.compile(
    r"(?P<box>\\boxed\s*\{)\s*(?:\\text(?:bf|rm)?\s*\{\s*\([A-E]\)\s*\}|\([A-E]\))\s*(?=[^\s}])"
)


#: a box holding plain text (or one ``\text{...}``): ``\boxed{five}``, ``\boxed{2 million}``
_BOXED_TEXT = re.compile(
    r"\\boxed\s*\{\s*(?:\\(?:text|mathrm|mbox)\s*\{(?P<inner>[^{}]*)\}|(?P<plain>[^{}\\$]*))\s*\}"
)


def _spelled_box(m: re.Match[str]) -> str:
    """The box of a number in words or with a scale word as its digits (``\boxed{five}``
    is ``\boxed{5}``, ``\boxed{2 million}`` ``\boxed{2000000}``); any other box as is."""
    digits = spelled_number(m.group("inner") or m.group("plain") or "")
    return m.group() if digits is None else f"\\boxed{{{digits}}}"


def _repeating(m: re.Match[str]) -> str:
    """A repeating decimal as its fraction (``0.\\overline{3}`` is ``\\frac{1}{3}``,
    ``0.1\\overline{6}`` is ``\\frac{15}{90}``)."""
    whole, fixed, rep = m.group("whole") or "0", m.group("fixed"), m.group("rep")
    den = 10 ** len(fixed) * (10 ** len(rep) - 1)
    num = int(fixed + rep) - int(fixed or "0") + int(whole) * den
    return f"\\frac{{{num}}}{{{den}}}"


def _improper(m: re.Match[str]) -> str:
    """A mixed number's fraction (``3 1/2`` as ``7/2``); two numbers that are not one
    (``3 5/2``: the fraction is not proper) are left as written."""
    whole, num, den = int(m.group("whole")), int(m.group("num")), int(m.group("den"))
    if not 0 < num < den:
        return m.group()
    return f"{whole * den + num}/{den}"


#: LaTeX math delimiters or a box: math-verify's own extraction finds the answer (an
#: escaped ``\\$`` is a dollar sign, not a delimiter: ``\\$18.90``)
_DELIMITED = re.compile(r"(?<!\\)\$|\\\(|\\\[|\\(?:boxed|fbox|begin)\b")
#: digits grouped in threes by a thin space (``\,``, ``\;``, ``\ ``), ``{,}``, a space, a
#: no-break space or a narrow no-break space: one number (``1\,234``, ``12 500``)
_GROUPED = re.compile(
    r"(?<![\d.,])\d{1,3}(?:(?:\\[,;: ]|\{,\}|[ \u00a0\u202f\u2009])\d{3})+(?![\d])"
)
_GROUP_SEP = re.compile(r"\\[,;: ]|\{,\}|[ \u00a0\u202f\u2009]")
#: a degree sign after a number, as LaTeX (``74°`` is ``74^\circ``)
_DEGREE = re.compile(r"(?<=[\d}])\s*°")
#: words a bare formula may hold: functions, constants and LaTeX commands
_FORMULA_WORDS = re.compile(
    r"\\[A-Za-z]+|\b(?:sqrt|cbrt|sin|cos|tan|cot|sec|csc|arcsin|arccos|arctan|log|ln|exp"
    r"|pi|infty|infinity|inf|oo)\b"
)
#: the answer a prose reply states at its end: ``The answer is -1 + sqrt(3).``
_STATED = re.compile(r"(?i)\b(?:answer|result|solution)\s*(?:is\b|:|=)")
#: any closing statement of a value: ``the point is (1, 2)``, ``so x = 3``
_CLOSING = re.compile(r"(?i)\bis\b|:|=|≈")
#: ``x = 2`` or ``2 = x``: an answer assigned to one variable is its value
_ASSIGNED = re.compile(
    r"\A\s*(?:[A-Za-z](?:_\w+)?\s*=\s*(?P<rhs>[^=]+)|(?P<lhs>[^=]+?)\s*=\s*[A-Za-z](?:_\w+)?)\s*\Z"
)


def _formula(text: str) -> bool:
    """True when ``text`` is one line of mathematics without prose (``-1 + sqrt(3)``,
    ``x<2``, ``33.5\\%``, ``(0, 1)``)."""
    if not text or "\n" in text or len(text) > 200 or _DELIMITED.search(text):
        return False
    rest = _FORMULA_WORDS.sub(" ", text)
    return re.search(r"[A-Za-z]{2,}", rest) is None and re.search(r"[\dA-Za-z]", text) is not None


def _closing_formula(text: str, marker: re.Pattern[str]) -> str | None:
    """The formula after the last ``marker`` that ends ``text`` (a closing full stop or
    exclamation mark aside: ``The answer is 6!`` states 6, as math-verify reads it), or
    None."""
    for m in reversed(list(marker.finditer(text))):
        tail = text[m.end() :].strip().rstrip(".!").strip()
        if _formula(tail):
            return tail
        if "\n" in tail:  # statements before the last line do not close the text
            break
    return None


def bare_answer(text: str) -> str | None:
    """The answer ``text`` writes without LaTeX delimiters, or None: the whole text when it
    is a formula, else the formula a closing ``answer is ...`` (``Answer:``, ``the result
    is``) states, else, in text without LaTeX delimiters, the formula after a closing
    ``is``, ``:`` or ``=`` (``the point is (1, 2)``). An assignment to one variable (``x =
    2``, ``2 = x``) is its value (``2``), and Markdown emphasis around it is not part of it
    (``**6**`` is ``6``)."""
    text = text.strip()
    found = text if _formula(text) else None
    if found is None:
        found = _closing_formula(text, _STATED)
    if found is None and not _DELIMITED.search(text):
        found = _closing_formula(text, _CLOSING)
    if found is not None:  # Markdown emphasis: **6**, or the ** 7 after **Answer:**
        found = found.strip(_EMPHASIS) or found
    if found is not None and (m := _ASSIGNED.match(found)):
        found = (m.group("rhs") or m.group("lhs")).strip()
    return found


#: Markdown emphasis opening or closing an answer: ``**6**``, ``*6*``, ``__6__``, the ``**``
#: left after ``**Answer:**`` (never Python's ``2**(1/4)``, inside the formula)
_EMPHASIS = "*_ \t"


def _as_latex(formula: str) -> str:
    """A plain formula in LaTeX for math-verify's LaTeX reader (``2**(1/4)`` as ``2^(1/4)``,
    ``sqrt(3)`` as ``\\sqrt{3}``, ``<=`` as ``\\le``, a bare ``%`` escaped)."""
    out = formula.replace("**", "^").replace("<=", r"\le ").replace(">=", r"\ge ")
    out = out.replace("≤", r"\le ").replace("≥", r"\ge ").replace("≠", r"\neq ")
    out = out.replace("√", r"\sqrt").replace("π", r"\pi ").replace("∞", r"\infty ")
    out = out.replace("×", r"\times ").replace("·", r"\cdot ").replace("÷", r"\div ")
    for _ in range(3):  # nested calls, innermost first
        out = re.sub(r"(?<!\\)\b(sqrt|sin|cos|tan|log|ln|exp)\(([^()]*)\)", r"\\\1{\2}", out)
    out = re.sub(r"(?<!\\)\b(pi)\b", r"\\pi", out)
    out = re.sub(r"(?<!\\)\b(?:infinity|infty|inf|oo)\b", r"\\infty", out)
    return re.sub(r"(?<!\\)%", r"\\%", out)


def _compact(text: str) -> str:
    return re.sub(r"[\s$]", "", text).replace(",", ".")


def read_answer(mv: Any, text: str, timeout: int | None) -> list[Any]:
    """math-verify's parse of ``text`` (``[sympy value, source text]``, empty when none),
    the same reading for a target and a response.

    Digits grouped by thin or plain spaces become one number and ``74°`` reads as
    ``74^\\circ`` on both sides. One line of LaTeX without delimiters (``\\frac{7}{2}``, a
    ``pmatrix``, ``\\text{Evelyn}``: how datasets store targets) is read as LaTeX. A
    formula without delimiters (see :func:`bare_answer`) is read by math-verify's
    plain-expression reader when that reads all of it (``2**(1/4)``, ``1,22``; with a
    comma between digits the LaTeX reading, a list, counts too), else as LaTeX (``(0,
    1)``, ``\\{1,2,3\\}``, ``x<2``, ``-1 + sqrt(3)``). A short line listing values
    (``19, 46, and 82``) is their set. Anything else (prose, text with delimiters or a
    ``\\boxed``) goes to math-verify as it is, unless it closes on a stated formula
    without delimiters (``Answer: -1 + sqrt(3)``).

    Raises:
        math_verify.errors.TimeoutException: a parse ran past ``timeout`` seconds.
        Exception: math-verify's own error (``raise_on_error``).
    """

    def parse(source: str) -> list[Any]:
        return mv.parse(source, parsing_timeout=timeout, raise_on_error=True)

    if "answer" in text and (value := _json_answer(text)) is not None:
        text = value  # {"answer": 0.5, "confidence": 0.9}: the answer, not the last number

    text = _plain_numbers(text)
    if (line := _stated_line(text)) is not None and _has_value(
        found := read_answer(mv, line, timeout)
    ):
        return found  # Answer: 12, then an explanation whose formulas are not the answer
    if (digits := spelled_number(text.strip().strip(_EMPHASIS + ".!"))) is not None:
        return parse(digits)  # five, **2 million**: the number, not f*i*v*e
    if _bare_latex(text):  # \frac{14}{3}, \begin{pmatrix}...\end{pmatrix}, \text{Evelyn}
        wrapped = parse(f"${text.strip()}$")
        if _has_value(wrapped):
            return wrapped
    bare = bare_answer(text)
    if bare is None:
        listed = _listed(text, parse)
        found = listed if listed is not None else parse(text)
        if not found and (words := _WORDED.search(text)):  # The answer is Monday.
            if (digits := spelled_number(words.group("words"))) is not None:
                return parse(digits)  # The answer is five.
            return parse(f"$\\text{{{words.group('words')}}}$")
        return found
    raw = parse(bare)
    if raw and isinstance(raw[-1], str) and _compact(raw[-1]) == _compact(bare):
        if _DIGIT_COMMA.search(bare):  # 1,22 or {1, 22}: both readings count
            return raw + parse(f"${_as_latex(bare)}$")
        return raw
    return parse(f"${_as_latex(bare)}$") or raw or parse(text)


def _stated_line(text: str) -> str | None:
    """The answer the last statement in ``text`` gives on its own line (``Answer: 12``,
    ``The answer is $\\frac{1}{2}$.``, ``#### 12``, ``Réponse : 12``, ``答案：12``, or the
    line under a ``Final Answer`` heading): a verification or an explanation after a
    stated answer is not the answer, though math-verify would read its last formula, and
    the last statement is (``Answer: 12``, then ``Actually the answer is $13$.``). None
    when the text holds a box (math-verify reads the last box first), states nothing, or
    the line holds more than a formula (a sentence: ``12 when n = 3``); the line's units
    (``12 apples``) and a closing full stop are not part of it."""
    if "box" in text:
        return None
    stated = last_statement(text)
    if stated is None or _RUNNING.search(stated.group()):
        return None
    start = stated.end()
    end = text.find("\n", start)
    if end >= 0 and not text[start:end].strip():  # a heading: the answer is the line below
        start = len(text) - len(text[start:].lstrip())
        end = text.find("\n", start)
    line = text[start : end if end >= 0 else None].strip(_EMPHASIS + ":")
    line = line.rstrip(".!。！").strip(_EMPHASIS)
    if (digits := spelled_number(line)) is not None:
        return digits  # 2.5 million: a scale word, not a unit
    line = _UNIT_WORDS.sub("", line)
    if _formula(line) or _ONE_FORMULA.fullmatch(line):
        return line
    return None


#: a running total or result, stated on the way (``The total is x+4x = 100``, then ``A:
#: 80``): not the final answer
_RUNNING = re.compile(r"(?i)\b(?:result|total)\b")
#: up to two words closing a stated number: its units (``12 apples``, ``5 cm``)
_UNIT_WORDS = re.compile(r"(?<=[\d}$)])(?:[ \t]+[A-Za-z]+){1,2}\Z")
#: one formula in inline math, alone: ``$\frac{1}{2}$``, ``\(x = 3\)``
_ONE_FORMULA = re.compile(r"(?<!\\)\$[^$\n]+(?<!\\)\$|\\\((?:(?!\\\)).)+\\\)")


#: an answer stated in a few words closing the text (``The answer is Monday.``), read as
#: ``\\text{Monday}`` when nothing else is found, as a dataset's text target is written
_WORDED = re.compile(
    r"(?i)\b(?:answer|result|solution)\s*(?:is\b|:)[\s*_]*"
    r"(?P<words>[A-Za-z][A-Za-z'’-]*(?:[ \t]+[A-Za-z][A-Za-z'’-]*){0,3})[\s*_.!]*\Z"
)
#: a comma between digits: a decimal comma (math-verify's plain reading) or a list
_DIGIT_COMMA = re.compile(r"\d,\d")
#: a short line listing values: ``19, 46, and 82``, ``(11,7) or (7,11)``, ``AB=4, CD=5``
_LISTING = re.compile(r"\A[^\n.;!?]{0,80}\d[^\n.;!?]*(?:,|\bor\b|\band\b)[^\n.;!?]*\d[^\n.;!?]*\Z")


def _listed(text: str, parse: Any) -> list[Any] | None:
    """The values a short line lists (``19, 46, and 82`` is {19, 46, 82}), read as LaTeX
    when that gives a set, tuple or interval; None otherwise (the plain reading decides)."""
    import sympy

    line = text.strip()
    if not _LISTING.match(line):
        return None
    wrapped = parse(f"${_as_latex(line)}$")
    containers = (sympy.Set, sympy.Tuple, sympy.FiniteSet)
    if wrapped and isinstance(wrapped[0], containers):
        return wrapped
    return None


#: math delimiters math-verify's extraction looks for: ``$`` (not an escaped ``\\$``),
#: ``\\(``, ``\\[`` or a box
_MATH_DELIMITED = re.compile(r"(?<!\\)\$|\\\(|\\\[|\\(?:boxed|fbox)\b")
#: LaTeX markup: a command (not spacing alone) or a braced super- or subscript
_LATEX = re.compile(r"\\[A-Za-z]{2,}|[\^_]\{")
#: what a LaTeX command and its text argument leave out of a prose check
_COMMANDS = re.compile(r"\\(?:text\w*|mathrm|operatorname|mbox)\s*\{[^{}]*\}|\\[A-Za-z]+")


def _bare_latex(text: str) -> bool:
    """True for one line of LaTeX written without math delimiters (a dataset's target such
    as ``\\frac{14}{3}``, ``\\begin{pmatrix}1 & 0\\\\0 & 1\\end{pmatrix}``,
    ``\\text{Evelyn}``, ``S_{n}=7``): read as the LaTeX it is, on either side. Prose
    (two words in a row outside commands) is not."""
    text = text.strip()
    if not text or len(text) > 400 or "\n" in text or _MATH_DELIMITED.search(text):
        return False
    if not _LATEX.search(text):
        return False
    return re.search(r"[A-Za-z]{2,}[ \t]+[A-Za-z]{2,}", _COMMANDS.sub(" ", text)) is None


def _has_value(parsed: list[Any]) -> bool:
    """True when a parse holds a SymPy value that is a number or expression (not only the
    matched text, and not ``nan`` or complex infinity)."""
    import sympy

    return any(not isinstance(p, str) and p not in (sympy.nan, sympy.zoo) for p in parsed)


def _named(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _shown(parsed: list[Any]) -> list[str] | None:
    """math-verify's parse ([sympy value, source text]) as short strings."""
    return [str(p)[:_SHOWN] for p in parsed] if parsed else None


def _error(detail: dict[str, Any], reason: str, message: str) -> Score:
    return scorer_error(detail, reason, message[:_SHOWN])
