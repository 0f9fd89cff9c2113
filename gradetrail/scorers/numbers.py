"""Finding the answer number in a model's response, and what rule found it.

Rules, in priority order (the first that applies decides, and is recorded):

1. ``boxed``: the last ``\\boxed{...}`` or ``\\fbox{...}`` (braces balanced) holds the
   declared answer, whatever numbers come after it (a check line, say). Its content must
   be one number, optionally with units, words or a ``x =`` before it (``\\boxed{18
   \\text{ cm}^2}``, ``\\boxed{x = 18}``); a box holding an expression (``5\\sqrt{2}``,
   ``2\\pi``, ``3 + 4``, ``2^{n}``) or no number is an answer without a number, with its
   reason: it is never passed over for a number elsewhere, nor read as its first number.
2. ``marker``: the first number after the last occurrence of the spec's ``marker``; but
   when the numbers from that one up to the last ``=`` (or ``≈``) of its line are joined
   by operators only (``A: 6 * 3 = 18``, ``A: (12 + 6) = 18``, ``Answer: 10-3 = 7``),
   the number after that sign, the expression's result, as a careful grader reads it
   (and lm-evaluation-harness's GSM8K ``flexible-extract``, which takes the last number);
   units beside its numbers and operators in words are part of it (``A: 18 eggs × $2 =
   $36``, ``A: 3 times 4 = 12``), but ``A: 12, check: 12 + 6 = 18`` still declares 12.
3. ``stated``: the first number right after the last answer stated in words (``the
   answer is 7``, ``Final answer: 7``, ``**Answer**: 7``, ``Final result: 7``, ``#### 7``
   alone on its line, an ``Answer`` or ``Final Answer`` heading with the number below it
   (``\\[ 7 \\]`` too), ``答案是7``,
   simple-evals' MGSM prefixes ``Antwort: 7``, ``Réponse : 7``, ``Ответ: 7``, ``答え：7``,
   ``Jibu: 7``, ``উত্তর: 7``..., ``La respuesta es 7``, ``Die Antwort ist 7``,
   ``<answer>7</answer>``, ``Answer - 7``, a paragraph that is only a bold number ``**7**``,
   a JSON reply's ``"answer": 7`` or
   ``"final_answer": 7``; not the first item of a numbered list opening below it,
   ``Answer:`` then ``1. ...``, ``2. ...``), whatever numbers follow it (``Note:
   this took 3 steps``); words between the statement and a number (``the answer is that
   3 boxes ...``) state none, and a hypothetical one after it (``If the question meant 5
   rows, the answer would be 25``) is a note, not the answer.

A correction right after the marker's or the statement's number gives the answer instead
(``The answer is 20... no, 23.``, ``A: 20. Wait, 23``), unless its sentence goes on
(``Actually, 3 of them were broken`` corrects nothing).
4. ``last``: the last number in the response, passing over a number denied (``3 apples,
   not 4``, ``rather than 4``, ``instead of 4``); when the last number is a percentage's
   base (``about 20% of 100 people``), the percentage; when it restates the one before
   in a closing aside (``It takes 2.5 hours (150 minutes).``), the one before; when the
   last two close a range in words (``between 10 and 12``), no number.

GSM8K's calculator annotations (``<<9*2=18>>``) are not the model's text and are passed
over. A number in English words where an answer is stated (``The answer is seven.``,
``Answer: twenty-five``, ``one hundred and five``) or as the whole reply (``Seven.``) is
that number; a word opening a phrase (``the answer is one of ...``) is not; ``negative
four`` and ``minus 4`` there are -4.

Unicode vulgar fractions are fractions (``½`` 0.5, ``2½`` 2.5, ``-½`` -0.5), and a number
in CJK numerals is read where it states an answer (the whole text, or after ``答案是``,
``等于``, ``是``...: ``答案是三`` is 3, ``一百零五`` 105), never inside a word (``三角形``).

Two different numbers offered as alternatives (``A: 18 or 19``, ``either 18 or 19``,
``18, 19 or 20``, ``x = -3 or x = 3``; after the marker, or as the last two numbers) are
ambiguous: no number, and the reason says so, never a guess (as the choice scorer treats
``B or C``).
The same value twice (``18 (or 18.0)``) is one answer, as is a percentage beside the
fraction it is (``0.25, or 25%``: the first as written); a list without ``or``
(``1,2,3``) is not alternatives; ``18 / 19`` is the fraction 18/19.

A number is one of (each may carry a sign ``-``, ``+`` or ``\u2212`` and a currency sign
``$ € £ ¥ ₹``, ``\\$`` in LaTeX):

- a LaTeX fraction ``\\frac{a}{b}``, ``\\dfrac``, ``\\tfrac`` (``\\frac34`` too): a / b;
- a mixed number: an integer, then a proper fraction (``2 1/2``, ``2\\frac{1}{2}``): 2.5;
  before ``%`` one percentage (``33 1/3%``, ``33⅓%``);
- scientific notation: ``1e3``, ``2.5E-4``, and ``3×10^5`` when unambiguous (the
  ``10^k`` must be written: ``×``, ``x``, ``*``, ``·``, ``\\times`` or ``\\cdot``, then
  ``10^k``, ``10^{k}``, ``10**k`` or superscript digits ``10⁵``);
- a power, a number to a signed integer exponent: ``10^6``, ``10^{6}``, ``10**6``,
  ``10⁶``, ``2^10`` (1024), ``10^-3``, ``2.5^2``;
- a plain fraction ``a/b`` of integers (``12/25``; not part of a date such as ``12/25/2023``);
- a decimal with optional thousands separators, as written in any locale: ``1,234.5``,
  ``1{,}234`` and ``1\\,234`` (LaTeX), ``1.234.567`` and ``1.234,5`` (German),
  ``1 234 567``, ``1 000`` and ``1\u202f234,5`` (French: a no-break, narrow or thin
  space, or a plain space, not in a list ``1 2 300`` nor before a compound ``3
  120-page``), ``1'234'567`` (Swiss), ``12,34,567`` (Indian), ``3,5`` (a decimal
  comma, unless three digits follow it: ``1,234`` is one thousand two hundred
  thirty-four); a trailing period as in ``18.`` ends a sentence;
- a number then a scale word, ``thousand``, ``million``, ``billion`` or ``trillion``
  (any case, an ``s`` allowed): ``2.5 million`` is 2,500,000, as a careful grader reads
  it. The suffixes ``k``, ``M``, ``B``, ``bn``, ``mn`` multiply only after a currency sign
  (``$5k`` is 5,000, ``$2.5M`` 2,500,000): without one they are as often units (``a 5k
  race``, ``5M`` molar, ``5B`` a pencil), so ``5k`` stays 5.

No number raises: one past the float range (``1e400``, ``3×10^400``, ``10^99999``, a
400-digit integer) is ±inf, as ``float('1e400')`` is, and one too small is 0.0; an
exponent is never computed digit by digit, and an integer past Python's 4,300-digit
``int`` limit is read only as a float. An integer a float may not hold exactly (16 or
more digits, or a power or scale word at 2**53 or more) keeps its exact value
(:attr:`Number.exact`), which the numeric scorer compares.

Digits of any script count (full-width ``４２``, Arabic-Indic ``٤٢``, Devanagari ``४२``),
and so do full-width signs and separators (``－５``, ``３．５``, ``４，２００``) and the
Arabic decimal, thousands and percent signs (``٣٫٥``, ``٤٬٢٠٠``, ``٪``).

A number may touch letters of any script except the ASCII letters of a word or a variable
(``答案是42``, ``ответ42``, ``42ريال``, ``42kg`` are found; ``x2`` and ``H2O`` are not).

Written with digits but not one number, and passed over whole (never read as its first or
last group): a date (``12/25/2023``, ``2023-12-25``, ``25.12.2023``, ``December 25, 2023``,
``25 Dec 2023``, ``3rd of May``: month names capitalized), a time or ratio
(``10:30``, ``10:30 pm``, ``16:9``), a version or address (``1.2.3``, ``192.168.0.1``; but
``1.234.567`` is German thousands), a phone number (``555-123-4567``, ``(555) 123-4567``,
``+44 20 7946 0958``), a range or unspaced difference (``3-5``, ``3–5``, ``$10-$20``; a
spaced ``3 - 5`` is arithmetic and ``5-3 = 2`` still ends in 2). lm-evaluation-harness's
GSM8K ``flexible-extract`` regex reads ``12/25/2023`` as 2023 and ``2023-12-25`` as -25,
and Inspect's ``match(numeric=True)`` compares a word token: neither has a view, so a
careful grader's is taken. When the declared answer (the box, or the first thing after
the marker) is one of them, there is no number and the reason names its kind (``the
answer 3-5 is a range (or a difference), not a number``); the ``last`` rule goes on to the
last real number.

A number followed by ``%`` (``％``, ``٪``, ``\\%``, after a space or a no-break space
too), ``percent`` or ``per cent`` (any case) is a percentage, and ``percent`` policy
decides its value: ``as_number`` (25% is 25, the default), ``as_fraction`` (25% is
0.25), or ``strict`` (the value is 25, but a percentage matches only a percentage target
and a plain number only a plain target).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal, localcontext
from typing import Literal

from gradetrail._util.lazyre import lazy_compile

__all__ = [
    "Extraction",
    "Number",
    "PercentPolicy",
    "find_answer",
    "find_numbers",
    "last_statement",
    "spelled_number",
]

PercentPolicy = Literal["as_number", "as_fraction", "strict"]
Rule = Literal["boxed", "marker", "stated", "last"]

#: one character for one (offsets are kept): full-width ASCII, the minus sign, Arabic
#: decimal / thousands / percent signs
_FOLD = {0xFF01 + i: 0x21 + i for i in range(94)} | {
    0x2212: "-",
    0x066B: ".",
    0x066C: ",",
    0x066A: "%",
}
_SPACES = "\u00a0\u202f\u2009"  # no-break, narrow no-break, thin space


def _groups(sep: str, least: int = 1) -> str:
    """Digits in groups of three after a first group of one to three, ``sep`` between."""
    s = re.escape(sep)
    return rf"(?!0{s})\d{{1,3}}(?:{s}\d{{3}}){{{least},}}(?!{s}?\d)"


_SEPARATED = "|".join(
    [
        rf"{_groups('.', 2)}(?:,\d+)?",  # 1.234.567(,5)
        r"\d{1,3}\.\d{3},\d+(?![.,]?\d)",  # 1.234,5
        *(rf"{_groups(c)}(?:[.,]\d+)?" for c in _SPACES),  # 1 234,5
        rf"{_groups(' ', 2)}(?:[.,]\d+)?",  # 1 234 567
        # 1 000, 12 500: one plain space and three digits (not in a list of numbers, not
        # a count before a compound: 3 120-page books)
        r"(?<!\d )(?<!\d,)(?!0 )\d{1,3} \d{3}(?![ ]?\d)(?![.,]\d)(?![-–])",
        *(rf"{_groups(c)}(?:\.\d+)?" for c in ("'", "’")),  # 1'234.5
        r"\d{1,2}(?:,\d{2})+,\d{3}(?!,?\d)(?:\.\d+)?",  # 12,34,567
        *(rf"{_groups(s)}(?:\.\d+)?" for s in (",", "{,}", ",\\!", "\\,")),  # 1,234.5
        r"(?<!\d,)(?:0,\d+|\d+,(?:\d{1,2}|\d{4,}))(?![.,]?\d)",  # 3,5 (a decimal comma)
    ]
)
#: a number as written in any locale; the separated forms are tried only where digits
#: are followed by a separator and a digit (most numbers are plain: fast)
_DEC = (
    r"(?:(?=\d+(?:[.,'’ " + _SPACES + r"]|\{,\}|,\\!|\\,)\d)(?:" + _SEPARATED + r")"
    r"|\d+(?:\.\d+)?|\.\d+)"
)
_SIGN = r"[-+]"
_ARG = r"\s*\{\s*(?P<%s>" + _SIGN + r"?\s?" + _DEC + r")\s*\}|(?P<%s1>\d)"
_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+")
#: a power's written exponent (``^{6}``, `` ** 6``, ``⁶``) to its signed digits
_EXPONENT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+", "^{}* \t")
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
#: month names and abbreviations, longest first (``September`` before ``Sept``, ``Sep``)
_MONTH_NAMES = sorted({*_MONTHS, "Sept", *(m[:3] for m in _MONTHS)}, key=lambda m: (-len(m), m))


#: a date with its month's name: ``December 25, 2023``, ``Dec. 25``, ``25 December 2023``,
#: ``3rd of May`` (month names capitalized, so ``5 may`` and ``5 marbles`` stay numbers)
_MONTH_DAY = (
    r"(?:" + "|".join(_MONTH_NAMES) + r")\.?[ \t]+\d{1,2}(?:st|nd|rd|th)?(?![\d.,]?\d)"
    r"(?:,?[ \t]+\d{4}(?!\d))?"
)
_DAY_MONTH = (
    r"\d{1,2}(?:st|nd|rd|th)?[ \t]+(?:of[ \t]+)?(?:"
    + "|".join(_MONTH_NAMES)
    + r")\b\.?(?:,?[ \t]+\d{4}(?!\d))?"
)
#: written with digits but not one number (each is matched whole, then passed over): a
#: date, a time or ratio, a version or address, a phone number, a range
_NOT_A_NUMBER = (
    r"(?=[\d(+$€£¥₹JFMASOND])(?P<skip>" + _MONTH_DAY + "|" + _DAY_MONTH + "|"
    r"\(\d{3}\)[ \t]?\d{3}[-. ]\d{4}(?!\d)"  # (555) 123-4567
    r"|(?!\+" + _groups(" ", 2) + r")\+\d{1,3}(?:[ .-]\d{1,4}){3,}(?![.,]?\d)"  # +1 555 123 4567
    r"|\d+(?:/\d+){2,}"  # 12/25/2023, 2023/12/25
    r"|\d+(?:-\d+){2,}"  # 2023-12-25, 555-123-4567
    r"|(?!" + _groups(".", 2) + r")\d+(?:\.\d+){2,}"  # 25.12.2023, 1.2.3, 192.168.1.1
    r"|\d+(?::\d+)+(?:[ \t]?(?i:[ap]\.?m\b\.?))?"  # 10:30, 10:30:15 pm, 3:2
    r"|(?:[$€£¥₹][ \t]?)?\d+(?:[.,]\d+)?%?(?:-|[ \t]?[–—][ \t]?)(?:[$€£¥₹][ \t]?)?"
    r"\d+(?:[.,]\d+)?(?![.,]?\d)%?"  # 3-5, 2.5–3.5, $10-$20, 5%-10%
    r")"
)
#: what follows a number where :data:`_NOT_A_NUMBER` begins instead: only there is it
#: tried, so a plain number pays one failed look ahead
_NOT_A_NUMBER_TAIL = (
    r"(?=[-/.:–— \tsnrt])(?:-(?:[$€£¥₹][ \t]?)?\d|/\d+/\d|\.\d|:\d|[–—]"
    r"|(?:st|nd|rd|th)?[ \t]++(?:[–—]|(?:of[ \t]+)?(?=[JFMASOND])(?:"
    + "|".join(_MONTH_NAMES)
    + r")\b)|(?=[ .]\d)(?:(?<=\+\d)|(?<=\+\d\d)|(?<=\+\d\d\d))(?:[ .-]\d{1,4}){3})"
)
_NUMBER = lazy_compile(
    # not inside a number, an ASCII word, or a date / path such as 12/25
    r"(?:(?<![0-9A-Za-z_.\d/])|(?=\\[dt]?frac))"
    r"(?=[-+$€£¥₹\\.\d(]|[JFMASOND][a-z]{2,8}+\.?[ \t]++\d)"  # fails fast
    r"(?:(?>"
    rf"(?P<sign>{_SIGN})?[ \t]?(?P<cur>[$€£¥₹]|\\\$)?[ \t]?"
    r"(?:"
    r"\\[dt]?frac\s*(?:" + _ARG % ("fn", "fn") + r")\s*(?:" + _ARG % ("fd", "fd") + r")"
    r"|(?P<mant>" + _DEC + r")[ \t]*(?:\\times|\\cdot|[×x*·])[ \t]*10[ \t]*"
    r"(?:\^[ \t]*\{?[ \t]*(?P<exp>" + _SIGN + r"?\d+)[ \t]*\}?"
    r"|\*\*[ \t]*(?P<exp2>" + _SIGN + r"?\d+)"
    r"|(?P<sup>[⁻⁺]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+))"
    r"|(?P<pn>\d+)[ \t]?/[ \t]?(?P<pd>\d+)(?!\d)(?![ \t]?/[ \t]?\d)(?![.,]\d)"
    r"|(?P<num>" + _DEC + r")"
    # an exponent, a power or a scale, each behind one look ahead (few groups: fast)
    r"(?:(?=[eE^*⁻⁺⁰¹²³⁴⁵⁶⁷⁸⁹kKMBbm]|[ \t][\^*tmbTMB])(?:[eE](?P<e>[-+]?\d+)"
    r"|(?P<pow>[ \t]?(?:\^[ \t]?(?:\{[ \t]*[-+]?\d+[ \t]*\}|[-+]?\d+)|\*\*[ \t]?[-+]?\d+)"
    r"|[⁻⁺]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+)"
    r"|(?P<scale>[ \t](?i:thousand|million|billion|trillion)s?\b"
    r"|(?(cur)(?:bn|mn|[kKMB])(?![A-Za-z])|(?!)))))?"
    r")"
    r"(?P<pct>[ \t" + _SPACES + r"]?(?:%|\\%|(?i:percent|per[ \t]cent)\b))?"
    r")(?!" + _NOT_A_NUMBER_TAIL + r")|" + _NOT_A_NUMBER + r")"
)
#: what may separate a mixed number's integer from its fraction
_MIXED_GAP = lazy_compile(r"[ \t]|\s*(?=\\[dt]?frac)|")
#: (``\\beginboxed{...}``, a model's slip for ``\\boxed``, is one too)
_BOX = lazy_compile(r"\\(?:(?:begin)?boxed|fbox)\s*(?=\{)|\\boxed[ \t]+(?=\S)")
#: around the one number of a box: words and units, LaTeX spacing, ``x =``
_BOX_WORDS = lazy_compile(
    r"\\(?:text|textrm|textbf|mathrm|mathbf|mbox|operatorname)\s*\{[^{}\d]*\}"
    r"(?:\s*\^\s*(?:\{\s*\d\s*\}|\d))?"  # a unit, and its power: \text{cm}^2
    r"|(?<=[A-Za-z])\s*\^\s*(?:\{\s*\d\s*\}|\d)"  # cm^2
    r"|\^\s*\{?\s*\\circ\s*\}?|\\(?:[,;:! ]|quad|qquad|left|right|displaystyle)"
    r"|[A-Za-z]\s*=|[{}()\[\]$%~.\s]|\\[%$]"
)
_NOT_ONE_NUMBER = lazy_compile(r"[\d^_+*/=]|\\[A-Za-z]+")


# read-only, but not frozen: one is built a row, and a frozen __init__ costs 5x
@dataclass(slots=True)
class Number:
    """One number :func:`find_numbers` found.

    Attributes:
        start, end: its span in the text.
        value: its value as written (a percentage's number, not divided by 100); None for
            a zero denominator.
        percent: it was written as a percentage.
        whole: an unsigned integer (it may start a mixed number).
        proper: an unsigned fraction below 1 (it may end a mixed number).
        exact: its exact integer value when it is written as an integer a float may not
            hold exactly (16 or more digits, or a power or scale word reaching 2**53),
            up to Python's 4,300-digit ``int`` limit; None otherwise (``value`` is exact).
    """

    start: int
    end: int
    value: float | None
    percent: bool = False
    whole: bool = False
    proper: bool = False
    exact: int | None = None

    def policy_value(self, percent: PercentPolicy) -> float | None:
        """The value under the percent policy (``as_fraction``: a percentage / 100)."""
        if self.value is not None and self.percent and percent == "as_fraction":
            return self.value / 100
        return self.value


# read-only, but not frozen: one is built a row, and a frozen __init__ costs 5x
@dataclass(slots=True)
class Extraction:
    """What :func:`find_answer` found.

    Attributes:
        value: the number (percent policy applied), None when no number was found or the
            found one has no value (a zero denominator, a box holding an expression).
        text: the matched text (a box's whole content when it is not one number), None
            when nothing was found.
        rule: ``boxed``, ``marker`` or ``last``: which rule found it (None: none found).
        percent: the number was written as a percentage.
        marker_found: the marker occurs in the text (None when no marker was given).
        reason: why there is no value, or None.
        exact: the number's exact integer value when a float may not hold it (see
            :attr:`Number.exact`), else None.
    """

    value: float | None
    text: str | None
    rule: Rule | None
    percent: bool = False
    marker_found: bool | None = None
    reason: str | None = None
    exact: int | None = None


#: the most digits :func:`int` reads (Python's ``sys.get_int_max_str_digits`` default: the
#: conversion is quadratic past it); a longer integer has no :attr:`Number.exact`
_INT_DIGITS = 4300
#: integers from here on may not be floats exactly
_FLOAT_EXACT = 2**53
#: fractions and negative powers are divided in decimal at this precision, then rounded
#: once to a float; no exponent of a number held in memory passes its bounds
_WIDE = Context(prec=40, Emax=MAX_EMAX, Emin=MIN_EMIN)
_SCALES = {"thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12}
_SUFFIXES = {"k": 10**3, "K": 10**3, "M": 10**6, "mn": 10**6, "B": 10**9, "bn": 10**9}


def _exact_digits(text: str) -> int | None:
    """The :attr:`Number.exact` of plain ASCII digits: ``int(text)`` for 16 to 4,300."""
    return int(text) if 15 < len(text) <= _INT_DIGITS else None


def _decimal(text: str) -> float:
    """The value of a :data:`_DEC` match (a sign before it allowed) in any locale; past
    the float range, ±inf (``float`` reads any length of digits)."""
    if text.isascii() and text.isdigit():  # plain digits, the common case: no separators
        return float(text)
    return float(_plain(text))


def _plain(text: str) -> str:
    """A :data:`_DEC` match (a sign before it allowed) as ASCII decimal text:
    ``1.234,5`` is ``1234.5``, ``-1 000`` is ``-1000``."""
    if text.isascii() and text.isdigit():
        return text
    negative = text.startswith("-")
    text = text.lstrip("+-").strip()
    for sep in ("{,}", ",\\!", "\\,", "'", "’", " ", *_SPACES):
        text = text.replace(sep, ",")
    if "," in text and "." in text:
        if text.rfind(",") > text.rfind("."):  # 1.234,5
            text = text.replace(".", "").replace(",", ".")
        else:  # 1,234.5
            text = text.replace(",", "")
    elif text.count(".") > 1:  # 1.234.567
        text = text.replace(".", "")
    elif "," in text:
        head, _, tail = text.rpartition(",")
        if len(tail) != 3 or head == "0":  # a decimal comma: 3,5 and 0,250
            text = head + "." + tail
        text = text.replace(",", "")
    return "-" + text if negative else text


def _arg(m: re.Match[str], name: str) -> str:
    return _plain(m.group(name) or m.group(name + "1"))


def _quotient(num: str, den: str) -> float | None:
    """``num / den`` of two :func:`_plain` texts, rounded once to a float (±inf or 0.0
    past its range, never an OverflowError); None for a zero denominator."""
    d = Decimal(den)
    if not d:
        return None
    with localcontext(_WIDE):
        return float(Decimal(num) / d)


def _power(base: str, exp: str) -> tuple[float | None, int | None]:
    """``base ** exp`` (a :func:`_plain` text to signed ASCII digits) and its
    :attr:`Number.exact`; a value past the float range is inf (or 0.0), never computed
    digit by digit; None for zero to a negative power."""
    negative, digits = exp.startswith("-"), exp.lstrip("+-")
    if not digits.strip("0"):  # anything to the power 0
        return 1.0, None
    b = Decimal(base)
    if b == 0 or b == 1:
        return (None, None) if b == 0 and negative else (float(b), None)
    if len(digits) > 7:  # past any float, either way
        return (math.inf if (b > 1) != negative else 0.0), None
    e = -int(digits) if negative else int(digits)
    if e < 0 or "." in base or len(base) > _INT_DIGITS:  # a float's worth of digits
        with localcontext(_WIDE):
            return float(b**e), None
    n = int(base)
    if e * n.bit_length() > _INT_DIGITS * 3:  # past 10 ** 3,800: no int, no float
        return math.inf, None
    exact = n**e
    try:
        value = float(exact)
    except OverflowError:  # past the largest float
        value = math.inf
    return value, exact if exact >= _FLOAT_EXACT else None


def _scaled(plain: str, scale: int) -> tuple[float, int | None]:
    """``plain`` (a :func:`_plain` text, at most 4,300 digits) times ``scale`` (a scale
    word's) and its :attr:`Number.exact` (None when the product is not an integer)."""
    value = float(plain) * scale
    if abs(value) < _FLOAT_EXACT or math.isinf(value) or len(plain) > _INT_DIGITS:
        return value, None
    whole, _, fraction = plain.partition(".")
    product, ten = int(whole + fraction) * scale, 10 ** len(fraction)
    return value, product // ten if product % ten == 0 else None


def _number(m: re.Match[str]) -> Number:
    """The :class:`Number` one :data:`_NUMBER` match stands for (a match of ASCII digits
    only, the common case, read directly: what :func:`_parsed_number` reads, which a test
    holds equal)."""
    text = m.group()
    if text.isdigit() and text.isascii():
        return Number(m.start(), m.end(), float(text), False, True, False, _exact_digits(text))
    return _parsed_number(m)


def _parsed_number(m: re.Match[str]) -> Number:
    """:func:`_number` by the match's groups. No value raises: a number past the float
    range is ±inf (``float`` reads any exponent), an integer past 4,300 digits is never
    given to ``int``."""
    exact = None
    if m.group("fn") is not None or m.group("fn1") is not None:
        value = _quotient(_arg(m, "fn"), _arg(m, "fd"))
        proper = m.group("sign") is None and value is not None and 0 <= value < 1
    elif m.group("mant") is not None:
        exp = m.group("exp") or m.group("exp2") or m.group("sup").translate(_SUPERSCRIPTS)
        value, proper = float(f"{_plain(m.group('mant'))}e{exp}"), False
    elif m.group("pn") is not None:
        num, den = m.group("pn"), m.group("pd")
        value = _quotient(num, den)
        proper = m.group("sign") is None and value is not None and Decimal(num) < Decimal(den)
    else:
        plain, proper = _plain(m.group("num")), False
        if m.group("e") is not None:
            value = float(f"{plain}e{m.group('e')}")
        elif m.group("pow") is not None:
            value, exact = _power(plain, m.group("pow").translate(_EXPONENT))
        elif m.group("scale") is not None:
            scale = m.group("scale").strip()
            factor = _SUFFIXES.get(scale) or _SCALES[scale.lower().rstrip("s")]
            value, exact = _scaled(plain, factor)
        elif "." not in plain:
            value, exact = float(plain), _exact_digits(plain.lstrip("-"))
        else:
            value = float(plain)
    if value is not None and m.group("sign") == "-":
        value, exact = -value, None if exact is None else -exact
    whole = m.group("num") is not None and m.group("num").isdigit() and not m.group("e")
    whole = whole and m.group("scale") is None and m.group("pow") is None
    percent = bool(m.group("pct"))
    return Number(m.start(), m.end(), value, percent, whole and not percent, proper, exact)


def _matches(text: str, start: int = 0, end: int | None = None) -> list[re.Match[str]]:
    folded = text.translate(_FOLD) if not text.isascii() else text
    return list(_NUMBER.finditer(folded, start, len(text) if end is None else end))


def _merged(matches: list[re.Match[str]]) -> list[Number]:
    """The numbers of consecutive matches, an integer and a proper fraction after it
    (``2 1/2``, ``2\\frac{1}{2}``, ``33 1/3%``: a percentage) merged into one mixed number;
    what is not a number (a date, a time...) is passed over."""
    out: list[Number] = []
    for m in matches:
        if m.group("skip") is not None:
            continue
        n = _number(m)
        last = out[-1] if out else None
        if (
            last is not None
            and last.whole
            and n.proper
            and not last.percent
            and _MIXED_GAP.fullmatch(m.string, last.end, n.start)
            and (n.start > last.end or m.string.startswith("\\", n.start))
        ):
            assert last.value is not None and n.value is not None
            sign = -1.0 if last.value < 0 else 1.0
            out[-1] = Number(last.start, n.end, last.value + sign * n.value, n.percent)
        else:
            out.append(n)
    return out


def find_numbers(text: str, start: int = 0, end: int | None = None) -> list[Number]:
    """Every number in ``text[start:end]``, in order (see the module docstring)."""
    return _merged(_matches(text, start, end))


def _boxed_content(text: str) -> tuple[int, int] | None:
    """(start, end) of the last box's content, braces balanced; None without a box."""
    if "box" not in text:  # every box has it: no scan of a text without one
        return None
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


def _boxed(
    text: str, box: tuple[int, int], percent: PercentPolicy, marker: bool | None
) -> Extraction:
    """The boxed rule: the box's one number, or why it has none."""
    content = text[box[0] : box[1]].strip()
    matches = _matches(text, *box)
    if matches and matches[0].group("skip") is not None:
        return _not_a_number(text, box[0], matches[0], "boxed", marker)
    found = _merged(matches)
    if not found:
        return Extraction(None, content, "boxed", False, marker, "the boxed answer has no number")
    n = found[0]
    rest = text[box[0] : n.start] + " " + text[n.end : box[1]]
    if _NOT_ONE_NUMBER.search(_BOX_WORDS.sub(" ", rest)):
        reason = "the boxed answer is not one number (an expression: use the math scorer)"
        return Extraction(None, content, "boxed", False, marker, reason)
    return _extraction(text, n, "boxed", percent, marker)


def find_answer(
    text: str, marker: str | None = None, percent: PercentPolicy = "as_number"
) -> Extraction:
    """Find the answer number in ``text`` by the rules of the module docstring.

    A text that is one unsigned ASCII integer (``72``: most datasets' targets) is read
    directly, as the rules would read it (the ``last`` rule; a test holds the two equal).
    """
    marker_found = None if not marker else marker in text
    if not marker_found and text.isdigit() and text.isascii():
        return Extraction(float(text), text, "last", False, marker_found, None, _exact_digits(text))
    if "<<" in text:  # GSM8K's calculator annotations: = <<9*2=18>>18 is = 18
        text = _CALCULATOR.sub("", text)
    if not text.isascii():
        text = _spelled(text)
    if _WORDED.search(text):
        text = _WORDED.sub(_worded, text)
    return _find_answer(text, marker, percent, marker_found)


def _find_answer(
    text: str, marker: str | None, percent: PercentPolicy, marker_found: bool | None
) -> Extraction:
    """:func:`find_answer` by its rules, without the plain-integer shortcut."""
    box = _boxed_content(text)
    if box is not None:
        return _boxed(text, box, percent, marker_found)
    if marker and marker_found:
        after = text.rfind(marker) + len(marker)
        found = _plain_after(text, after, marker_found) or _after_marker(
            text, after, percent, marker_found
        )
        if found is not None:
            return _corrected(text, found, after, percent, marker_found)
    stated = last_statement(text)
    if stated is not None:
        found = _after_marker(text, stated.end(), percent, marker_found)
        if (
            found is not None
            and _STATED_GAP.fullmatch(
                text, stated.end(), at := _start_of(found, text, stated.end())
            )
            and not _list_item(text, stated.end(), at, found)
        ):
            found.rule = "stated"
            return _corrected(text, found, stated.end(), percent, marker_found)
    return _last(text, percent, marker_found)


def _list_item(text: str, after: int, at: int, found: Extraction) -> bool:
    """True when the number found at ``at`` opens a numbered list on a line below the
    statement (``Answer:`` then ``1. Three boxes of 14.`` and ``2. ...``): a step's
    number, not the answer."""
    if found.text is None or "\n" not in text[after:at]:
        return False
    end = at + len(found.text)
    return _ITEM_NUMBER.match(text, end) is not None and _NEXT_ITEM.search(text, end) is not None


#: what follows a list item's number: ``.`` or ``)`` and the item's text
_ITEM_NUMBER = lazy_compile(r"[.)][ \t]+\S")
#: a later line opening the list's next item: ``2. So 42 in all.``
_NEXT_ITEM = lazy_compile(r"\n[ \t>*_-]*\d{1,2}[.)][ \t]+\S")


def last_statement(text: str) -> re.Match[str] | None:
    """The last answer stated in words (rule 3 of the module docstring: ``the answer
    is``, ``Answer:``, ``#### ``, a ``Final Answer`` heading, ``答案是``, ``Réponse :``...;
    the match ends where the answer begins), passing over a hypothetical one after it
    (``If the question meant 5 rows, the answer would be 25``: a note on another
    question); None when the text states none."""
    last = definite = None
    for m in _STATED.finditer(text):
        last = m
        would = m.group().endswith("be") and "would" in m.group().casefold()
        if not would or not _HYPOTHETICAL.search(text, _sentence_start(text, m.start()), m.start()):
            definite = m
    return definite or last


def _sentence_start(text: str, at: int) -> int:
    """Where the sentence holding offset ``at`` begins."""
    return max(text.rfind(c, 0, at) for c in ".!?\n") + 1


#: a statement of what the answer would be under another reading, not what it is
_HYPOTHETICAL = lazy_compile(r"(?i)\b(?:if|assuming|suppose|supposing|otherwise|were)\b")


def _corrected(
    text: str, found: Extraction, after: int, percent: PercentPolicy, marker_found: bool | None
) -> Extraction:
    """The stated answer, or the number a correction right after it gives instead (``The
    answer is 20... no, 23.``, ``Answer: 20. Wait, 23.``, ``20 - sorry, I mean 23``)."""
    if found.text is None:
        return found
    end = _start_of(found, text, after) + len(found.text)
    fix = _CORRECTION.match(text, end)  # 20... no, 23; 20 apples. Oops, 23 apples
    if fix is None:
        return found
    again = _after_marker(text, fix.end(), percent, marker_found)
    if again is None or again.text is None:
        return found
    start = _start_of(again, text, fix.end())
    if not _STATED_GAP.fullmatch(text, fix.end(), start) or not _CLAUSE_END.match(
        text, start + len(again.text)
    ):  # Actually, 3 of them were broken: a number in another sentence
        return found
    again.rule = found.rule
    return again


#: what may follow a corrected number: a unit or two, then the clause's end
#: (not a verb: ``No, 25 is wrong.`` discusses 25)
_CLAUSE_END = lazy_compile(
    r"(?![ \t]+(?:of|is|was|are|were|would|could|might|can|seems?|looks?|isn|wasn)\b)"
    r"(?:[ \t]+[A-Za-z]+){0,2}[ \t*_]*(?:[.!;)\n]|\Z)"
)
#: a correction right after a stated number, then the number it gives instead
_CORRECTION = lazy_compile(
    r"(?i)(?:[ \t]+[A-Za-z]+){0,2}?[ \t]*(?:\.{2,3}|…|[.,;:!-])?\s*\(?"
    r"(?:no|nope|wait|sorry|oops|actually|correction"
    r"|i\s+mean)\b[ \t,:!.…-]*(?:(?:no|wait|sorry|actually|i\s+mean|it[’']?s|make\s+that"
    r"|rather|the\s+answer\s+is)\b[ \t,:!.…-]*)*"
)


#: a calculator annotation of GSM8K's solutions (``<<9*2=18>>``): not text the model wrote
_CALCULATOR = lazy_compile(r"<<[^<>\n]{0,200}>>")

#: English number words, by value
_UNITS_WORDS = {w: i for i, w in enumerate((
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
    "eighteen", "nineteen",
))}  # fmt: skip
_TENS_WORDS = {w: 10 * i for i, w in enumerate((
    "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
), 2)}  # fmt: skip
_SCALE_WORDS = {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9}
_WORD = "|".join([*_UNITS_WORDS, *_TENS_WORDS])
#: a number in English words where it states the answer (``The answer is seven.``,
#: ``Answer: twenty-five``, ``Final answer: five hundred``) or is the whole reply
#: (``Seven.``); not a word that only starts a phrase (``the answer is one of them``)
_RUN = (
    rf"(?:{_WORD})(?:(?:[ \t]+(?:and[ \t]+)?|-)(?:{_WORD}|hundred|thousand|million|billion))*"
    # not a factor or a comparison: three times the original, two more than, one of
    r"\b(?![ \t]+(?:of|times|more|less|fewer|as|than|fold|half|quarters?|thirds?)\b|-)"
)
_HEAD = r"(?i)(?P<head>(?:\A|\b(?:answer\s*(?:is|:|=)|(?:result|total)\s+is))[\s*_:]*)"
_WORDED = lazy_compile(
    _HEAD + r"(?P<neg>(?:negative|minus)[ \t]+)?(?:"
    rf"(?P<run>{_RUN})(?:(?P<or>,?[ \t]+or[ \t]+)(?P<run2>{_RUN}))?"
    r"(?=[ \t]*(?:[.!,;)*]|\n|\Z|[ \t][a-z]))"
    # ``The answer is minus 4``: the word is the sign
    r"|(?(neg)(?=[$€£¥₹]?\d)|(?!)))"
)


def _worded(m: re.Match[str]) -> str:
    """The number words of ``m`` as digits (``twenty-five`` is ``25``, ``five hundred and
    two`` is ``502``; ``two or three`` is ``2 or 3``, two answers; ``negative four`` and
    ``minus 4`` are ``-4``)."""
    head = m.group("head") + ("-" if m.group("neg") else "")
    if m.group("run") is None:  # minus 4
        return head
    head += _words_value(m.group("run"))
    if m.group("run2") is None:
        return head
    return head + m.group("or") + _words_value(m.group("run2"))


#: a text that is one number in English words, or digits with a scale word
_SPELLED = lazy_compile(
    rf"(?i)[ \t]*(?:(?:negative|minus)[ \t]+)?(?:{_RUN}"
    r"|[-+]?\d+(?:\.\d+)?[ \t]+(?:thousand|million|billion|trillion))[ \t.]*"
)


def spelled_number(text: str) -> str | None:
    """The digits of ``text`` when it is one number in English words or digits with a
    scale word (``five`` is ``5``, ``twenty-five`` ``25``, ``negative four`` ``-4``, ``2
    million`` ``2000000``, ``2.5 million`` ``2500000``), else None (``5``, ``two or
    three``, ``one of them``)."""
    if not _SPELLED.fullmatch(text):
        return None
    found = find_answer(text)
    if found.value is None or not math.isfinite(found.value):
        return None
    if found.exact is not None:
        return str(found.exact)
    value = found.value
    return str(int(value)) if value.is_integer() else repr(value)


def _words_value(run: str) -> str:
    """The digits of a run of English number words."""
    total = current = 0
    for word in re.split(r"[ \t-]+", run.lower()):
        if word == "and":
            continue
        if word in _UNITS_WORDS:
            current += _UNITS_WORDS[word]
        elif word in _TENS_WORDS:
            current += _TENS_WORDS[word]
        elif word == "hundred":
            current = max(current, 1) * 100
        else:
            total += max(current, 1) * _SCALE_WORDS[word]
            current = 0
    return str(total + current)


#: an answer stated in words (``the answer is 7``, ``Final answer: 7``, ``答案是7``): the
#: first number after the last one is the answer, whatever numbers follow (a note, a check)
_STATED = lazy_compile(
    # a JSON key too: {"answer": 42, "confidence": 0.9}, {"final_answer": 42}; Markdown
    # emphasis before the colon: **Answer**: 42
    r"(?i:(?:\b(?:the\s+)?(?:final\s+|correct\s+)?|(?<![^\W_])(?:final|correct)_)answer[\"'*_]*"
    r"\s*(?:is|:|=|would\s+be|will\s+be|(?<=\s)[-–—](?=\s))"  # also Answer - 42
    r"|\bthe\s+(?:final\s+)?(?:result|total)\s+is|^[ \t*_#>]*final\s+result[*_]*\s*:"
    # the tag a prompt asks for: <answer>42</answer>
    r"|<answer>"
    # a heading alone on its line: **Final Answer** / ## Final Answer, the answer below it
    r"|^[ \t*_#>]*(?:final\s+)?answer[*_:]*[ \t]*(?=\n)"
    # simple-evals' MGSM answer prefixes (and their neighbours) before a colon
    r"|\b(?:antwort|respuesta|r[ée]ponse|resposta|risposta|ответ|jibu|jawaban|idahun)[*_]*"
    r"[ \t]*[:：]|答え[ \t]*[:：は]|উত্তর[ \t]*[:：ঃ]|คำตอบ[ \t]*[:：]|సమాధానం[ \t]*[:：]"
    r"|정답[ \t]*[:：은는]|正解[ \t]*(?:[:：は]|です)"
    # the answer is, in the MGSM and MMLU languages: La respuesta es 18, Die Antwort ist 18
    r"|\b(?:respuesta|r[ée]ponse|antwort|resposta|risposta)"
    r"(?:\s+(?:correcta|correcte|exacte|richtige|correta|corretta|final|finale))?"
    r"\s+(?:es|est|ist|lautet|é|è)\b)"
    # GSM8K's closing line: #### 72 (a number alone after it; never a heading #### 1. Step)
    r"|^[ \t]*####(?=[ \t]*[-+$]?[ \t]?\d[\d,]*(?:\.\d+)?[ \t]*(?:\n|\Z))"
    # a paragraph that is only a number in bold: **42**, **$1,250**, **$\frac{1}{2}$**
    r"|^[ \t]*\*\*(?=[ \t]*(?:[-+$]?[ \t]?\d[\d,]*(?:\.\d+)?(?:[ \t]+[A-Za-z]+){0,2}"
    r"|\$[^$\n]+\$)[ \t]*\*\*[ \t]*(?:\n[ \t]*\n|\n?\Z))"
    r"|(?:最终)?答案\s*(?:是|为|為|：|:)|答\s*[：:]",
    re.MULTILINE,
)
#: between a statement and its number: spaces, Markdown, math delimiters (``$``, ``\\[``,
#: ``\\(``), ``about``
_STATED_GAP = lazy_compile(
    r"(?:[\s*_:=#>`(\[\"'$]|\\[\[(])*(?i:(?:about|approximately|roughly|exactly)\s+)?"
)


def _start_of(found: Extraction, text: str, after: int) -> int:
    """Where the stated answer's text begins (its number, or its sign / currency)."""
    if found.text is None:
        return after
    at = text.find(found.text, after)
    return at if at >= 0 else after


def _plain_after(text: str, after: int, marker_found: bool | None) -> Extraction | None:
    """The marker rule's answer when all that follows the marker is one unsigned ASCII
    integer between ASCII spaces (``A: 18``, most answers), read directly as
    :func:`_after_marker` would read it (a test holds the two equal); None otherwise (the
    rules decide). The integer must not touch what stands before it (``A1: 18`` is not
    ``A1`` and ``18``), as :data:`_NUMBER`'s look-behind demands."""
    tail = text[after:]
    digits = tail.strip()
    if not (digits.isdigit() and tail.isascii()):
        return None
    before = text[after - 1] if digits[0] == tail[0] else " "
    if before.isalnum() or before in "_./" or not before.isascii():
        return None
    return Extraction(
        float(digits), digits, "marker", False, marker_found, None, _exact_digits(digits)
    )


def _after_marker(
    text: str, after: int, percent: PercentPolicy, marker_found: bool | None
) -> Extraction | None:
    """The marker rule: the first number from ``after`` on, or the number after the last
    ``=`` of its line when an expression leads up to it (``A: 6 * 3 = 18``), or no number
    when what follows the marker is a date, a time..., or two different numbers offered
    as alternatives (``A: 18 or 19``); None when nothing follows (the last rule decides)."""
    found = _matches(text, after)
    tail = found[0].string[after:] if found else ""  # folded: a full-width = too
    if "=" in tail or "≈" in tail:  # one look: most answers have neither
        result = _result_of(found)
        if result is not None:
            return _after_marker(text, result, percent, marker_found)
    if found and found[0].group("skip") is not None:  # rare: filter only then
        lead = _LEAD.fullmatch(text, after, found[0].start())
        if lead and not _EQUALS.match(text, found[0].end()):  # Answer: 12/25/2023
            return _not_a_number(text, lead.start("month"), found[0], "marker", marker_found)
        found = [m for m in found if m.group("skip") is None]
    if not found:
        return None
    # the first number: a mixed one spans two matches (_merged passes over a non-number)
    n = _merged(found[:2])[0]
    offered = _offered(found[0].string, n) if text[n.end : n.end + 1] in _OR_FIRST else None
    if offered is not None:
        return _ambiguous(text, n, offered, "marker", marker_found)
    return _extraction(text, n, "marker", percent, marker_found)


def _result_of(found: list[re.Match[str]]) -> int | None:
    """Where the result of an expression begins (just after the last ``=`` or ``≈`` of
    the first number's line) when the numbers from the first up to that sign are joined
    by operators only (``6 * 3 =``, ``(12 + 6) =``, ``10-3 =``) and a number follows it
    on the line; None otherwise (``A: 12, check: 12 + 6 = 18`` declares 12)."""
    text, first = found[0].string, found[0].start()  # the folded text
    line_end = text.find("\n", first)
    line_end = len(text) if line_end < 0 else line_end
    sign = max(text.rfind("=", first, line_end), text.rfind("≈", first, line_end))
    if sign < 0:  # the common case: one look along the line
        return None
    head = [m for m in found if m.start() < sign]
    rest = found[len(head) :]
    if not rest or rest[0].start() >= line_end or head[-1].end() > sign:
        return None
    if not _CLOSE.fullmatch(text, head[-1].end(), sign):
        return None
    for m in head:
        if m.group("skip") is not None and _kind(m.group()) != "a range (or a difference)":
            return None
    operators = [  # 12 + 6: the + is read as the sign of +6
        _OPERATOR.fullmatch(text, a.end(), b.start() + (b.group("sign") is not None))
        for a, b in zip(head, head[1:], strict=False)
    ]
    if not all(operators) or (not operators and head[0].group("skip") is None):
        return None
    return sign + 1


#: between a number and the ``=`` after it in an expression: closing brackets, Markdown
#: (a unit or two may follow a number there: ``18 eggs × $2/egg = $36``)
_CLOSE = lazy_compile(r"(?:[ \t]*/?[ \t]*[A-Za-z]+){0,2}[ \t)\]}*_]*")
#: between two numbers of an expression: an operator, brackets, spaces
_OPERATOR = lazy_compile(
    r"(?:[ \t]*/?[ \t]*[A-Za-z]+){0,2}[ \t()\[\]{}]*(?:(?:[-+*/×x·÷^=]|\\(?:times|cdot|div)"
    r"|\b(?:times|plus|minus|(?:multiplied|divided)[ \t]+by)\b)[ \t()\[\]{}]*)+"
)
#: between a number and an alternative to it: ``18 or 19``, ``18, 19 or 20``, ``18 (or 18.0)``,
#: ``x = -3 or x = 3``
_OR = lazy_compile(
    r"[ \t]*[)\]*]*[ \t]*(?:,[ \t]*(?:(?P<or>or)\b)?|[(\[]?[ \t]*(?P<or1>or)\b)[ \t]*"
    r"(?:(?:maybe|perhaps|possibly)[ \t]+)?[(\[*]*[ \t]*"
    r"(?:[a-z][ \t]*=[ \t]*)?",  # x = -3 or x = 3: the variable named again
    re.IGNORECASE,
)


#: what may follow a number that has alternatives (``""``: the end of the text is not)
_OR_FIRST = frozenset(" \t,)]*(oO") - {""}


def _offered(folded: str, n: Number) -> list[Number] | None:
    """The numbers offered as alternatives to ``n`` right after it (``18 or 19``,
    ``18, 19 or 20``: ``or`` at least once), when they are not all the same value
    (``18 (or 18.0)``, ``0.25, or 25%`` are one answer); None otherwise (a plain list
    ``1,2,3`` too)."""
    offered, pos, said_or = [n], n.end, False
    while gap := _OR.match(folded, pos):
        m = _NUMBER.match(folded, gap.end())
        if m is None or m.group("skip") is not None:
            break
        said_or = said_or or bool(gap.group("or") or gap.group("or1"))
        offered.append(_number(m))
        pos = m.end()
    if not said_or or all(_same_quantity(offered[0], x) for x in offered[1:]):
        return None
    return offered


def _same_quantity(a: Number, b: Number) -> bool:
    """Two numbers that write one quantity: equal values (``18 (or 18.0)``), or a
    percentage and the fraction it is (``0.25, or 25%``)."""
    if a.value == b.value or a.value is None or b.value is None:
        return a.value == b.value
    x = a.value / 100 if a.percent and not b.percent else a.value
    y = b.value / 100 if b.percent and not a.percent else b.value
    return math.isclose(x, y, rel_tol=1e-12)


def _ambiguous(
    text: str, n: Number, offered: list[Number], rule: Rule, marker_found: bool | None
) -> Extraction:
    """Two different numbers offered as the answer: no value, and the reason says so."""
    written = text[n.start : offered[-1].end].strip()
    reason = f"the answer offers {len(offered)} different numbers ({written}): ambiguous"
    return Extraction(None, written, rule, False, marker_found, reason)


def _last(text: str, percent: PercentPolicy, marker_found: bool | None) -> Extraction:
    """The last rule: the last number (a mixed one spans two matches), passing over
    dates, times...; no number, saying which of those there were, when none is left, and
    none when the last two are offered as alternatives (``... is 18 or 19``)."""
    every = _matches(text)
    tail: list[re.Match[str]] = []
    for m in reversed(every):
        if m.group("skip") is None and not _NOT_BEFORE.search(
            text, max(0, m.start() - 24), m.start()
        ):
            tail.append(m)
            if len(tail) == 2:
                break
    if not tail:
        reason = "no number in the response"
        if every:  # only dates, times...: say which
            reason += f" ({every[-1].group().strip()} is {_kind(every[-1].group())}, not a number)"
        return Extraction(None, None, None, False, marker_found, reason)
    numbers = _merged(tail[::-1])
    if len(numbers) == 2 and text[numbers[0].end : numbers[0].end + 1] in _OR_FIRST:
        offered = _offered(tail[0].string, numbers[0])
        if offered is not None and offered[-1].end == numbers[1].end:
            return _ambiguous(text, numbers[0], offered, "last", marker_found)
    if (
        len(numbers) == 2
        and numbers[0].percent
        and _BASE_OF.fullmatch(text, numbers[0].end, numbers[1].start)
    ):  # 20% of 100 people: the percentage is the answer, 100 its base
        return _extraction(text, numbers[0], "last", percent, marker_found)
    if (
        len(numbers) == 2
        and _RANGE_TO.fullmatch(text, numbers[0].end, numbers[1].start)
        and _RANGE_FROM.search(text, max(0, numbers[0].start - 12), numbers[0].start)
    ):  # between 10 and 12: a range, no one answer
        written = text[numbers[0].start : numbers[1].end]
        reason = f"the answer is a range ({written}), not one number"
        return Extraction(None, written, "last", False, marker_found, reason)
    if (
        len(numbers) == 2
        and _RESTATED.fullmatch(text, numbers[0].end, numbers[1].start)
        and _ASIDE_END.match(text, numbers[1].end)
    ):  # 2.5 hours (150 minutes).: the closing aside restates the answer in other units
        return _extraction(text, numbers[0], "last", percent, marker_found)
    return _extraction(text, numbers[-1], "last", percent, marker_found)


#: before a number that is denied, not given: ``3 apples, not 4``, ``rather than 4``
_NOT_BEFORE = lazy_compile(
    r"(?i:\bnot|\bn[’']t|\brather\s+than|\binstead\s+of)[ \t]*(?:[$€£¥₹][ \t]?)?\Z"
)
#: a range in words: ``between 10 and 12`` (``went from 10 to 12`` ends at 12)
_RANGE_FROM = lazy_compile(r"(?i)\bbetween[ \t]+(?:[$€£¥₹][ \t]?)?\Z")
_RANGE_TO = lazy_compile(r"(?i)(?:[ \t]+[A-Za-z%]+)?[ \t]+and[ \t]+(?:[$€£¥₹][ \t]?)?")
#: between a number and the same quantity restated in an aside: `` hours (``, `` (i.e. ``
_RESTATED = lazy_compile(
    r"(?:[ \t]+(?!(?i:and|or|plus|minus|times|than|to|by|of|from)\b)[A-Za-z%]+){0,2}"
    r"[ \t]*\([ \t]*(?i:(?:i\.?e\.?|or|about|that\s+is),?[ \t]+)?"
    r"(?:[$€£¥₹][ \t]?)?"
)
#: the aside closing the reply: its unit, the parenthesis, a full stop
_ASIDE_END = lazy_compile(r"(?:[ \t]+[A-Za-z%]+){0,2}[ \t]*\)[ \t*_]*[.!]?[ \t*_]*\Z")
#: between a percentage and its base: ``20% of 100``, ``15 percent of the 40``
_BASE_OF = lazy_compile(r"[ \t]+of[ \t]+(?:[A-Za-z]+[ \t]+){0,3}(?:[$€£¥₹][ \t]?)?")


#: Unicode vulgar fractions, as the fractions they stand for
_VULGAR = {
    "½": "1/2", "⅓": "1/3", "⅔": "2/3", "¼": "1/4", "¾": "3/4", "⅕": "1/5", "⅖": "2/5",
    "⅗": "3/5", "⅘": "4/5", "⅙": "1/6", "⅚": "5/6", "⅐": "1/7", "⅛": "1/8", "⅜": "3/8",
    "⅝": "5/8", "⅞": "7/8", "⅑": "1/9", "⅒": "1/10",
}  # fmt: skip
#: (the space belongs to a whole number only: ``2 ½`` is 2.5, ``is ½`` stays ``is 1/2``)
_VULGAR_RE = lazy_compile(r"(?:(?P<whole>\d)[ \t]?)?(?P<frac>[" + "".join(_VULGAR) + "])")
_CJK_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "兩": 2, "三": 3, "四": 4, "五": 5,
               "六": 6, "七": 7, "八": 8, "九": 9}  # fmt: skip
_CJK_UNITS = {"十": 10, "百": 100, "千": 1000}
_CJK_BIG = {"万": 10**4, "萬": 10**4, "亿": 10**8, "億": 10**8}
#: a number in CJK numerals where it is an answer: the whole text, or after ``答案是``,
#: ``等于``, ``=`` or ``是``, before a measure word, punctuation or the end
_CJK_RUN = lazy_compile(
    r"(?:\A\s*|(?:答案\s*(?:是|为|為|：|:)?|答\s*[：:]|等于|等於|=|[:：]|是|为|為"
    r"|(?:一共|总共|總共|共计|共計|合计|合計|总计|總計|共)有?)\s*)"
    r"(?P<run>[零〇一二两兩三四五六七八九十百千万萬亿億]+(?:[点點][零〇一二三四五六七八九]+)?)"
    r"(?=\s*(?:[个個只人元岁歲天本张張条條次种種件名位块塊米斤克分秒倍年月日辆輛台頭头本]"
    r"|[%％。．.，,！!？?；;)）]|\s*\Z))"
)


def _cjk_number(run: str) -> str | None:
    """The decimal text a run of CJK numerals writes, a ``点`` decimal point allowed
    (``三点五`` is ``3.5``); None when it is not a well-formed number."""
    whole, point, fraction = run.replace("點", "点").partition("点")
    value = _cjk_value(whole)
    if value is None:
        return None
    if not point:
        return str(value)
    return f"{value}." + "".join(str(_CJK_DIGITS[c]) for c in fraction)


def _cjk_value(run: str) -> int | None:
    """The integer a run of CJK numerals writes (``三`` 3, ``十二`` 12, ``二十五`` 25,
    ``一百零五`` 105, ``三千二百万`` 32,000,000, ``一亿二千万`` 120,000,000, ``二〇二三`` 2023
    digit by digit); None when it is not a well-formed number."""
    if all(c in _CJK_DIGITS for c in run):  # digit by digit: 二〇二三
        return int("".join(str(_CJK_DIGITS[c]) for c in run))
    yi = wan = section = digit = 0  # the 亿 part, the 万 part, below 万, the last digit
    for c in run:
        if c in _CJK_DIGITS:
            digit = _CJK_DIGITS[c]
        elif c in _CJK_UNITS:
            section += (digit or 1) * _CJK_UNITS[c]
            digit = 0
        elif _CJK_BIG.get(c) == 10**4:
            wan += (section + digit or 1) * 10**4
            section = digit = 0
        elif c in _CJK_BIG:
            yi = (yi + wan + section + digit or 1) * 10**8
            wan = section = digit = 0
        else:
            return None
    return yi + wan + section + digit


def _spelled(text: str) -> str:
    """``text`` with vulgar fractions as fractions (``2½`` is ``2 1/2``, ``-½`` is
    ``-1/2``) and CJK numerals where they state an answer as digits (``答案是三`` is
    ``答案是3``); other text unchanged."""
    if "\u2044" in text:  # the fraction slash: 3⁄4
        text = text.replace("\u2044", "/")
    if any(c in _VULGAR for c in text):
        text = _VULGAR_RE.sub(
            lambda m: (
                (m.group("whole") + " " if m.group("whole") else "") + _VULGAR[m.group("frac")]
            ),
            text,
        )
    if any("\u3007" <= c <= "\u9fff" for c in text):

        def digits(m: re.Match[str]) -> str:
            value = _cjk_number(m.group("run"))
            if value is None:
                return m.group()
            return m.group()[: m.start("run") - m.start()] + value

        text = _CJK_RUN.sub(digits, text)
    return text


#: after a difference, its result: ``Answer: 10-3 = 7`` declares 7, not a range
_EQUALS = lazy_compile(r"[ \t]*=[ \t]*[-+$€£¥₹\d]")
#: what may stand between a marker and its answer: spaces, Markdown, ``:``, ``=``, and
#: the month of a date (``Answer: December 25``)
_LEAD = lazy_compile(r"[\s*_:=#>`(\[]*(?P<month>(?:" + "|".join(_MONTH_NAMES) + r")\.?[ \t])?")
_DATE = lazy_compile(r"\d{4}([-./])\d{1,2}\1\d{1,2}|\d{1,2}([-./])\d{1,2}\2(?:\d{2}|\d{4})")


#: a date written with its month's name, or the day and year left of one (``25, 2023``)
_MONTH_WORDS = lazy_compile(r"[A-Z][a-z]|^\d{1,2}(?:st|nd|rd|th)?(?:,?\s+\d{4})?$")


def _kind(written: str) -> str:
    """What a :data:`_NOT_A_NUMBER` match is, for a reason: ``a date``, ``a range``..."""
    written = written.strip()
    if ":" in written:
        return "a time or ratio"
    if "/" in written or _DATE.fullmatch(written) or _MONTH_WORDS.search(written):
        return "a date"
    if written.startswith(("(", "+")) or written.count("-") >= 2:
        return "a phone number or code"
    if written.count(".") >= 2 and not any(dash in written for dash in "-–—"):
        return "a version or address"
    return "a range (or a difference)"


def _not_a_number(
    text: str, start: int, m: re.Match[str], rule: Rule, marker_found: bool | None
) -> Extraction:
    """The declared answer (after the marker, or boxed) is a date, a time, a range...:
    no value, and the reason says which; ``start`` (-1: ``m``'s own start) is where its
    text begins (``December 25``: at the month)."""
    written = text[m.start() if start < 0 else start : m.end()].strip()
    reason = f"the answer {written} is {_kind(written)}, not a number"
    return Extraction(None, written, rule, False, marker_found, reason)


def _extraction(
    text: str, n: Number, rule: Rule, percent: PercentPolicy, marker_found: bool | None
) -> Extraction:
    value = n.policy_value(percent)
    reason = "zero denominator" if value is None else None
    exact = None if n.percent and percent == "as_fraction" else n.exact
    written = text[n.start : n.end].strip()
    return Extraction(value, written, rule, n.percent, marker_found, reason, exact)
