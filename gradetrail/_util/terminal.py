"""Text for the terminal: strip what could drive the terminal instead of being read.

Responses, dataset fields, sample ids and provider error bodies are untrusted text. Printed
as-is, an escape sequence in them can recolour or clear the screen, move the cursor to
overwrite earlier lines (a failing run shown as passing), set the window title, write
hyperlinks or, on some terminals, the clipboard (OSC 52). :func:`clean` removes:

- ANSI/ECMA-48 escape sequences: CSI (``ESC [`` ... or the 8-bit ``0x9b``), OSC, DCS, SOS,
  PM and APC strings (up to their terminator, or to the end of the line when it is
  missing), and two-character ``ESC x`` sequences;
- every other C0 and C1 control character except newline and tab (so ``\\r`` cannot
  return to the start of a line and overwrite it, and ``\\b`` cannot erase);
- Unicode bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069), which can
  make text display in an order other than the one it has ("Trojan Source", CVE-2021-42574);
- lone UTF-16 surrogates (U+D800-U+DFFF), which no terminal encoding can print.

:func:`one_line` also folds line breaks into visible ``\\n`` escapes, for untrusted text
printed inside a line of gradetrail's own output (a summary line, an ``error:`` line, a
``runs`` cell): a provider message holding ``"\\nstatus      complete"`` must not print
a line that reads as the summary's own.
"""

from __future__ import annotations

import re

from gradetrail._util.lazyre import lazy_compile

__all__ = ["clean", "one_line"]

_SEQUENCES = lazy_compile(
    r"""
    (?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?      # CSI ... final byte
    | (?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])                 # OSC, DCS, SOS, PM, APC ...
      [^\n]*?(?:\x07|\x1b\\|\x9c|(?=\n)|\Z)                  # ... to BEL, ST or EOL
    | \x1b[\x20-\x2f]*[\x30-\x7e]?                            # ESC x (and a lone ESC)
    | [\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]  # controls, bidi,
                                                             # lone surrogates
    """,
    re.VERBOSE,
)
_HARMLESS = lazy_compile(r"[^\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]*")


def clean(text: str) -> str:
    """``text`` without terminal escape sequences, control characters (newline and tab
    kept) or bidirectional overrides; plain text comes back unchanged (and fast)."""
    if _HARMLESS.fullmatch(text):
        return text
    return _SEQUENCES.sub("", text)


_BREAKS = lazy_compile(r"\r\n|[\n\r\v\f\x85\u2028\u2029]")


def one_line(text: str) -> str:
    """:func:`clean` ``text``, with every line break (``\\n``, ``\\r\\n``, ``\\r``,
    vertical tab, form feed, NEL, U+2028, U+2029) shown as the two characters ``\\n``:
    untrusted text printed inside one line of output stays on that line."""
    if not _BREAKS.search(text) and _HARMLESS.fullmatch(text):
        return text
    return clean(_BREAKS.sub("\\\\n", text))
