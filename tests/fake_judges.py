"""Scripted judges and candidates for the ``python`` provider in judge tests.

A test's judge file embeds what the judge must answer between ``<<SCRIPT>>`` and
``<<END>>`` (a JSON list, one entry per judge sample: the j-th request, ``epoch = j``,
gets entry ``(j - 1) % len``). An entry is a reply string, or an object:
``{"text": ..., "stop_reason": "max_tokens"}`` for a reply cut at max_tokens,
``{"raise": "ServerError" | "AuthError" | ...}`` for a failed call. Every call is
recorded in :data:`CALLS`, so tests count judge calls at the boundary.
"""

from __future__ import annotations

import json
import re
import threading

from gradetrail import errors
from gradetrail.providers.base import Request, Response

#: every request the fake judges served, in arrival order
CALLS: list[Request] = []
_LOCK = threading.Lock()
_SCRIPT = re.compile(r"<<SCRIPT>>(.*?)<<END>>", re.DOTALL)
_PAIR = re.compile(r"<<A>>(.*?)<<B>>(.*?)<<END_PAIR>>", re.DOTALL)


def _record(request: Request) -> None:
    with _LOCK:
        CALLS.append(request)


def echo(request: Request) -> str:
    """Candidate: answers with its prompt."""
    return request.prompt


def scripted(request: Request) -> Response:
    """Judge: answers the script embedded in the prompt (see the module docstring)."""
    _record(request)
    m = _SCRIPT.search(request.prompt)
    if m is None:
        return Response(text="no script in the prompt", served_model="fake-judge")
    entries = json.loads(m.group(1))
    entry = entries[(request.epoch - 1) % len(entries)]
    if isinstance(entry, str):
        entry = {"text": entry}
    if "raise" in entry:
        cls = getattr(errors, entry["raise"])
        raise cls(entry.get("message", "scripted failure"), status=entry.get("status"))
    return Response(
        text=entry["text"],
        stop_reason=entry.get("stop_reason", "end_turn"),
        served_model="fake-judge",
        input_tokens=len(request.prompt.split()),
        output_tokens=len(entry["text"].split()),
        cost_usd=0.001,
    )


def pairwise(request: Request) -> str:
    """Pairwise judge: ``WINNER: A`` or ``B`` for the response holding ``GOOD``, ``TIE``
    when both or neither do; with ``POSITION-BIASED`` in the prompt, always ``A``."""
    _record(request)
    if "POSITION-BIASED" in request.prompt:
        return "The first one reads better.\nWINNER: A"
    m = _PAIR.search(request.prompt)
    assert m is not None, "pairwise judge file must show <<A>>..<<B>>..<<END_PAIR>>"
    a, b = ("GOOD" in m.group(1)), ("GOOD" in m.group(2))
    style = _STYLE.search(request.prompt)
    if style is not None:  # a published judge format's verdict
        which = "tie" if a == b else "first" if a else "second"
        return _STYLES[style.group(1)][which]
    winner = "TIE" if a == b else "A" if a else "B"
    return f"Compared both.\nWINNER: {winner}"


_STYLE = re.compile(r"<<STYLE:([\w-]+)>>")

#: how published pairwise judges write their verdicts (their prompts' instructions),
#: each reply ending the way that judge's own parser expects
_STYLES = {
    "mt-bench": {
        "first": 'Assistant A is more accurate. Output "[[A]]" if A is better.\n\n[[A]]',
        "second": "Assistant B answers the question; A does not.\nFinal verdict: [[B]]",
        "tie": "Both are equally good.\n[[C]]",
    },
    "arena-hard": {
        "first": "A is much better.\nMy final verdict is: [[A>>B]]",
        "second": "My final verdict is: [[B>A]]",
        "tie": "My final verdict is tie: [[A=B]]",
    },
    "arena-hard-biased": {  # always picks A: strongly when A holds GOOD, else weakly
        "first": "My final verdict is: [[A>>B]]",
        "second": "My final verdict is: [[A>B]]",
        "tie": "My final verdict is: [[A>B]]",
    },
    "prometheus": {
        "first": "Feedback: Response A follows the rubric closely. [RESULT] A",
        "second": "Feedback: Response B is more complete. [RESULT] B",
        "tie": "Feedback: both are close; A is slightly clearer. [RESULT] A",
    },
    "alpaca-eval": {"first": "m", "second": "M", "tie": "m"},
}


def flaky(request: Request) -> str:
    """Candidate: answers with its prompt, but fails permanently when it holds FAIL."""
    if "FAIL" in request.prompt:
        raise errors.BadRequest("scripted candidate failure")
    return request.prompt


#: in the GSM8K judge file: the reference's last line, then the student's last line
_FINAL_ANSWERS = re.compile(
    r"\nA: ([^\n]*)\n\nStudent solution:\n(?:.*\n)?A: ([^\n]*)\n\nDecide", re.DOTALL
)


def gsm8k_final_answer(request: Request) -> str:
    """GSM8K judge with known verdicts: ``GRADE: C`` exactly when the student's last line
    ``A: x`` repeats the reference's ``A: x`` character for character, else ``GRADE: I``
    (so "18.00" against "18" is graded incorrect)."""
    _record(request)
    m = _FINAL_ANSWERS.search(request.prompt)
    same = m is not None and m.group(1).strip() == m.group(2).strip()
    return f"The final answers {'match' if same else 'differ'}.\nGRADE: {'C' if same else 'I'}"
