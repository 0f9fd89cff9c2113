"""Untrusted text (responses, prompts, targets, judge replies, sample ids) as HTML.

Jinja2's autoescape already makes markup inert. What it leaves is text that *reads*
other than it is: bidirectional overrides and isolates that reorder what follows them
("Trojan Source", CVE-2021-42574: ``A: 5\\u202e01`` displays as ``A: 510``), zero-width
characters that hide inside a word, control characters, and lone UTF-16 surrogates that
UTF-8 cannot encode. An auditor must see those, so :func:`shown` escapes the text and
replaces each by a visible, marked token naming its code point (``U+202E``); newlines and
tabs stay as they are. What counts as hidden is every character of Unicode's control,
format, surrogate, private-use and separator categories (every space but the plain one,
so two ids that look identical are told apart), plus variation selectors, Hangul fillers
and the braille blank. Zero-width joiners and non-joiners are left alone: emoji sequences
and Persian or Indic words need them. :func:`titled` does the same for a page title,
which holds no markup (the token is plain ``[U+202E]``).
"""

from __future__ import annotations

import functools
import re
import unicodedata

from markupsafe import Markup, escape

__all__ = ["highlighted", "shown", "titled"]

#: characters that render as nothing (or as a plain space) although they are not one,
#: besides Unicode's format, control, separator and private-use categories
_INVISIBLE_EXTRA = (
    "\u00a0\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u2800\u3164\uffa0"
    "\ufe00-\ufe0f\U000e0100-\U000e01ef"
)
#: left alone: tab, LF, CR, the space, and the joiners emoji and scripts need
_KEPT = frozenset("\t\n\r \u200c\u200d")


def _hidden_class() -> str:
    """A regex character class of every code point that hides, reorders or fakes text:
    Unicode categories Cc, Cf, Cs, Co, Zl, Zp and Zs (every space but U+0020), plus
    :data:`_INVISIBLE_EXTRA` (variation selectors, Hangul fillers, the braille blank,
    ...), but :data:`_KEPT`."""
    ranges: list[tuple[int, int]] = []
    for code in range(0x110000):
        ch = chr(code)
        if ch in _KEPT:
            continue
        if unicodedata.category(ch) in _CATEGORIES:
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1] = (ranges[-1][0], code)
            else:
                ranges.append((code, code))
    parts = [
        re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}"
        for a, b in ranges
    ]
    return "[" + "".join(parts) + _INVISIBLE_EXTRA + "]"


_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp", "Zs"})


@functools.cache
def _hidden() -> re.Pattern[str]:
    """The hidden-character pattern, built on first use (a pass over every code point,
    about half a second, paid by the viewer only)."""
    return re.compile(_hidden_class())


def _token(m: re.Match[str]) -> str:
    code = f"U+{ord(m.group()):04X}"
    return f'<span class="hidden-char" title="{code}">{code}</span>'


#: the most characters of one text a page shows (a 200 MB response made a 419 MB page)
MAX_SHOWN_CHARS = 200_000


def shown(text: object) -> Markup:
    """``text`` escaped for HTML, each hidden or reordering character shown as a marked
    ``U+XXXX`` token (None and other values through ``str``); beyond
    :data:`MAX_SHOWN_CHARS` it is cut, with a marked note saying how much is not shown
    (the whole text stays in ``results.jsonl``)."""
    raw = str(text) if not isinstance(text, str) else text
    if len(raw) > MAX_SHOWN_CHARS:
        rest = len(raw) - MAX_SHOWN_CHARS
        note = (
            f'<span class="hidden-char" title="cut">[... {rest:,} more characters not '
            "shown; the whole text is in results.jsonl]</span>"
        )
        return Markup(str(shown(raw[:MAX_SHOWN_CHARS])) + note)
    escaped = str(escape(text))
    hidden = _hidden()
    if not hidden.search(escaped):
        return Markup(escaped)
    return Markup(hidden.sub(_token, escaped))


def highlighted(text: object, needle: object) -> Markup:
    """:func:`shown` of ``text`` with the last occurrence of ``needle`` (the answer a
    scorer extracted) marked ``<mark class="extracted">``; ``text`` alone when ``needle``
    is empty or not in it."""
    if not isinstance(text, str) or needle is None or isinstance(needle, bool):
        return shown(text)
    found = str(needle)
    at = text.rfind(found) if found.strip() else -1
    if at < 0:
        return shown(text)
    end = at + len(found)
    return Markup(
        f'{shown(text[:at])}<mark class="extracted">{shown(found)}</mark>{shown(text[end:])}'
    )


def titled(text: object) -> str:
    """``text`` for a page's ``<title>`` (autoescaped by the template): each hidden or
    reordering character becomes the plain text ``[U+XXXX]``."""
    return _hidden().sub(lambda m: f"[U+{ord(m.group()):04X}]", str(text))
