"""Score Math-Verify's own test cases with gradetrail's math scorer, beside the library.

Math-Verify (https://github.com/huggingface/Math-Verify) tests its parser with
``(gold, prediction, expected)`` triples in ``tests/``. This script collects every triple
of a checkout's ``test_all.py``, ``test_boxed.py``, ``test_numina_cases.py``,
``test_open_thoughts.py`` and ``test_yujianll.py`` through pytest's collection (nothing
is copied into gradetrail), scores each with gradetrail's ``math`` scorer (the gold as the
target, the prediction as the response) and with the installed library as its tests
call it (LaTeX then plain-expression extraction, precision 6), and prints, per test
function, how many each gets right, then every case gradetrail gets wrong with both
parses. ``--bare`` also strips a gold's ``$...$``, as datasets store their targets.

    git clone https://github.com/huggingface/Math-Verify /tmp/Math-Verify
    .venv/bin/python scripts/peer_math_verify.py /tmp/Math-Verify [--bare]
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from pathlib import Path
from typing import Any

FILES = (
    "test_all.py",
    "test_boxed.py",
    "test_numina_cases.py",
    "test_open_thoughts.py",
    "test_yujianll.py",
)


def collect(checkout: Path) -> list[tuple[str, str, str, int]]:
    """``(test function, gold, prediction, expected)`` of every parametrized case."""
    import pytest

    class Collector:
        items: list[Any] = []

        def pytest_collection_modifyitems(self, items: list[Any]) -> None:
            self.items = items

    collector = Collector()
    here = os.getcwd()
    os.chdir(checkout)
    sys.path.insert(0, str(checkout))
    try:
        paths = [f"tests/{name}" for name in FILES if (checkout / "tests" / name).is_file()]
        pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *paths], [collector])
    finally:
        os.chdir(here)
    cases = []
    for item in collector.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        gold, pred = params.get("gold"), params.get("pred")
        expected = params.get("expected", params.get("result"))
        if isinstance(gold, str) and isinstance(pred, str) and expected is not None:
            cases.append((item.originalname, gold, pred, int(expected)))
    return cases


def main() -> int:
    """Print the comparison; exit 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path, help="a Math-Verify checkout")
    parser.add_argument("--bare", action="store_true", help="strip each gold's $...$")
    args = parser.parse_args()

    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    from gradetrail.datasets import Sample
    from gradetrail.scorers.base import ScoreInput
    from gradetrail.scorers.math import MathScorer
    from gradetrail.spec import MathScorerSpec

    scorer = MathScorer(MathScorerSpec(type="math"))
    config = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    total: collections.Counter[str] = collections.Counter()
    ours: collections.Counter[str] = collections.Counter()
    theirs: collections.Counter[str] = collections.Counter()
    wrong = []
    for name, gold, pred, expected in collect(args.checkout):
        g = gold.strip()
        if args.bare and g.startswith("$") and g.endswith("$") and g.count("$") == 2:
            g = g[1:-1]
        item = ScoreInput(Sample(0, "s", {}, 1), 1, "", None, g, pred)
        score = scorer.score(item)
        total[name] += 1
        ours[name] += score.value is not None and int(score.value) == expected
        try:
            lib = int(verify(parse(g, config), parse(pred, config)))
        except Exception:  # noqa: BLE001 - the library failing on its own case
            lib = -1
        theirs[name] += lib == expected
        if score.value is None or int(score.value) != expected:
            why = (score.error or {}).get("message") or score.detail.get("reason")
            wrong.append((name, g[:60], pred[-60:], expected, score.value, lib, why))
    print(f"{'test':40} {'cases':>5} {'gradetrail':>10} {'math-verify':>11}")
    for name in total:
        print(f"{name:40} {total[name]:5} {ours[name]:10} {theirs[name]:11}")
    print(f"{'all':40} {sum(total.values()):5} {sum(ours.values()):10} {sum(theirs.values()):11}")
    for case in wrong:
        print(repr(case))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
