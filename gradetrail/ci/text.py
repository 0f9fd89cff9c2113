"""Untrusted text (sample ids, model names, error messages) made safe for the formats CI
systems read: XML 1.0 character data, Markdown table cells and code spans, and GitHub
workflow commands."""

from __future__ import annotations

import re

__all__ = ["github_data", "github_property", "markdown_code", "xml_text"]

# XML 1.0 allows tab, LF, CR and U+0020 upward, minus surrogates and U+FFFE/U+FFFF
_NOT_XML = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(text: str) -> str:
    """``text`` with every character XML 1.0 forbids (controls, lone surrogates) replaced
    by U+FFFD; ElementTree escapes ``<``, ``&`` and quotes itself."""
    return _NOT_XML.sub("\ufffd", text)


def markdown_code(text: str, limit: int = 120) -> str:
    """``text`` as one inline code span: on one line, cut to ``limit`` characters, with
    backticks and pipes replaced so it can neither close the span nor split a table row."""
    flat = " ".join(text.split())
    if len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    return "`" + flat.replace("`", "'").replace("|", "¦") + "`"


def github_data(text: str) -> str:
    """A workflow command's message, escaped as GitHub's toolkit does (``%``, CR, LF)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def github_property(text: str) -> str:
    """A workflow command's property value (``title=...``): :func:`github_data` plus ``:``
    and ``,``."""
    return github_data(text).replace(":", "%3A").replace(",", "%2C")
