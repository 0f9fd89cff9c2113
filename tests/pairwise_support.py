"""The pairwise tests' own eval: rows with a baseline and a candidate answer, a fake
pairwise judge, and helpers that run the baseline and write the candidate's spec."""

from __future__ import annotations

from pathlib import Path

import yaml
from judge_evals import write_eval

import gradetrail

PAIR_JUDGE = (
    "Which response answers better?\n<<A>>{{ response_a }}<<B>>{{ response_b }}<<END_PAIR>>\n"
    "{% if biased %}POSITION-BIASED{% endif %}\n"
)


ROWS = [
    {"id": "s1", "base": "bad s1", "cand": "GOOD s1", "biased": False},
    {"id": "s2", "base": "GOOD s2", "cand": "bad s2", "biased": False},
    {"id": "s3", "base": "GOOD s3", "cand": "GOOD s3 too", "biased": False},
    {"id": "s4", "base": "bad s4", "cand": "GOOD s4", "biased": True},
]


PAIR_MODEL = {"provider": "python", "name": "pair-judge", "function": "fake_judges:pairwise"}


def baseline_run(root: Path, rows: list[dict], *overrides: str, candidate: str = "echo") -> Path:
    """Run the baseline eval (prompt = each row's ``base``) and return its run directory."""
    spec = write_eval(root / "baseline", rows, scorer={"type": "exact"}, name="baseline")
    raw = yaml.safe_load(spec.read_text())
    raw["prompt"] = "{{ base }}"
    raw["target"] = "{{ base }}"  # the exact scorer needs one; the pairwise run reads none
    raw["model"]["function"] = f"fake_judges:{candidate}"
    for key in ("file", "model"):
        raw["scorer"].pop(key)
    spec.write_text(yaml.safe_dump(raw))
    result = gradetrail.run_eval(
        gradetrail.load_spec(spec, list(overrides)), results_root=root / "results"
    )
    return result.run_dir


def pairwise_spec(root: Path, rows: list[dict], baseline: Path, **scorer) -> Path:
    spec = write_eval(
        root / "candidate",
        rows,
        judge_text=PAIR_JUDGE,
        scorer={"type": "pairwise", "baseline": str(baseline), "model": PAIR_MODEL, **scorer},
        name="candidate",
    )
    raw = yaml.safe_load(spec.read_text())
    raw["prompt"] = "{{ cand }}"
    spec.write_text(yaml.safe_dump(raw))
    return spec
