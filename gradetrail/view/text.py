"""Untrusted text (responses, prompts, targets, judge replies, sample ids) as HTML.

Jinja2's autoescape already makes markup inert. What it leaves is text that *reads*
other than it is: bidirectional overrides and isolates that reorder what follows them
("Trojan Source", CVE-2021-42574: ``A: 5\\u202e01`` displays as ``A: 510``), zero-width
characters that hide inside a word, control characters, and lone UTF-16 surrogates that
UTF-8 cannot encode. An auditor must see those, so :func:`shown` escapes the text and
replaces each by a visible, marked token naming its code point (``U+202E``); newlines and
tabs stay as they are. Zero-width joiners and non-joiners are left alone: emoji sequences
and Persian or Indic words need them.
"""

from __future__ import annotations

import re

from markupsafe import Markup, escape

__all__ = ["highlighted", "shown"]

_HIDDEN = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"  # control characters but tab, CR and LF
    "\u061c\u200b\u200e\u200f\u202a-\u202e\u2060\u2066-\u2069\ufeff"  # bidi, zero-width
    "\ud800-\udfff]"  # lone surrogates
)


def _token(m: re.Match[str]) -> str:
    code = f"U+{ord(m.group()):04X}"
    return f'<span class="hidden-char" title="{code}">{code}</span>'


def shown(text: object) -> Markup:
    """``text`` escaped for HTML, each hidden or reordering character shown as a marked
    ``U+XXXX`` token (None and other values through ``str``)."""
    escaped = str(escape(text))
    if not _HIDDEN.search(escaped):
        return Markup(escaped)
    return Markup(_HIDDEN.sub(_token, escaped))


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
