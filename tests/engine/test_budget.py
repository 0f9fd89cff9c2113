"""run.max_cost_usd at the HTTP boundary: a ceiling that holds online and in batches,
stops the run cleanly (resumable), and refuses what it cannot bound."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from http_support import SECRET_KEY, base_url, gsm8k_spec
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

import gradetrail
from gradetrail.engine.batching import BatchOptions
from gradetrail.errors import SpecError
from gradetrail.executors.budget import worst_case_usd
from gradetrail.providers import make_provider
from gradetrail.rundir.spending import SpendingLog
from gradetrail.testing import FakeClock

server = protocol_server_fixture(scope="module", name="server")
srv = fresh_protocol_server_fixture("server", name="srv")

PRICE = {"input_per_mtok": 2.0, "output_per_mtok": 8.0}
ROWS = 12


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_KEY)


def spec_for(tmp_path: Path, srv: Any, protocol: str, **run: Any) -> gradetrail.EvalSpec:
    return gsm8k_spec(
        tmp_path / "spec",
        srv,
        protocol,
        limit=ROWS,
        price=PRICE,
        params={"max_tokens": 300},
        run={"concurrency": 4, **run},
    )


def worst_total(spec: gradetrail.EvalSpec, *, batch: bool = False) -> float:
    plan = gradetrail.plan_run(spec)
    return sum(worst_case_usd(plan.provider, p.request, batch=batch) for p in plan.prepared)


def run(spec: gradetrail.EvalSpec, tmp_path: Path, batch: bool) -> gradetrail.RunResult:
    clock = FakeClock()
    options = BatchOptions(max_requests=3, sleep=clock.sleep, clock=clock.now) if batch else None
    return gradetrail.run_eval(
        spec, results_root=tmp_path / "results", cache_path=tmp_path / "c.sqlite", batch=options
    )


def paid(result: gradetrail.RunResult) -> float:
    return sum(
        r["cost_usd"] or 0.0 for r in gradetrail.read_results(result.run_dir) if not r["cached"]
    )


@pytest.mark.parametrize(("protocol", "batch"), [("openai", False), ("anthropic", True)])
def test_half_the_worst_case_stops_at_the_ceiling_and_a_larger_one_finishes(
    srv, tmp_path: Path, protocol: str, batch: bool
) -> None:
    """A ceiling of half what the run costs: the run stops (interrupted, the reason in the
    manifest), having spent at most the ceiling; a re-run with room finishes, and no
    request was paid for twice."""
    measured = run(spec_for(tmp_path, srv, protocol), tmp_path / "measure", batch)
    ceiling = (
        measured.manifest.cost_usd / 2
        if not batch
        else (measured.manifest.executor["batch"]["cost_usd"] / 2)
    )
    srv.reset()
    spec = spec_for(tmp_path, srv, protocol, max_cost_usd=ceiling, start_over_budget=True)
    first = run(spec, tmp_path, batch)
    assert first.manifest.status == "interrupted"
    assert "run.max_cost_usd" in (first.manifest.stop_reason or "")
    if batch:
        spent = first.manifest.executor["batch"]["cost_usd"]
    else:
        spent = first.manifest.executor["budget"]["spent_usd"]
        assert spent == pytest.approx(paid(first))
    assert 0 < spent <= ceiling
    done_first = srv.batches()["requests"] if batch else srv.stats()["total"]
    assert 0 < done_first < ROWS
    # the same ceiling again: what the first process paid counts (spending.jsonl)
    same = run(spec, tmp_path, batch)
    assert same.manifest.status == "interrupted"
    assert SpendingLog(first.run_dir).total() <= ceiling + 1e-12
    bigger = spec_for(tmp_path, srv, protocol, max_cost_usd=ceiling * 20)
    second = run(bigger, tmp_path, batch)
    assert second.manifest.status == "complete" and second.manifest.counts == {"scored": ROWS}
    if batch:
        assert srv.batches()["requests"] == ROWS and srv.batches()["repeated"] == 0
    else:
        assert srv.stats()["total"] == ROWS and srv.stats()["repeated"] == 0


def test_a_worst_case_over_the_ceiling_is_refused_before_any_call(srv, tmp_path: Path) -> None:
    base = spec_for(tmp_path, srv, "openai")
    spec = spec_for(tmp_path, srv, "openai", max_cost_usd=worst_total(base) / 2)
    with pytest.raises(SpecError, match="could cost up to .* over what is left of the ceiling"):
        run(spec, tmp_path, False)
    assert srv.stats()["total"] == 0


def test_a_model_without_a_price_refuses_a_budgeted_run(srv, tmp_path: Path) -> None:
    spec = gsm8k_spec(tmp_path, srv, "anthropic", limit=2, run={"max_cost_usd": 5})
    with pytest.raises(SpecError, match="no price is known .* give model.price"):
        run(spec, tmp_path, False)


def test_openai_without_max_tokens_refuses_a_budgeted_run(srv, tmp_path: Path) -> None:
    spec = gsm8k_spec(tmp_path, srv, "openai", limit=2, price=PRICE, run={"max_cost_usd": 5})
    with pytest.raises(SpecError, match="model.params.max_tokens: a budgeted run needs"):
        run(spec, tmp_path, False)


def test_the_worst_case_bounds_the_real_cost(srv, tmp_path: Path) -> None:
    spec = spec_for(tmp_path, srv, "anthropic")
    result = run(spec, tmp_path, False)
    provider = make_provider(spec.model, spec.base_dir)
    plan = gradetrail.plan_run(spec)
    rows = {r["sample_id"]: r for r in gradetrail.read_results(result.run_dir)}
    for item in plan.prepared:
        assert rows[item.sample.id]["cost_usd"] <= worst_case_usd(provider, item.request)


def test_pause_turn_continuations_cannot_pass_the_ceiling(srv, tmp_path: Path) -> None:
    """Each continuation of a paused turn is another billed request (the paused answer,
    its server-tool results included, sent back as input): one reserved worst case does
    not bound the row. A run whose answers pause every time, each part honest (its output
    at most max_tokens), spent five times a ceiling of one row's worst case: no worst case
    bounds a continued turn, so a budgeted run refuses it before any call."""
    paused = {
        "id": "msg_paused",
        "type": "message",
        "role": "assistant",
        "model": "175b_verification",
        "content": [{"type": "text", "text": "Searching first. "}],
        "stop_reason": "pause_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 80, "output_tokens": 300},
    }
    srv.configure(faults=[{"kind": "answer", "body": paused}])
    base = gsm8k_spec(
        tmp_path / "base",
        srv,
        "anthropic",
        limit=1,
        price=PRICE,
        params={"max_tokens": 300},
    )
    ceiling = worst_total(base)  # one request's worst case
    spec = gsm8k_spec(
        tmp_path / "spec",
        srv,
        "anthropic",
        limit=1,
        price=PRICE,
        params={"max_tokens": 300},
        pause_turn_continuations=5,
        run={"max_cost_usd": ceiling},
    )
    with pytest.raises(SpecError, match="model.pause_turn_continuations: .* cannot be held"):
        run(spec, tmp_path, False)
    assert srv.stats()["total"] == 0  # unfixed: 6 requests, $0.01536 against $0.003226


def test_calls_in_flight_do_not_stop_a_run_their_settling_leaves_room_for(
    srv, tmp_path: Path
) -> None:
    """A ceiling that holds what the whole run costs plus two worst cases: the run
    finishes under it, concurrency 8 or not. A call that does not fit beside the worst
    cases of the calls in flight waits for them to land (most cost far less than their
    worst case) instead of stopping the run with most of the ceiling unspent."""
    measured = run(spec_for(tmp_path, srv, "openai"), tmp_path / "measure", False)
    base = spec_for(tmp_path, srv, "openai")
    plan = gradetrail.plan_run(base)
    worst_one = max(worst_case_usd(plan.provider, p.request) for p in plan.prepared)
    ceiling = measured.manifest.cost_usd + 2 * worst_one
    assert ceiling < 8 * worst_one  # eight calls' worst cases do not fit at once
    srv.reset()
    spec = spec_for(
        tmp_path, srv, "openai", concurrency=8, max_cost_usd=ceiling, start_over_budget=True
    )
    result = run(spec, tmp_path, False)
    assert result.manifest.stop_reason is None
    assert result.manifest.status == "complete" and result.manifest.counts == {"scored": ROWS}
    assert SpendingLog(result.run_dir).total() <= ceiling + 1e-12
    assert srv.stats()["total"] == ROWS


@pytest.mark.parametrize("batch", [False, True], ids=["online", "batch"])
def test_a_judge_without_a_price_refuses_a_budgeted_run_before_any_call(
    srv, tmp_path: Path, batch: bool
) -> None:
    """The judge's calls count against the ceiling too, so a judge model without a price
    cannot be bounded: the run is refused before any call (the candidate's included, in
    a batch too), naming the judge's field, as a candidate model without a price is."""
    srv.configure(script={"rules": [{"contains": "GRADE", "reply": "GRADE: C"}]})
    directory = tmp_path / "spec"
    directory.mkdir()
    (directory / "judge.j2").write_text("{{ response }}\nReply GRADE: C or GRADE: I.\n")
    spec = spec_for(tmp_path, srv, "openai", max_cost_usd=1.0)
    raw = spec.model_dump(mode="json", exclude_none=True)
    raw["scorer"] = {
        "type": "judge",
        "file": "judge.j2",
        "model": {
            "provider": "anthropic",
            "name": "175b_verification",  # served, but no price is known for it
            "base_url": base_url(srv, "anthropic"),
            "params": {"max_tokens": 64},
        },
        "parse": {"kind": "grade"},
    }
    (directory / "spec.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    judged = gradetrail.load_spec(directory / "spec.yaml")
    # unfixed: 4 candidate calls paid (concurrency 4; in batch mode, the batch of 12), then
    # the run failed at the first judge call ("model.price: no price is known for ...")
    with pytest.raises(SpecError, match=r"scorer\.model\.price: no price is known"):
        run(judged, tmp_path, batch)
    assert srv.stats()["total"] == 0 and srv.batches()["requests"] == 0
    assert not (tmp_path / "results").exists()  # refused before the run directory


@pytest.mark.parametrize(
    "extra",
    [{"n": 8}, {"max_completion_tokens": 4000}],
    ids=["n", "max_completion_tokens"],
)
def test_extra_fields_that_raise_the_output_bound_are_in_the_worst_case(
    srv, tmp_path: Path, extra: dict[str, Any]
) -> None:
    """``model.params.extra`` goes into the body verbatim: ``n: 8`` asks for (and bills)
    eight answers, ``max_completion_tokens`` replaces the max_tokens the worst case was
    bounded by. A ceiling of what the worst case says a row can cost must hold them."""
    srv.configure(script={"rules": [{"contains": "Janet", "reply": "step " * 500 + "A: 18"}]})
    extra_spec = gsm8k_spec(
        tmp_path / "spec",
        srv,
        "openai",
        limit=1,
        price=PRICE,
        params={"max_tokens": 60, "extra": extra},
    )
    ceiling = worst_total(extra_spec)
    spec = gsm8k_spec(
        tmp_path / "spec",
        srv,
        "openai",
        limit=1,
        price=PRICE,
        params={"max_tokens": 60, "extra": extra},
        run={"max_cost_usd": ceiling},
    )
    result = run(spec, tmp_path, False)
    assert srv.stats()["total"] == 1
    assert SpendingLog(result.run_dir).total() <= ceiling + 1e-12


def test_calls_billed_then_refused_count_against_the_ceiling(srv, tmp_path: Path) -> None:
    """Under model.require_served_model, an answer from another model is billed, then
    refused (a provider_error row keeping its cost). Those costs are spending too: with a
    ceiling of one worst case plus half what the 40 rows cost, the run stops at it
    instead of paying for every row."""
    srv.configure(faults=[{"kind": "alias", "served_model": "some-other-model"}])

    def spec(tmp: Path, **run: Any) -> gradetrail.EvalSpec:
        loaded = gsm8k_spec(
            tmp, srv, "openai", limit=40, price=PRICE, params={"max_tokens": 300}, run=run
        )
        raw = loaded.model_dump(mode="json", exclude_none=True)
        raw["model"]["require_served_model"] = True
        (tmp / "spec.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
        return gradetrail.load_spec(tmp / "spec.yaml")

    measured = run(spec(tmp_path / "m", fail_fast=0), tmp_path / "m", False)
    total = sum(r["cost_usd"] for r in gradetrail.read_results(measured.run_dir))
    assert total > 0
    plan = gradetrail.plan_run(spec(tmp_path / "m", fail_fast=0))
    worst_one = max(worst_case_usd(plan.provider, p.request) for p in plan.prepared)
    ceiling = worst_one + total / 2
    srv.reset()
    srv.configure(faults=[{"kind": "alias", "served_model": "some-other-model"}])
    budgeted = spec(
        tmp_path / "b", fail_fast=0, max_cost_usd=ceiling, start_over_budget=True, concurrency=1
    )
    result = run(budgeted, tmp_path / "b", False)
    rows = list(gradetrail.read_results(result.run_dir))
    paid_rows = sum(r["cost_usd"] or 0.0 for r in rows)
    assert all(r["state"] == "provider_error" for r in rows)
    # unfixed: all 40 rows sent and billed, the budget's spent_usd 0, the run complete
    assert result.manifest.status == "interrupted"
    assert 0 < srv.stats()["total"] < 40
    assert paid_rows <= ceiling + 1e-12
    assert SpendingLog(result.run_dir).total() == pytest.approx(paid_rows)
