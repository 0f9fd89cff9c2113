"""Builders of small judge evals on disk, shared by the judge, pairwise and agreement
tests: a JSONL dataset, a judge file and a spec, with the ``fake_judges`` module as the
candidate (an echo) and the judge (scripted)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fake_judges
import yaml

import gradetrail

#: a judge file that shows the response and the row's script to the scripted judge
SCRIPTED_JUDGE = (
    "Grade this response.\nResponse: {{ response }}\n<<SCRIPT>>{{ script | tojson }}<<END>>\n"
)

FAKE_JUDGE = {"provider": "python", "name": "fake-judge", "function": "fake_judges:scripted"}
ECHO = {"provider": "python", "name": "echo", "function": "fake_judges:echo"}


def write_eval(
    root: Path,
    rows: list[dict[str, Any]],
    *,
    judge_text: str = SCRIPTED_JUDGE,
    scorer: dict[str, Any] | None = None,
    dataset: dict[str, Any] | None = None,
    run: dict[str, Any] | None = None,
    name: str = "judged",
) -> Path:
    """Write ``rows``, ``judge.j2`` and ``spec.yaml`` under ``root``; returns the spec path.
    The candidate answers each row's ``answer``; the judge is the scripted fake unless
    ``scorer`` says otherwise."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "judge.j2").write_text(judge_text)
    spec = {
        "name": name,
        "dataset": {"path": "data.jsonl", **(dataset or {})},
        "prompt": "{{ answer }}",
        "model": ECHO,
        "scorer": {"type": "judge", "file": "judge.j2", "model": FAKE_JUDGE, **(scorer or {})},
        "run": {"max_retries": 0, **(run or {})},
    }
    path = root / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def run(spec_path: Path, results: Path, *overrides: str) -> tuple[Any, list[dict[str, Any]]]:
    """Run the eval (the test's default cache); returns the result and its rows. Clears
    :data:`fake_judges.CALLS` first, so it then holds this run's judge calls only."""
    fake_judges.CALLS.clear()
    result = gradetrail.run_eval(
        gradetrail.load_spec(spec_path, list(overrides)), results_root=results
    )
    return result, gradetrail.read_results(result.run_dir)
