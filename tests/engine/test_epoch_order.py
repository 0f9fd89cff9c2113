"""A sample's epochs that answered alike reach the judge in epoch order: the lowest epoch
pays for the judge's request whatever order the model's responses land in."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

import gradetrail

APP = """\
import asyncio

answered = set()  # epochs whose answer went back
judged = []  # judge calls


async def answer(request):
    if request.epoch == 1:  # the first epoch's answer lands last
        ticks = 0
        while not (2 in answered and (judged or ticks >= 500)):
            await asyncio.sleep(0)
            ticks += 2 in answered
    answered.add(request.epoch)
    return "A: 4"


async def grade(request):
    judged.append(request.messages[-1]["content"])
    return "GRADE: C"
"""


def _spec(root: Path, epochs: int = 2) -> gradetrail.EvalSpec:
    root.mkdir(parents=True, exist_ok=True)
    (root / "orderapp.py").write_text(APP)
    (root / "data.jsonl").write_text(json.dumps({"id": "q1", "q": "2+2"}) + "\n")
    (root / "judge.j2").write_text("Grade the answer to {{ prompt }}: {{ response }}\n")
    spec = {
        "name": "epoch-order",
        "dataset": {"path": "data.jsonl"},
        "prompt": "What is {{ q }}?",
        "model": {"provider": "python", "name": "app", "function": "orderapp:answer"},
        "scorer": {
            "type": "judge",
            "file": "judge.j2",
            "model": {"provider": "python", "name": "grader", "function": "orderapp:grade"},
        },
        "run": {"epochs": epochs, "concurrency": 4},
    }
    (root / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return gradetrail.load_spec(root / "spec.yaml")


def test_the_first_epoch_pays_for_the_judge_when_its_answer_lands_last(tmp_path: Path) -> None:
    """Two epochs answer alike, epoch 2's response lands first: epoch 1's row still makes
    the judge call (calls 1, cached False) and epoch 2's is served it from the cache, as
    when they land in order. Before: epoch 2 reached the judge first and paid, so which
    row paid (and results.jsonl's bytes) followed the landing order, and differed between
    the local executor and Ray."""
    result = gradetrail.run_eval(
        _spec(tmp_path), results_root=tmp_path / "results", cache_path=tmp_path / "c.sqlite"
    )
    rows = gradetrail.read_results(result.run_dir)
    assert [(r["epoch"], r["state"]) for r in rows] == [(1, "scored"), (2, "scored")]
    assert [r["scorer"]["verdicts"][0]["cached"] for r in rows] == [False, True]
    assert [(r["judge"]["calls"], r["judge"]["cache_hits"]) for r in rows] == [(1, 0), (0, 1)]
    assert result.manifest.judge.calls == 1


DIFFERENT = """\
import asyncio

judged = []  # the answer each judge call graded


async def answer(request):
    return f"A: {request.epoch}"


async def grade(request):
    graded = request.messages[-1]["content"].rsplit(": ", 1)[1].strip()
    ticks = 0
    while graded == "1" and "2" not in judged and ticks < 5000:  # epoch 2's first
        await asyncio.sleep(0)
        ticks += 1
    judged.append(graded)
    return "GRADE: C"
"""


def test_epochs_that_answered_differently_do_not_wait_for_each_other(tmp_path: Path) -> None:
    """Epoch 2 answers differently from epoch 1, whose judge call is slow: epoch 2 is
    judged meanwhile (its judge request cannot be epoch 1's), each row pays its own."""
    spec = _spec(tmp_path)
    (tmp_path / "orderapp.py").write_text(DIFFERENT)
    result = gradetrail.run_eval(
        spec, results_root=tmp_path / "results", cache_path=tmp_path / "c.sqlite"
    )
    rows = gradetrail.read_results(result.run_dir)
    assert [r["scorer"]["verdicts"][0]["cached"] for r in rows] == [False, False]
    log = [json.loads(line) for line in (result.run_dir / "log.jsonl").read_text().splitlines()]
    judged = [e["epoch"] for e in log if e.get("event") == "judge_call"]
    assert judged == [2, 1]
