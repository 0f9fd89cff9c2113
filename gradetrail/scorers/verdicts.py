"""Reading a judge's verdict from its reply, and reducing several verdicts to one score.

Three rules, chosen by the spec's ``parse.kind`` (see :mod:`gradetrail.spec`):

- ``grade``: the last whole-token ``GRADE: C`` (marker and grades configurable, matched
  case-insensitively; markdown bold around the marker or grade is allowed), mapped through
  ``grades`` (default C 1, P 0.5, I 0). The last ``GRADE:`` decides: followed by
  anything else (``final grade: A`` outside the table, ``GRADE: I'm not sure``, ``C-``) it
  takes the earlier grades back, and two grades offered at once (``C/I``, ``A or B``) are
  no verdict either. (A ``pattern`` of the user's own says alone what a verdict is.)
- ``numeric``: the last ``SCORE: 7`` or ``SCORE: 7/10`` (a later ``SCORE:`` without a
  number takes it back); else a reply that is only a number or fraction; else the last
  fraction whose denominator is the scale's ``max``. ``7,5`` is 7.5 (a decimal comma);
  ``1,000`` is no score.
  ``x`` on a ``min``..``max`` scale becomes ``(x - min) / (max - min)``; a fraction
  ``x/d`` is read on the scale ``min``..``d``. Out-of-scale numbers are failures, never
  clipped.
- ``json``: the whole reply when it is a JSON object, else the last object in it, in a
  fenced code block or not, that has the ``field`` path: a number (normalized like
  ``numeric``), a boolean, or a string looked up in ``grades``.

A ``MARKER:`` right after an opening quotation mark (``'SCORE: 10'``, ``"GRADE: C"``) is
the judge quoting the graded response or its rubric: read only when the reply has no
verdict outside quotation marks.

A reply no rule can read raises :class:`VerdictError`; the judge scorer records it as a
``judge_error`` with a truncated copy of the reply, never as a score of 0.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from gradetrail.spec import GradeParse, JsonParse, NumericParse, PairwiseParse
from gradetrail.stats.reducers import reduce_scores

__all__ = [
    "Verdict",
    "VerdictError",
    "VerdictParser",
    "make_parser",
    "pairwise_parser",
    "reduce_verdicts",
    "truncate_reply",
]

#: characters of a judge reply kept in result rows (head and tail)
REPLY_LIMIT = 2000

#: a number as judges write scores: ``7``, ``7.5``, and ``7,5`` with a decimal comma (never
#: ``1,000``: a comma before three digits groups thousands, and is no score)
_NUM = r"[-+]?\d+(?:\.\d+|,\d{1,2}(?!\d))?"
_BOLD = r"[*_]{0,2}"


class VerdictError(ValueError):
    """A judge reply holds no verdict the parse rule can read; the message says what was
    expected."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """One parsed verdict.

    Attributes:
        value: the score in [0, 1].
        grade: the verdict as the judge wrote it (``C``, ``7/10``, ``true``...).
    """

    value: float
    grade: str


#: reply text -> verdict; raises VerdictError
VerdictParser = Callable[[str], Verdict]


def truncate_reply(text: str, limit: int = REPLY_LIMIT) -> str:
    """``text`` if it has at most ``limit`` characters, else its head and tail (where
    verdicts usually are) around a marker naming how many characters were left out."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters omitted ...]\n{text[-half:]}"


#: what may not touch a grade's end: a letter (``Correct``), ``+`` or ``-`` (``C-``, ``B+``),
#: a contraction (``I'm``, ``I'd``; a possessive, ``A's``, still names A) or decimals
#: (``0.5`` is not the grade ``0``): the grade is then another word, not one of the table's
_TOKEN_END = r"(?![\w+\-]|['\u2019](?:m|d|ll|ve|re)(?!\w)|[.,]\d)"


def _alternatives(tokens: list[str]) -> str:
    return "|".join(re.escape(t) for t in sorted(tokens, key=len, reverse=True))


def _marker_regex(marker: str) -> re.Pattern[str]:
    """Every ``MARKER:`` in a reply (a whole word, markdown bold allowed)."""
    return re.compile(rf"(?<!\w){_BOLD}{re.escape(marker)}{_BOLD}\s*:", re.IGNORECASE)


def _token_regex(marker: str, tokens: list[str]) -> re.Pattern[str]:
    return re.compile(
        rf"(?<!\w){_BOLD}{re.escape(marker)}{_BOLD}\s*:\s*{_BOLD}\s*({_alternatives(tokens)})"
        + _TOKEN_END,
        re.IGNORECASE,
    )


def _either_regex(tokens: list[str]) -> re.Pattern[str]:
    """A second grade offered beside the first (``C/I``, ``A or B``, ``P & C``)."""
    return re.compile(
        rf"{_BOLD}\s*(?:/|\\|&|\bor\b|\band\b)\s*{_BOLD}\s*(?:{_alternatives(tokens)})"
        + _TOKEN_END,
        re.IGNORECASE,
    )


def _final(end: int, text: str, markers: re.Pattern[str], marker: str, what: str) -> None:
    """The last well-formed ``MARKER: value`` (ending at ``end``; 0 when there is none)
    must be the reply's last word on the matter: a later ``MARKER:`` followed by something
    else (``final grade: A`` outside the table, ``SCORE: N/A``, ``GRADE: I'm not sure``)
    takes it back.

    Raises:
        VerdictError: a later marker holds no readable verdict, quoting what follows it.
    """
    later, _ = _last_matches(markers, text)  # a quoted marker is a mention, never a verdict
    if later is not None and later.start() >= end:
        shown = text[later.end() :].strip()[:30]
        raise VerdictError(
            f"the last {marker!r} in the judge reply is followed by {shown!r}, not a {what}"
        )


def _last_match(regex: re.Pattern[str], text: str) -> re.Match[str] | None:
    last = None
    for last in regex.finditer(text):  # noqa: B007 - the last match wins
        pass
    return last


#: opening quotation marks (and the backtick): a ``MARKER:`` right after one is quoted
_OPENING_QUOTES = frozenset("'\"`\u2018\u201c\u00ab")


def _last_matches(
    regex: re.Pattern[str], text: str
) -> tuple[re.Match[str] | None, re.Match[str] | None]:
    """The last match of ``regex`` in ``text`` outside quotation marks, and the last one
    right after an opening quotation mark (``'SCORE: 10'``, ``"GRADE: I"``): a judge
    quoting the graded response or its rubric's examples after its own verdict."""
    plain = quoted = None
    for m in regex.finditer(text):
        if _quoted(m, text):
            quoted = m
        else:
            plain = m
    return plain, quoted


def _quoted(m: re.Match[str], text: str) -> bool:
    """``m`` starts right after an opening quotation mark."""
    return m.start() > 0 and text[m.start() - 1] in _OPENING_QUOTES


def _last_verdict(regex: re.Pattern[str], text: str) -> re.Match[str] | None:
    """The last verdict outside quotation marks; a quoted one only when there is no other
    (a judge that put its only verdict in quotes)."""
    plain, quoted = _last_matches(regex, text)
    return plain or quoted


def _lookup_parser(
    marker: str, table: dict[str, float], pattern: str | None, what: str
) -> VerdictParser:
    folded = {k.casefold(): v for k, v in table.items()}
    regex = re.compile(pattern, re.IGNORECASE) if pattern else _token_regex(marker, list(table))
    markers, either = _marker_regex(marker), _either_regex(list(table))
    expected = pattern or f"{marker}: {'|'.join(table)}"

    def parse(text: str) -> Verdict:
        m = _last_match(regex, text) if pattern else _last_verdict(regex, text)
        if pattern is None:  # a pattern of the user's own says what a verdict is
            _final(0 if m is None else m.end(), text, markers, marker, what)
        if m is None:
            raise VerdictError(f"no {what} matching {expected!r} in the judge reply")
        if pattern is None:
            also = either.match(text, m.end())
            if also is not None:
                offered = text[m.start(1) : also.end()].strip()
                raise VerdictError(f"{what} {offered!r} names more than one")
        token = (m.group(1) or "").strip()
        if token.casefold() not in folded:
            known = ", ".join(table)
            raise VerdictError(f"{what} {token!r} is not one of {known}")
        return Verdict(folded[token.casefold()], token)

    return parse


def _normalize(x: float, low: float, high: float, shown: str) -> float:
    if not low <= x <= high:
        raise VerdictError(f"score {shown} is outside the scale {low:g}..{high:g}")
    return (x - low) / (high - low)


def _number(text: str) -> float:
    """A number matched by ``_NUM`` (a decimal comma read as a point)."""
    return float(text.replace(",", "."))


def _numeric_parser(spec: NumericParse) -> VerdictParser:
    marked = re.compile(
        rf"(?<!\w){_BOLD}{re.escape(spec.marker)}{_BOLD}\s*:\s*{_BOLD}\s*"
        rf"({_NUM})(?:\s*/\s*({_NUM}))?(?!\w|[.,]\d)",
        re.IGNORECASE,
    )
    alone = re.compile(rf"\s*({_NUM})(?:\s*/\s*({_NUM}))?\s*\.?\s*")
    fraction = re.compile(rf"(?<![\w./,])({_NUM})\s*/\s*({_NUM})(?![\w/]|[.,]\d)")
    markers = _marker_regex(spec.marker)

    def read(m: re.Match[str]) -> Verdict:
        x = _number(m.group(1))
        high = spec.max if m.group(2) is None else _number(m.group(2))
        if high <= spec.min:
            raise VerdictError(f"scale {m.group(0).strip()!r} ends at or below min {spec.min:g}")
        grade = m.group(1) if m.group(2) is None else f"{m.group(1)}/{m.group(2)}"
        return Verdict(_normalize(x, spec.min, high, grade), grade)

    def parse(text: str) -> Verdict:
        m = _last_verdict(marked, text)
        if m is not None:
            _final(m.end(), text, markers, spec.marker, "score")
            return read(m)
        m = alone.fullmatch(text)
        if m is not None:
            return read(m)
        on_scale = [m for m in fraction.finditer(text) if _number(m.group(2)) == spec.max]
        if on_scale:  # the last one outside quotation marks, as a marked score
            return read(([m for m in on_scale if not _quoted(m, text)] or on_scale)[-1])
        raise VerdictError(
            f"no score matching '{spec.marker}: N' or 'N/{spec.max:g}' in the judge reply"
        )

    return parse


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[^\n]*\n(.*?)```", re.DOTALL)


def _json_objects(text: str) -> list[dict[str, Any]]:
    """Candidate JSON objects in reading order of preference: the whole reply, then the
    objects in it, fenced or not, last first (a fenced block counts where it starts): a
    judge quoting the graded response's JSON in a fence before its own verdict keeps
    its own verdict, as the last verdict wins in every rule."""
    try:
        whole = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested past the limit
        whole = None
    if isinstance(whole, dict):
        return [whole]
    placed: list[tuple[int, dict[str, Any]]] = []
    fences: list[tuple[int, int]] = []
    for m in _FENCE.finditer(text):
        fences.append((m.start(), m.end()))
        try:
            value = json.loads(m.group(2))
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            placed.append((m.start(), value))
    decoder = json.JSONDecoder()
    pos = text.find("{")
    while pos >= 0:
        try:
            value, end = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):
            pos = text.find("{", pos + 1)
            continue
        if isinstance(value, dict) and not any(a <= pos < b for a, b in fences):
            placed.append((pos, value))
        pos = text.find("{", end)
    return [value for _, value in sorted(placed, key=lambda p: p[0], reverse=True)]


def _json_parser(spec: JsonParse) -> VerdictParser:
    path = spec.field.split(".")
    folded = {k.casefold(): v for k, v in spec.grades.items()}

    def field_of(obj: dict[str, Any]) -> tuple[bool, Any]:
        value: Any = obj
        for part in path:
            if not isinstance(value, dict) or part not in value:
                return False, None
            value = value[part]
        return True, value

    def parse(text: str) -> Verdict:
        objects = _json_objects(text)
        if not objects:
            raise VerdictError("no JSON object in the judge reply")
        for obj in objects:
            present, value = field_of(obj)
            if present:
                return _json_value(value, spec, folded)
        raise VerdictError(f"no JSON object in the judge reply has the field {spec.field!r}")

    return parse


def _json_value(value: Any, spec: JsonParse, folded: dict[str, float]) -> Verdict:
    if isinstance(value, bool):
        return Verdict(float(value), "true" if value else "false")
    if isinstance(value, int | float):
        text = str(value)  # as the judge wrote it: 1.0000000001 is not "1"
        shown = text if len(text) <= 24 else f"{text[:20]}... ({len(text)} characters)"
        try:
            x = float(value)
        except OverflowError:  # an integer past the float range: outside any scale
            x = math.inf
        return Verdict(_normalize(x, spec.min, spec.max, shown), f"{value:g}")
    if isinstance(value, str) and value.strip().casefold() in folded:
        return Verdict(folded[value.strip().casefold()], value.strip())
    known = ", ".join(spec.grades)
    raise VerdictError(
        f"JSON field {spec.field!r} is {value!r}; expected a number, a boolean or one of {known}"
    )


def make_parser(spec: GradeParse | NumericParse | JsonParse) -> VerdictParser:
    """The verdict parser a judge scorer's ``parse`` section describes.

    Returns:
        A function reply text -> :class:`Verdict` (value in [0, 1]) that raises
        :class:`VerdictError` when the reply holds no readable verdict.
    """
    if isinstance(spec, NumericParse):
        return _numeric_parser(spec)
    if isinstance(spec, JsonParse):
        return _json_parser(spec)
    return _lookup_parser(spec.marker, spec.grades, spec.pattern, "grade")


#: a pairwise verdict's value: the probability that the *first* shown response wins
_POSITION_VALUE = {"first": 1.0, "tie": 0.5, "second": 0.0}


def pairwise_parser(spec: PairwiseParse) -> VerdictParser:
    """The parser of pairwise verdicts: value 1 when the first shown response
    (``response_a``) wins, 0.5 for a tie, 0 when the second wins."""
    table = {label: _POSITION_VALUE[which] for label, which in spec.verdicts.items()}
    return _lookup_parser(spec.marker, table, spec.pattern, "verdict")


def reduce_verdicts(values: list[float], how: Literal["mean", "majority"]) -> float:
    """One score from a sample's k verdicts: their mean, or the majority verdict (a tie
    goes to the lowest tied score, as :func:`gradetrail.stats.reducers.reduce_scores`).

    Raises:
        ValueError: no verdicts.
    """
    if not values:
        raise ValueError("no verdicts to reduce")
    reduced = reduce_scores(values, how)
    assert reduced is not None  # non-empty input always reduces
    return reduced
