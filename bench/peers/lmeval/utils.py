"""lm-eval's process_results for gsm8k_gradetrail.yaml: the numeric match."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from numeric_match import correct, target  # noqa: E402


def process_results(doc: dict, results: list[str]) -> dict:
    return {"acc": float(correct(results[0], target(doc["answer"])))}
