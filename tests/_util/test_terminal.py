"""terminal.clean: escape sequences, control characters and bidi overrides from model or
dataset text are removed before printing; ordinary text is untouched."""

from __future__ import annotations

import pytest

from gradetrail._util.terminal import clean


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("a\x1b[31mred\x1b[0m b", "ared b"),  # SGR colour
        ("x\x1b[2J\x1b[Hy", "xy"),  # clear screen, cursor home
        ("x\x1b[1;1f\x1b[?25ly", "xy"),  # cursor position, private mode
        ("x\x9b2Jy", "xy"),  # 8-bit CSI
        ("x\x1b]0;title\x07y", "xy"),  # OSC window title, BEL-terminated
        ("x\x1b]8;;https://e.example\x1b\\link\x1b]8;;\x1b\\y", "xlinky"),  # hyperlink
        ("x\x1b]52;c;cGF5bG9hZA==\x1b\\y", "xy"),  # OSC 52 clipboard write
        ("x\x1bP1;2|data\x1b\\y", "xy"),  # DCS string
        ("x\x1b]0;unterminated\nnext", "x\nnext"),  # a missing terminator ends at the line
        ("x\x1bMy\x1b(Bz", "xyz"),  # two-character ESC sequences
        ("x\x1b", "x"),  # a lone ESC at the end
        ("PASS\rFAIL", "PASSFAIL"),  # carriage return cannot overwrite the line
        ("ab\x08\x08XY", "abXY"),  # backspaces cannot erase
        ("a\x00b\x7fc\x85d", "abcd"),  # NUL, DEL, C1 NEL
        ("user\u202eexe.txt", "userexe.txt"),  # right-to-left override
        ("x\u2066y\u2069z", "xyz"),  # bidi isolates
    ],
)
def test_clean_removes_what_drives_a_terminal(text: str, shown: str) -> None:
    """Escape sequences and control characters are removed, the text around them kept."""
    assert clean(text) == shown


@pytest.mark.parametrize(
    "text", ["plain", "tab\tand\nnewline", "é 中文 😀 ∑", "[bold]not markup[/bold]", ""]
)
def test_clean_leaves_ordinary_text_alone(text: str) -> None:
    """Printable text, tabs, newlines and non-ASCII letters come back unchanged."""
    assert clean(text) == text
