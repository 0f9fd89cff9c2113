"""Finding the answer number in a model's response, and what rule found it.

Rules, in priority order (the first that applies decides, and is recorded):

1. ``boxed``: the last ``\\boxed{...}`` or ``\\fbox{...}`` (braces balanced) holds the
   declared answer; its first number is the answer, whatever numbers come after it (a
   check line, say). A box without a number is an answer without a number: it is never
   passed over for a number elsewhere.
2. ``marker``: the first number after the last occurrence of the spec's ``marker``.
3. ``last``: the last number in the response.

A number is one of (each may carry a sign ``-``, ``+`` or ``\u2212`` and a currency sign
``$ € £ ¥ ₹``, ``\\$`` in LaTeX):

- a LaTeX fraction ``\\frac{a}{b}``, ``\\dfrac``, ``\\tfrac``: the value a / b;
- scientific notation: ``1e3``, ``2.5E-4``, and ``3×10^5`` when unambiguous (the
  ``10^k`` must be written: ``×``, ``x``, ``*``, ``·``, ``\\times`` or ``\\cdot``, then
  ``10^k``, ``10^{k}``, ``10**k`` or superscript digits ``10⁵``);
- a plain fraction ``a/b`` of integers (not part of a date such as ``12/25/2023``);
- a decimal with optional thousands separators (``1,234.5``; a trailing period as in
  ``18.`` ends a sentence; the Arabic decimal separator ``٫`` is a decimal point).

A number may touch letters of any script except the ASCII letters of a word or a variable
(``答案是42``, ``ответ42``, ``42ريال``, ``42kg`` are found; ``x2`` and ``H2O`` are not),
and digits of any script count (full-width ``４２``, Arabic-Indic ``٤٢``).

A number followed by ``%``, ``％``, ``\\%``, ``percent`` or ``per cent`` is a percentage,
and ``percent`` policy decides its value: ``as_number`` (25% is 25, the default),
``as_fraction`` (25% is 0.25), or ``strict`` (the value is 25, but a percentage matches
only a percentage target and a plain number only a plain target).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["Extraction", "PercentPolicy", "find_answer", "find_numbers", "number_value"]

PercentPolicy = Literal["as_number", "as_fraction", "strict"]
Rule = Literal["boxed", "marker", "last"]

_SIGN = r"[-+\u2212]"
_DEC = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:[.\u066b]\d+)?|\.\d+"
_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+")
_NUMBER = re.compile(
    # not inside a number, an ASCII word, or a date / path such as 12/25
    r"(?<![0-9A-Za-z_.\d/])"
    rf"(?P<sign>{_SIGN})?[ \t]?(?:[$€£¥₹]|\\\$)?[ \t]?"
    r"(?:"
    r"\\[dt]?frac\s*\{\s*(?P<fn>" + _SIGN + r"?\s?(?:" + _DEC + r"))\s*\}"
    r"\s*\{\s*(?P<fd>" + _SIGN + r"?\s?(?:" + _DEC + r"))\s*\}"
    r"|(?P<mant>" + _DEC + r")[ \t]*(?:\\times|\\cdot|[×x*·])[ \t]*10[ \t]*"
    r"(?:\^[ \t]*\{?[ \t]*(?P<exp>" + _SIGN + r"?\d+)[ \t]*\}?"
    r"|\*\*[ \t]*(?P<exp2>" + _SIGN + r"?\d+)"
    r"|(?P<sup>[⁻⁺]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+))"
    r"|(?P<pn>\d+)[ \t]?/[ \t]?(?P<pd>\d+)(?!\d)(?![ \t]?/[ \t]?\d)(?![.,]\d)"
    r"|(?P<num>" + _DEC + r")(?:[eE](?P<e>[-+]?\d+))?"
    r")"
    r"(?P<pct>[ \t]?(?:[%％]|\\%|percent\b|per[ \t]cent\b))?"
)
_BOX = re.compile(r"\\(?:boxed|fbox)\s*(?=\{)|\\boxed[ \t]+(?=\S)")


@dataclass(frozen=True, slots=True)
class Extraction:
    """What :func:`find_answer` found.

    Attributes:
        value: the number (percent policy applied), None when no number was found or the
            found one has no value (a zero denominator).
        text: the matched text, None when nothing was found.
        rule: ``boxed``, ``marker`` or ``last``: which rule found it (None: none found).
        percent: the number was written as a percentage.
        marker_found: the marker occurs in the text (None when no marker was given).
        reason: why there is no value, or None.
    """

    value: float | None
    text: str | None
    rule: Rule | None
    percent: bool = False
    marker_found: bool | None = None
    reason: str | None = None


def number_value(m: re.Match[str], percent: PercentPolicy = "as_number") -> float | None:
    """The value of one :func:`find_numbers` match (None for a zero denominator)."""
    if m.group("fn") is not None:
        den = _decimal(m.group("fd"))
        value = None if den == 0 else _decimal(m.group("fn")) / den
    elif m.group("mant") is not None:
        exp = m.group("exp") or m.group("exp2") or m.group("sup").translate(_SUPERSCRIPTS)
        value = _decimal(m.group("mant")) * 10.0 ** int(exp.replace("\u2212", "-"))
    elif m.group("pn") is not None:
        den = int(m.group("pd"))
        value = None if den == 0 else int(m.group("pn")) / den
    else:
        value = _decimal(m.group("num"))
        if m.group("e") is not None:
            value *= 10.0 ** int(m.group("e"))
    if value is None:
        return None
    if m.group("sign") in ("-", "\u2212"):
        value = -value
    if m.group("pct") and percent == "as_fraction":
        value /= 100
    return value


def _decimal(text: str) -> float:
    text = text.replace(" ", "").replace(",", "").replace("\u2212", "-").replace("\u066b", ".")
    return float(text)


def find_numbers(text: str, start: int = 0, end: int | None = None) -> list[re.Match[str]]:
    """Every number in ``text[start:end]``, in order (see the module docstring)."""
    return list(_NUMBER.finditer(text, start, len(text) if end is None else end))


def _boxed_content(text: str) -> tuple[int, int] | None:
    """(start, end) of the last box's content, braces balanced; None without a box."""
    last = None
    for last in _BOX.finditer(text):  # noqa: B007 - the last box is the answer
        pass
    if last is None:
        return None
    i = last.end()
    if i >= len(text) or text[i] != "{":  # \boxed 5: the next token
        m = re.compile(r"\S+").match(text, i)
        return (i, m.end()) if m else None
    depth = 0
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return i + 1, j
    return i + 1, len(text)  # an unclosed box runs to the end


def find_answer(
    text: str, marker: str | None = None, percent: PercentPolicy = "as_number"
) -> Extraction:
    """Find the answer number in ``text`` by the rules of the module docstring."""
    marker_found = None if not marker else marker in text
    box = _boxed_content(text)
    if box is not None:
        found = find_numbers(text, *box)
        if not found:
            content = text[box[0] : box[1]].strip()
            return Extraction(
                None, content, "boxed", False, marker_found, "the boxed answer has no number"
            )
        return _extraction(found[0], "boxed", percent, marker_found)
    if marker and marker_found:
        found = find_numbers(text, text.rfind(marker) + len(marker))
        if found:
            return _extraction(found[0], "marker", percent, marker_found)
    found = find_numbers(text)
    if not found:
        return Extraction(None, None, None, False, marker_found, "no number in the response")
    return _extraction(found[-1], "last", percent, marker_found)


def _extraction(
    m: re.Match[str], rule: Rule, percent: PercentPolicy, marker_found: bool | None
) -> Extraction:
    value = number_value(m, percent)
    reason = "zero denominator" if value is None else None
    return Extraction(value, m.group(0).strip(), rule, bool(m.group("pct")), marker_found, reason)
