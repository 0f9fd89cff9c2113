"""The application under test: answers a GSM8K question with the solution one of the
GSM8K authors' models wrote for it (the recorded completions in ../data/gsm8k), picked by
``model.name``. Swap it for your own application: gradetrail calls ``answer(request, row)``
with the rendered request and the sample's dataset row."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

RECORDINGS = (
    Path(__file__).resolve().parent.parent / "data" / "gsm8k" / "example_model_solutions.jsonl"
)


@cache
def _solutions() -> dict[str, dict[str, str]]:
    """question -> {model name: its recorded solution}."""
    out: dict[str, dict[str, str]] = {}
    with RECORDINGS.open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            out[row["question"]] = {
                name: value["solution"] for name, value in row.items() if isinstance(value, dict)
            }
    return out


def answer(request, row):  # noqa: ANN001, ANN201 - gradetrail's python provider signature
    """The solution ``request.model`` recorded for this row's question."""
    return _solutions()[row["question"]][request.model]
