"""A prompt-optimisation loop that cannot cheat: tune on the train split, report on the
test split it never looked at, under an approved harness.

Each round runs one variant of the app on the train split (the variants here are which
recorded model app.py answers as; in your loop, a prompt or a setting of your app),
keeps the best by its train mean, then gates the best against the baseline on the test
split (superiority: the candidate must be better beyond the 95% interval). Every run
checks the harness approval first (spec.yaml: run.require_approval), so a round that
edited grading.py or app.py stops with the file named until a person approves it again.

    gradetrail approve examples/hill_climb/spec.yaml      # after reviewing the harness
    python examples/hill_climb/loop.py --results-root results/hill_climb

Exit code: 0 the best variant beat the baseline on test, 1 it did not, 2 the harness
changed since its approval (or another refusal).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import gradetrail

HERE = Path(__file__).resolve().parent
SPEC = HERE / "spec.yaml"
#: the baseline first
VARIANTS = ("6b_finetuning", "175b_finetuning", "175b_verification")

sys.path.insert(0, str(HERE))
import grading  # noqa: E402 - the loop's scorer, beside this file (part of the harness)


def run(variant: str, split: str, results_root: Path) -> gradetrail.RunResult:
    """One run of ``variant`` on ``split``, scored by grading.score."""
    spec = gradetrail.load_spec(SPEC, [f"model.name={variant}", f"dataset.split.name={split}"])
    return gradetrail.run_eval(spec, results_root=results_root, scorer=grading.score)


def main(argv: list[str] | None = None) -> int:
    """Tune on train, gate on test; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results-root", type=Path, default=Path("results") / "hill_climb")
    args = parser.parse_args(argv)
    try:
        train = {v: run(v, "train", args.results_root) for v in VARIANTS}
        for variant, result in train.items():
            score = result.manifest.score
            print(f"train  {variant:<18} mean {score.mean:.4f} over {score.n} samples")
        best = max(VARIANTS, key=lambda v: train[v].manifest.score.mean)
        baseline = VARIANTS[0]
        if best == baseline:
            print("no variant beat the baseline on train")
            return 1
        base_test = run(baseline, "test", args.results_root)
        best_test = run(best, "test", args.results_root)
        gate = gradetrail.regression_gate(base_test.run_dir, best_test.run_dir, test="superiority")
    except gradetrail.GradetrailError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print(
        f"test   {baseline} {gate.baseline_mean:.4f} -> {best} {gate.candidate_mean:.4f} "
        f"(delta {gate.delta:+.4f}, 95% CI [{gate.lo:+.4f}, {gate.hi:+.4f}], n {gate.n}): "
        f"{'PASS' if gate.passed else 'FAIL'}"
    )
    return 0 if gate.passed else 1


if __name__ == "__main__":
    sys.exit(main())
