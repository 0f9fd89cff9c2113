"""Multiple-choice options: lettering, the stable per-sample shuffle, and their rendering.

One module decides how a row's list of choices is shown, so the prompt template's
``lettered`` filter (``{{ choices | lettered }}``, or ``lettered(shuffle_seed=7)``) and the
``choice`` scorer always agree on which letter is which choice.

The shuffle is a permutation drawn from ``random.Random`` seeded with the SHA-256 of the
seed and the choices themselves (canonical JSON), so it is stable across runs, machines
and Python versions, differs from sample to sample, and needs nothing but the row.
"""

from __future__ import annotations

import hashlib
import json
import random
import string
from collections.abc import Sequence
from typing import Any

__all__ = ["LETTERS", "lettered", "options", "render_options"]

#: option letters, in order (at most 26 choices)
LETTERS = string.ascii_uppercase


def options(choices: Sequence[Any], shuffle_seed: int | None = None) -> list[tuple[str, int, str]]:
    """``(letter, original index, text)`` for each option in display order.

    Args:
        choices: the row's choices (any JSON values; shown as text).
        shuffle_seed: None keeps the row's order; an int shuffles it stably per sample.

    Raises:
        ValueError: not a list, fewer than 2 or more than 26 choices.
    """
    if isinstance(choices, str | bytes) or not isinstance(choices, Sequence):
        raise ValueError(f"choices must be a list, got {type(choices).__name__}")
    if not 2 <= len(choices) <= len(LETTERS):
        raise ValueError(f"need 2 to {len(LETTERS)} choices, got {len(choices)}")
    order = list(range(len(choices)))
    if shuffle_seed is not None:
        payload = json.dumps([shuffle_seed, list(choices)], sort_keys=True, default=str)
        random.Random(hashlib.sha256(payload.encode()).hexdigest()).shuffle(order)
    return [(LETTERS[pos], i, str(choices[i])) for pos, i in enumerate(order)]


def render_options(choices: Sequence[Any], shuffle_seed: int | None = None) -> str:
    """The options as lines ``A. text``, in display order (see :func:`options`)."""
    return "\n".join(f"{letter}. {text}" for letter, _, text in options(choices, shuffle_seed))


def lettered(choices: Sequence[Any], shuffle_seed: int | None = None) -> str:
    """The Jinja2 filter ``lettered``: :func:`render_options` for a template."""
    return render_options(choices, shuffle_seed)
