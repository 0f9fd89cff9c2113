"""Per-response CPU cost of numeric answer extraction (`find_answer`).

Extracts the answer of every recorded GSM8K completion (4 models x 1,319 problems) with
the marker ``A:`` (only the text after it is scanned) and without one (the whole response
is scanned: the last-number rule), and of a set of harder responses (dates, times,
ranges, locales, boxes), `--repeat` rounds each, and prints the median CPU time
(``time.process_time``: user + sys of this process, which load on the other core distorts
far less than wall time) per response in microseconds, beside the load average. Compare
with the same script on the previous ``gradetrail/scorers/numbers.py`` (the peer): at load
3.4 on the 2-core dev machine (other sessions running), before dates, times and ranges
were passed over, 4.8 / 28.2 / 7.8 us; after, 5.1 / 32.5 / 7.9 us. At 20:10 UTC on
2026-12-01 (load 5.5-5.7, other sessions running; medians of three interleaved runs of
5 rounds), before and after powers, scale words, expression results, alternatives and
overflow-safe values (main 13410bb -> 31ba4d2): 3.7 / 33.1 / 7.1 us, then 3.9 / 34.5 /
7.7 us.

Usage: python bench/bench_numbers.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from gradetrail.scorers.numbers import find_answer

DATA = Path(__file__).resolve().parents[1] / "examples" / "data" / "gsm8k"
MODELS = ("6b_finetuning", "6b_verification", "175b_finetuning", "175b_verification")
HARD = [
    "The party is on 12/25/2023, so the answer is 14.",
    "Answer: 2023-12-25",
    "It ends at 10:30 pm after 3 hours.",
    "Between 3-5 apples, say 4.",
    "Version 1.2.3 costs $1.234.567,50",
    "Call (555) 123-4567 for 1\u202f234,5 units",
    "\\boxed{\\frac{3}{4}}",
    "The total is 1,234.5 and 25% of it.",
]


def _cpu_us(texts: list[str], rounds: int, marker: str | None = "A:") -> float:
    """Median over ``rounds`` of CPU microseconds per text."""
    per_round = []
    for _ in range(rounds):
        start = time.process_time()
        for text in texts:
            find_answer(text, marker)
        per_round.append((time.process_time() - start) / len(texts) * 1e6)
    return statistics.median(per_round)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="rounds (median taken, >= 3)")
    args = parser.parse_args()
    rows = [json.loads(line) for line in (DATA / "example_model_solutions.jsonl").open()]
    gsm8k = [row[m]["solution"] for row in rows for m in MODELS]
    rounds = max(3, args.repeat)
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
    print(f"gsm8k  {len(gsm8k)} responses, marker A: {_cpu_us(gsm8k, rounds):.1f} us CPU each")
    print(f"gsm8k  {len(gsm8k)} responses, no marker: {_cpu_us(gsm8k, rounds, None):.1f} us")
    hard = HARD * 500
    print(f"hard   {len(hard)} responses: {_cpu_us(hard, rounds):.1f} us CPU each")


if __name__ == "__main__":
    main()
