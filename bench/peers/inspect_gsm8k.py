"""GSM8K for Inspect AI, the same work as examples/gsm8k.yaml: the same prompt text, one
generation a sample, the numeric match of numeric_match.py. ``-T cache=true`` turns on
Inspect's model output cache (``generate(cache=True)``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.dataset import MemoryDataset, Sample
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer, stderr
from inspect_ai.solver import TaskState, generate

sys.path.insert(0, str(Path(__file__).parent))
from numeric_match import correct, target  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "examples" / "data" / "gsm8k" / "test.jsonl"
PROMPT = 'Solve the math word problem. End with a line "A: <answer>".\n\nQ: {question}\n'


@scorer(metrics=[accuracy(), stderr()])
def numeric():
    async def score(state: TaskState, gold: Target) -> Score:
        reply = state.output.completion
        return Score(value=CORRECT if correct(reply, gold.text) else INCORRECT, answer=reply)

    return score


@task
def gsm8k(cache: bool = False) -> Task:
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    samples = [
        Sample(input=PROMPT.format(question=r["question"]), target=target(r["answer"]), id=i)
        for i, r in enumerate(rows)
    ]
    return Task(dataset=MemoryDataset(samples), solver=generate(cache=cache), scorer=numeric())
