"""Reasoning written inside the answer (open models served without a reasoning parser):
``<think>...</think>`` before the answer. Only the text after the last closing tag is
scored; a tag left open means the model ran out while reasoning, which is no answer
(never its thinking read as one). The row keeps the whole text."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["Split", "split_reasoning"]


@dataclass(frozen=True, slots=True, eq=False)
class Split:
    """A response split at its reasoning.

    Attributes:
        answer: the text to score (after the last closing tag, leading whitespace
            removed); the whole text when it holds no tag; "" when a tag is left open.
        reasoning: the text inside the tags, or None when there was none.
        unclosed: the name of a tag left open (no answer), else None.
    """

    answer: str
    reasoning: str | None
    unclosed: str | None = None


@lru_cache(maxsize=16)
def _patterns(tags: tuple[str, ...]) -> tuple[re.Pattern[str], re.Pattern[str]]:
    names = "|".join(re.escape(t) for t in tags)
    return (
        re.compile(rf"<\s*/\s*(?:{names})\s*>", re.IGNORECASE),
        re.compile(rf"<\s*({names})(?:\s[^>]*)?>", re.IGNORECASE),
    )


def split_reasoning(text: str, tags: tuple[str, ...]) -> Split:
    """Split ``text`` at its reasoning tags (names such as ``("think",)``, matched
    case-insensitively).

    The answer is what follows the last closing tag; an opening tag with no closing tag
    after it leaves no answer (``unclosed`` names it). Text with no tag is all answer.
    """
    if not tags or "<" not in text:
        return Split(text, None)
    closing, opening = _patterns(tags)
    ends = list(closing.finditer(text))
    start = ends[-1].end() if ends else 0
    still_open = opening.search(text, start)
    if still_open is not None:
        thought = text[still_open.end() :].strip()
        before = text[:start] if ends else ""
        reasoning = _inside(before, opening, closing) + ([thought] if thought else [])
        return Split("", "\n\n".join(reasoning) or None, still_open.group(1))
    if not ends:
        return Split(text, None)
    reasoning = _inside(text[:start], opening, closing)
    return Split(text[start:].lstrip(), "\n\n".join(reasoning) or None)


def _inside(text: str, opening: re.Pattern[str], closing: re.Pattern[str]) -> list[str]:
    """The reasoning pieces of ``text`` (which ends with a closing tag): what each
    closing tag closes (from its opening tag, or the start when the template put the
    opening tag in the prompt)."""
    pieces = []
    pos = 0
    for end in closing.finditer(text):
        chunk = text[pos : end.start()]
        opened = [m.end() for m in opening.finditer(chunk)]
        piece = chunk[opened[-1] :] if opened else chunk
        if piece.strip():
            pieces.append(piece.strip())
        pos = end.end()
    return pieces
