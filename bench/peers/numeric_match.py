"""The numeric match the peers' GSM8K tasks score with (gradetrail's ``numeric`` scorer
with ``marker: "A:"``, in its plain cases): the first number after the last ``A:``, else
the last number in the reply; commas and currency signs dropped; equal as floats."""

from __future__ import annotations

import re

NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def answer(text: str, marker: str = "A:") -> float | None:
    """The reply's answer number, or None."""
    at = text.rfind(marker)
    found = NUMBER.search(text, at + len(marker)) if at >= 0 else None
    if found is None:
        numbers = NUMBER.findall(text)
        if not numbers:
            return None
        raw = numbers[-1]
    else:
        raw = found.group()
    try:
        return float(raw.replace(",", "").rstrip("."))
    except ValueError:
        return None


def target(gsm8k_answer: str) -> str:
    """The target of a GSM8K row: the text after ``####``, stripped."""
    return gsm8k_answer.split("####")[-1].strip()


def correct(reply: str, gold: str) -> bool:
    """True when the reply's answer equals the target's number."""
    got, want = answer(reply), answer(gold)
    return got is not None and want is not None and got == want
