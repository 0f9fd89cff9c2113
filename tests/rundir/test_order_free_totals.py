"""A run's totals do not depend on the order its rows landed in (two runs of one spec, or
the local and the Ray executor, finish calls in different orders): costs, and the top
errors with their messages."""

from __future__ import annotations

import itertools
import json
import math

from paths import GSM8K_SPEC

import gradetrail
from gradetrail._util.exactsum import ExactSum
from gradetrail.rundir.results import JudgeRecord, make_row
from gradetrail.rundir.summary import Tally

_SPEC = gradetrail.load_spec(GSM8K_SPEC)
#: costs whose float sum depends on the order: (0.1 + 0.2) + 0.3 != 0.3 + 0.2 + 0.1
COSTS = [0.1, 0.2, 0.3, 1e-9, 0.7]


def _row(i: int, cost: float, **fields: object) -> dict:
    judge = JudgeRecord(requests=1, calls=1, cost_usd=cost / 10, cost_usd_cached=cost / 100)
    base = {"sample_id": str(i), "state": "scored", "score": 1.0, "cost_usd": cost}
    return make_row(**{**base, "judge": judge, **fields})


def test_every_order_of_the_same_rows_gives_the_same_cost_floats() -> None:
    """Paid, cached, unscored, judge and app-metric sums: one float for all 120 orders of
    five rows, the correctly rounded exact sum (before: 0.6000000000000001 or 0.6 for
    the first three, by order)."""
    seen: set[tuple] = set()
    for order in itertools.permutations(range(len(COSTS))):
        tally, cached, failed = Tally(), Tally(), Tally()
        for i in order:
            app = {"metrics": {"steps": COSTS[i]}}
            tally.add(_row(i, COSTS[i], app=app))
            cached.add(_row(i, COSTS[i], cached=True))
            failed.add(_row(i, COSTS[i], state="judge_error", score=None))
        seen.add(
            (
                tally.cost_usd,
                tally.judge.cost_usd,
                tally.judge.cost_usd_cached,
                tally.app_metric_stats()["steps"]["mean"],
                cached.cost_usd,
                cached.cost_usd_cached,
                failed.cost_usd_unscored,
            )
        )
    total = math.fsum(COSTS)
    assert seen == {
        (
            total,
            math.fsum(c / 10 for c in COSTS),
            math.fsum(c / 100 for c in COSTS),
            total / len(COSTS),
            0.0,
            total,
            total,
        )
    }


def test_exact_sum_of_nothing_and_of_non_finite_values() -> None:
    """Nothing added reads 0.0; an infinity stays, and both infinities read NaN."""
    empty, inf, both = ExactSum(), ExactSum(), ExactSum()
    assert empty.value == 0.0
    for x in (1.0, math.inf, 2.0):
        inf.add(x)
    assert inf.value == math.inf
    for x in (math.inf, 1.0, -math.inf):
        both.add(x)
    assert math.isnan(both.value)


def _error(i: int, kind: str, message: str) -> dict:
    error = {"kind": kind, "message": message, "status": 400}
    return make_row(sample_id=str(i), state="provider_error", error=error)


def test_top_errors_and_their_messages_follow_run_order_not_landing_order() -> None:
    """Two reasons with one row each, and one reason whose messages differ in a number:
    every landing order gives the same top errors, ranked by rows and then by their first
    row in run order, each with that row's message (before: the first to land)."""
    rows = [
        (0, "Refused", "row 0 refused"),
        (1, "Locked", "held"),
        (2, "Refused", "row 2 refused"),
        (3, "Timeout", "took 31 s"),
    ]
    seen = set()
    for order in itertools.permutations(rows):
        tally = Tally()
        for i, kind, message in order:
            tally.add(_error(i, kind, message), i)
        seen.add(json.dumps(tally.top_errors()))
    assert [json.loads(s) for s in seen] == [
        [
            {"state": "provider_error", "kind": "Refused", "error_type": None, "status": 400,
             "rows": 2, "message": "row 0 refused"},
            {"state": "provider_error", "kind": "Locked", "error_type": None, "status": 400,
             "rows": 1, "message": "held"},
            {"state": "provider_error", "kind": "Timeout", "error_type": None, "status": 400,
             "rows": 1, "message": "took 31 s"},
        ]
    ]  # fmt: skip


def test_counts_served_models_and_tool_uses_are_keyed_in_one_order() -> None:
    """counts, served_models and server_tool_uses: the same JSON whichever row landed
    first (before: keys in landing order)."""
    a = make_row(sample_id="1", state="scored", score=1.0, served_model="m-2")
    a["server_tool_uses"] = {"web_search_requests": 1}
    b = make_row(sample_id="2", state="provider_error", served_model="m-1")
    b["server_tool_uses"] = {"code_execution": 2}
    figures = set()
    for rows in ([a, b], [b, a]):
        tally = Tally()
        for row in rows:
            tally.add(row, int(row["sample_id"]) - 1)
        keyed = tally.manifest_figures(_SPEC)
        figures.add(json.dumps([keyed[k] for k in ("counts", "served_models", "server_tool_uses")]))
    assert figures == {
        '[{"provider_error": 1, "scored": 1}, {"m-1": 1, "m-2": 1}, '
        '{"code_execution": 2, "web_search_requests": 1}]'
    }
