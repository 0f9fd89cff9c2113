"""The loop's scorer: 1.0 when the number after the last "A:" equals the target (commas
and a trailing ".0" ignored), else 0.0. Part of the approved harness (spec.yaml's
``harness:``): a loop that edits it is refused until a person approves it again."""

from __future__ import annotations

import re

from gradetrail import ScoreInput

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def _number(text: str) -> float | None:
    found = _NUMBER.findall(text)
    return float(found[-1].replace(",", "")) if found else None


def score(item: ScoreInput) -> float:
    """The response's final answer against the target.

    loop.py passes this function to ``gradetrail.run_eval(spec, scorer=score)``, which
    calls it with a :class:`gradetrail.ScoreInput`; named in a spec instead
    (``scorer: {type: python, function: "grading:score"}``) it would receive a
    :class:`gradetrail.ScoredSample`, which has the same ``response`` and ``target``."""
    answer = item.response.rsplit("A:", 1)[-1] if "A:" in item.response else ""
    got, want = _number(answer), _number(item.target or "")
    return float(got is not None and want is not None and got == want)
