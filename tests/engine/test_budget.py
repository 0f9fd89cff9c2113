"""run.max_cost_usd at the HTTP boundary: a ceiling that holds online and in batches,
stops the run cleanly (resumable), and refuses what it cannot bound."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from http_support import SECRET_KEY, base_url, gsm8k_spec
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

import gradetrail
from gradetrail.engine.batching import BatchOptions
from gradetrail.errors import RunError, SpecError
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


def with_extra(tmp_path: Path, srv: Any, extra: dict[str, Any], **run: Any) -> gradetrail.EvalSpec:
    """One GSM8K row over OpenAI, priced, max_tokens 60 and ``model.params.extra``."""
    return gsm8k_spec(
        tmp_path / "spec", srv, "openai", limit=1, price=PRICE,
        params={"max_tokens": 60, "extra": extra}, run=run,
    )  # fmt: skip


def pausing(srv: Any, text: str, input_tokens: int, output_tokens: int) -> None:
    """Every Anthropic answer pauses (stop reason pause_turn), each part this one."""
    paused = {
        "id": "msg_paused",
        "type": "message",
        "role": "assistant",
        "model": "175b_verification",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "pause_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }
    srv.configure(faults=[{"kind": "answer", "body": paused}])


def paused_spec(directory: Path, srv: Any, limit: int, **model_fields: Any) -> gradetrail.EvalSpec:
    """The GSM8K eval over Anthropic, priced, max_tokens 300 (``model_fields`` added)."""
    return gsm8k_spec(
        directory, srv, "anthropic", limit=limit, price=PRICE, params={"max_tokens": 300},
        **model_fields,
    )  # fmt: skip


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
    recorded = SpendingLog(first.run_dir).read()  # every call that started was settled
    assert recorded.calls_in_flight == 0 and recorded.paid_usd == pytest.approx(spent)
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


@pytest.mark.parametrize(("protocol", "batch"), [("openai", False), ("anthropic", True)])
def test_responses_billed_then_refused_count_against_the_ceiling(
    srv, tmp_path: Path, protocol: str, batch: bool
) -> None:
    """Every answer served by another model under model.require_served_model is paid for
    and then refused (a provider_error row with its cost): the budget counts what they
    cost, so a ceiling of 90% of what the 12 calls cost stops the run before it. Before,
    none of it counted (each call or batch settled as costing nothing): all 12 requests
    were made and the run, complete, spent more than its ceiling."""

    def refusing(directory: Path, **run_fields: Any) -> gradetrail.EvalSpec:
        spec = spec_for(directory, srv, protocol, concurrency=1, fail_fast=0, **run_fields)
        model = spec.model.model_copy(update={"require_served_model": True})
        return spec.model_copy(update={"model": model})

    alias = [{"kind": "alias", "served_model": "another-model"}]
    srv.configure(faults=alias)
    measured = run(refusing(tmp_path / "m"), tmp_path / "measure", batch)
    assert measured.manifest.counts == {"provider_error": ROWS}
    full = measured.manifest.cost_usd
    assert full is not None and full > 0
    srv.reset()
    srv.configure(faults=alias)
    ceiling = full * 0.9
    spec = refusing(tmp_path, max_cost_usd=ceiling, start_over_budget=True)
    assert worst_total(spec, batch=batch) / ROWS < ceiling  # room for calls one at a time
    first = run(spec, tmp_path, batch)
    assert first.manifest.status == "interrupted"
    assert "run.max_cost_usd" in (first.manifest.stop_reason or "")
    spent = first.manifest.executor["budget"]["spent_usd"]
    assert spent == pytest.approx(paid(first)) and 0 < spent <= ceiling
    assert first.manifest.cost_usd == pytest.approx(spent)
    assert SpendingLog(first.run_dir).total() == pytest.approx(spent)
    made = srv.batches()["requests"] if batch else srv.stats()["total"]
    assert 0 < made < ROWS


def test_params_extra_that_multiplies_the_output_is_in_the_worst_case(srv, tmp_path: Path) -> None:
    """model.params.extra is sent verbatim over the body: n: 8 asks for eight completions,
    each up to max_tokens, all billed. The worst case bounds the real cost of every
    request and the run stays under a ceiling set from it. Before, the worst case was
    one completion's: each answer cost more than its reservation and the run spent past
    its ceiling."""
    spec = spec_for(tmp_path, srv, "openai", concurrency=1)
    params = spec.model.params.model_copy(update={"extra": {"n": 8}})
    spec = spec.model_copy(update={"model": spec.model.model_copy(update={"params": params})})
    provider = make_provider(spec.model, spec.base_dir)
    plan = gradetrail.plan_run(spec)
    measured = run(spec, tmp_path / "measure", False)
    rows = {r["sample_id"]: r for r in gradetrail.read_results(measured.run_dir)}
    for item in plan.prepared:
        assert rows[item.sample.id]["cost_usd"] <= worst_case_usd(provider, item.request)
    srv.reset()
    ceiling = measured.manifest.cost_usd / 2
    budgeted = spec.model_copy(
        update={"run": spec.run.model_copy(update={"max_cost_usd": ceiling})}
    )
    budgeted = budgeted.model_copy(
        update={"run": budgeted.run.model_copy(update={"start_over_budget": True})}
    )
    first = run(budgeted, tmp_path, False)
    assert first.manifest.status == "interrupted"
    assert first.manifest.cost_usd <= ceiling


def _planted_run_dir(spec: gradetrail.EvalSpec, tmp_path: Path) -> Path:
    run_dir = gradetrail.plan_run(spec).run_dir(tmp_path / "results")
    run_dir.mkdir(parents=True)
    return run_dir


@pytest.mark.parametrize("planted", ['{"usd": NaN}\n', '{"usd": -1000}\n', '{"usd": "-1e9"}\n'])
def test_a_planted_spending_record_does_not_lift_the_ceiling(
    srv, tmp_path: Path, planted: str
) -> None:
    """A spending.jsonl planted in the run directory (a results directory can come from
    a cloned repository) with a negative or NaN amount counts as nothing: the run stops
    at its ceiling. Before, NaN disabled the ceiling and -1000 lifted it by $1000 (all 12
    calls made, the run complete past a ceiling of 90% of what they cost)."""
    measured = run(spec_for(tmp_path / "m", srv, "openai", concurrency=1), tmp_path / "m", False)
    srv.reset()
    ceiling = measured.manifest.cost_usd * 0.9
    spec = spec_for(tmp_path, srv, "openai", concurrency=1, max_cost_usd=ceiling)
    spec = spec.model_copy(update={"run": spec.run.model_copy(update={"start_over_budget": True})})
    (_planted_run_dir(spec, tmp_path) / "spending.jsonl").write_text(planted)
    first = run(spec, tmp_path, False)
    assert first.manifest.status == "interrupted"
    assert 0 < first.manifest.cost_usd <= ceiling
    assert 0 < srv.stats()["total"] < ROWS


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory"])
def test_a_spending_record_that_is_no_plain_file_refuses_the_run(
    srv, tmp_path: Path, kind: str
) -> None:
    """A FIFO, a symlink or a directory at spending.jsonl refuses the run before any call,
    one line naming it. Before, a FIFO held the run for good before its first call (the
    read waited for a writer), and a symlink was read through (another file's amounts)."""
    spec = spec_for(tmp_path, srv, "openai", max_cost_usd=100.0)
    record = _planted_run_dir(spec, tmp_path) / "spending.jsonl"
    if kind == "fifo":
        os.mkfifo(record)
    elif kind == "symlink":
        elsewhere = tmp_path / "elsewhere.jsonl"
        elsewhere.write_text('{"usd": 0.5}\n')
        record.symlink_to(elsewhere)
    else:
        record.mkdir()

    def unblock() -> None:  # if a read waits on the FIFO, end it (the test then fails)
        with contextlib.suppress(OSError):
            os.close(os.open(record, os.O_WRONLY | os.O_NONBLOCK))

    timer = threading.Timer(10.0, unblock)
    timer.start()
    try:
        with pytest.raises(RunError) as caught:
            run(spec, tmp_path, False)
    finally:
        timer.cancel()
    what = "is a symlink" if kind == "symlink" else "is not a regular file"
    assert str(caught.value) == (
        f"{record}: {what}; refusing to read it (remove it, or pass --results-root with "
        "another directory)"
    )
    assert srv.stats()["total"] == 0


def test_spending_that_cannot_be_recorded_loses_no_paid_response(srv, tmp_path: Path) -> None:
    """When spending.jsonl cannot be written as answers land (here a directory put at its
    name mid-run; a full disk does the same), the answers already paid for are cached,
    the run stops starting calls with one reason (interrupted, resumable) and a re-run
    pays for nothing twice. Before, the OSError escaped the settlement: the four answers
    in flight were paid and never cached, and the run died with a traceback."""
    spec = spec_for(tmp_path, srv, "openai", concurrency=4, max_cost_usd=100.0)
    srv.configure(faults=[{"kind": "hold", "first": 4}])
    outcome: dict[str, Any] = {}

    def go() -> None:
        try:
            outcome["result"] = run(spec, tmp_path, False)
        except BaseException as exc:  # noqa: BLE001  # reported by the assertions below
            outcome["error"] = exc

    runner = threading.Thread(target=go)
    runner.start()
    srv.wait_held(4)
    record = gradetrail.plan_run(spec).run_dir(tmp_path / "results") / "spending.jsonl"
    held = record.read_text()  # each call recorded before it started, nothing settled yet
    assert held.count('"reserved_usd"') == 4 and '"usd"' not in held
    record.unlink()
    record.mkdir()
    srv.release()
    runner.join(60)
    assert "error" not in outcome, outcome.get("error")
    first = outcome["result"]
    assert first.manifest.status == "interrupted"
    assert "cannot be recorded in the run directory's spending.jsonl (Is a directory)" in (
        first.manifest.stop_reason or ""
    )
    paid = srv.stats()["total"]
    assert paid == 4
    record.rmdir()
    record.write_text(held)  # the four settlements were never written: each its worst case
    assert SpendingLog(first.run_dir).read().calls_in_flight == 4
    srv.reset()
    second = run(spec, tmp_path, False)
    assert second.manifest.status == "complete"
    assert second.manifest.cache_hits == 4
    assert srv.stats()["total"] == ROWS - 4 and srv.stats()["repeated"] == 0


def test_pause_turn_continuations_cannot_pass_the_ceiling(srv, tmp_path: Path) -> None:
    """Each continuation of a paused turn is another billed request (the paused answer,
    its server-tool results included, sent back as input). A ceiling of one part's worst
    case cannot hold a row of six parts: the worst case counts every part, so the run is
    refused before any call, and with --start-over-budget it stops before its first call.
    Unfixed, one reserved part let a row of six parts spend $0.01536 under $0.003226."""
    pausing(srv, "Searching first. ", 80, 300)
    ceiling = worst_total(paused_spec(tmp_path / "base", srv, 1))  # one part's worst case

    def continued(**run_fields: Any) -> gradetrail.EvalSpec:
        run = {"max_cost_usd": ceiling, **run_fields}
        return paused_spec(tmp_path / "spec", srv, 1, pause_turn_continuations=5, run=run)

    assert worst_total(continued()) > 6 * ceiling  # six parts, each reading the ones before
    with pytest.raises(SpecError, match="could cost up to .* over what is left of the ceiling"):
        run(continued(), tmp_path, False)
    assert srv.stats()["total"] == 0
    stopped = run(continued(start_over_budget=True), tmp_path, False)
    assert stopped.manifest.status == "interrupted"
    assert "run.max_cost_usd" in (stopped.manifest.stop_reason or "")
    assert srv.stats()["total"] == 0


def test_pause_turn_continuations_are_in_the_worst_case(srv, tmp_path: Path) -> None:
    """model.pause_turn_continuations: 20 sends a paused answer back up to 20 times, each
    part billed (up to max_tokens out, and the parts so far back in): the worst case
    bounds what the 21 parts of every request cost. Before, it bounded one part: a
    request cost 0.0488 USD against a worst case of 0.0031."""
    pausing(srv, "Still thinking. ", 10, 290)
    spec = paused_spec(tmp_path / "spec", srv, 2, pause_turn_continuations=20)
    result = run(spec, tmp_path, False)
    provider = make_provider(spec.model, spec.base_dir)
    rows = {r["sample_id"]: r for r in gradetrail.read_results(result.run_dir)}
    for item in gradetrail.plan_run(spec).prepared:
        row = rows[item.sample.id]
        assert row["output_tokens"] == 21 * 290
        assert row["cost_usd"] <= worst_case_usd(provider, item.request)


def test_server_tools_refuse_a_budgeted_run(srv, tmp_path: Path) -> None:
    """A server tool in model.params.extra.tools (web search: a fee per use, its results
    read as input) has no worst case: a budgeted run refuses to start, one line, no call.
    Before, its fees were outside the worst case and the ceiling did not hold."""
    spec = gsm8k_spec(
        tmp_path / "spec",
        srv,
        "anthropic",
        limit=2,
        price=PRICE,
        params={
            "max_tokens": 300,
            "extra": {"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
        },
        run={"max_cost_usd": 5},
    )
    with pytest.raises(SpecError, match="web_search_20250305 is a server tool") as caught:
        run(spec, tmp_path, False)
    assert "\n" not in str(caught.value)
    assert srv.stats()["total"] == 0


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
    ceiling = worst_total(with_extra(tmp_path, srv, extra))
    result = run(with_extra(tmp_path, srv, extra, max_cost_usd=ceiling), tmp_path, False)
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


@pytest.mark.parametrize(
    "extra",
    [{"n": 0}, {"n": True}, {"max_completion_tokens": "4000"}],
    ids=["n-0", "n-bool", "max_completion_tokens-str"],
)
def test_extra_counts_that_are_not_whole_numbers_refuse_a_budgeted_run(
    srv, tmp_path: Path, extra: dict[str, Any]
) -> None:
    """An ``extra`` length key or ``n`` that is not a whole number of at least 1 bounds
    nothing the budget can read: the run is refused before any call, naming the field,
    rather than the value silently counting as no bound at all."""
    (key,) = extra
    with pytest.raises(SpecError, match=rf"model\.params\.extra\.{key}: .* whole number"):
        run(with_extra(tmp_path, srv, extra, max_cost_usd=5), tmp_path, False)
    assert srv.stats()["total"] == 0


KILLED_CHILD = """
import sys
import gradetrail

gradetrail.run_eval(
    gradetrail.load_spec(sys.argv[1]), results_root=sys.argv[2], cache_path=sys.argv[3]
)
"""


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM])
def test_calls_in_flight_at_a_kill_count_against_the_ceiling_of_a_re_run(
    srv, tmp_path: Path, stop: signal.Signals
) -> None:
    """``kill -9`` (or SIGTERM, which cancels them) with four calls in flight (the server
    holds them: it may bill them): the run directory's record counts each at its worst
    case, so a re-run cannot spend the ceiling again. Before, nothing was recorded until a
    call settled (and a cancelled call settled at $0): the record read $0 after the kill,
    and a re-run under a ceiling the killed calls had used up started."""
    spec = spec_for(tmp_path, srv, "openai", concurrency=4, max_cost_usd=100.0)
    srv.configure(faults=[{"kind": "hold", "first": 4}])
    child = subprocess.Popen(
        [sys.executable, "-c", KILLED_CHILD, spec.source, str(tmp_path / "results"),
         str(tmp_path / "c.sqlite")],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        srv.wait_held(4)
    finally:
        child.send_signal(stop)
        child.wait(timeout=60)
    run_dir = gradetrail.plan_run(spec).run_dir(tmp_path / "results")
    recorded = SpendingLog(run_dir).read()
    plan = gradetrail.plan_run(spec)
    worst = {round(worst_case_usd(plan.provider, p.request), 12) for p in plan.prepared}
    reserved = [
        json.loads(line)["reserved_usd"]
        for line in (run_dir / "spending.jsonl").read_text().splitlines()
    ]
    assert len(reserved) == 4 and set(reserved) <= worst
    assert recorded.paid_usd == 0.0 and recorded.calls_in_flight == 4
    assert recorded.in_flight_usd == pytest.approx(sum(reserved))
    assert SpendingLog(run_dir).total() == pytest.approx(sum(reserved))

    srv.reset()  # the whole run's worst case, but four of its calls may be billed already
    tight = spec.model_copy(
        update={"run": spec.run.model_copy(update={"max_cost_usd": worst_total(spec)})}
    )
    with pytest.raises(SpecError, match="4 calls in flight when a process stopped"):
        run(tight, tmp_path, False)
    assert srv.stats()["total"] == 0


def test_attempts_cut_off_by_their_timeout_count_at_their_worst_case(srv, tmp_path: Path) -> None:
    """The server stalls the first two requests past run.timeout_s (it may still finish
    and bill them, and never says): each counts at its worst case, in this run and in the
    record later runs read, and its retry reserves its own. Under a ceiling of what the
    run costs plus one and a half worst cases, the run stops starting calls with what it
    paid plus what the cut-off attempts may have cost under the ceiling. Before, a
    timed-out attempt's reservation was handed on to its retry and settled at $0: the run
    finished, 14 attempts of which 2 possibly billed, past the ceiling."""
    measured = run(spec_for(tmp_path, srv, "openai"), tmp_path / "measure", False)
    base = spec_for(tmp_path, srv, "openai")
    plan = gradetrail.plan_run(base)
    worst_one = max(worst_case_usd(plan.provider, p.request) for p in plan.prepared)
    ceiling = measured.manifest.cost_usd + 1.5 * worst_one
    srv.reset()
    srv.configure(faults=[{"kind": "stall", "seconds": 60, "first": 2}])
    spec = spec_for(
        tmp_path, srv, "openai", concurrency=1, timeout_s=1.0, max_cost_usd=ceiling,
        start_over_budget=True,
    )  # fmt: skip
    result = run(spec, tmp_path, False)
    budget = result.manifest.executor["budget"]
    assert result.manifest.status == "interrupted"
    assert "run.max_cost_usd" in (result.manifest.stop_reason or "")
    assert budget["unsettled_usd"] > 0
    assert budget["spent_usd"] + budget["unsettled_usd"] <= ceiling + 1e-12
    recorded = SpendingLog(result.run_dir).read()
    assert recorded.paid_usd == pytest.approx(paid(result))
    assert recorded.calls_in_flight == round(budget["unsettled_usd"] / worst_one)
    assert recorded.total_usd <= ceiling + 1e-12


def test_answers_that_carry_no_usage_count_at_their_worst_case(srv, tmp_path: Path) -> None:
    """A server that sends no usage (a stream without its usage chunk: older llama.cpp,
    gateways) gives answers whose tokens, and so cost, read as 0; they were billed all
    the same, so each counts at its worst case. Before, each settled as free: all 12 calls
    were made under a ceiling of three calls' worst case, the run complete, spent_usd 0."""
    head = {"id": "c", "object": "chat.completion.chunk", "created": 1}
    chunks = [
        {**head, "choices": [{"index": 0, "delta": {"content": "A: 18"}}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    stream = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    sse = {"content-type": "text/event-stream"}
    srv.configure(faults=[{"kind": "answer", "body": stream, "headers": sse}])
    probe = spec_for(tmp_path / "probe", srv, "openai_compatible", concurrency=1)
    one = worst_total(probe) / ROWS
    ceiling = one * 3.5
    spec = spec_for(
        tmp_path,
        srv,
        "openai_compatible",
        concurrency=1,
        max_cost_usd=ceiling,
        fail_fast=0,
        start_over_budget=True,
    )
    spec = spec.model_copy(update={"model": spec.model.model_copy(update={"stream": True})})
    result = run(spec, tmp_path, False)
    assert result.manifest.status == "interrupted"
    assert "run.max_cost_usd" in (result.manifest.stop_reason or "")
    spent = result.manifest.executor["budget"]["spent_usd"]
    assert srv.stats()["total"] == 3 and spent == pytest.approx(3 * one, rel=0.05)


def test_a_request_asking_for_prompt_caching_is_bounded_at_the_cache_write_rate(
    tmp_path: Path,
) -> None:
    """model.params.extra sending a cache_control (Anthropic's automatic prompt caching,
    one-hour TTL) may have every input token billed as a cache write, at twice the input
    rate: the worst case (online and at the batch tier) prices its input bound so. It was
    priced at the plain input rate, half what such a request can be billed."""
    from gradetrail.providers.base import Request

    price = {"input_per_mtok": 3.0, "output_per_mtok": 15.0}
    spec = gsm8k_spec(tmp_path, None, "anthropic", params={"max_tokens": 100}, price=price)
    provider = make_provider(spec.model, spec.base_dir)
    messages = ({"role": "user", "content": "x" * 984},)
    extra = {"cache_control": {"type": "ephemeral", "ttl": "1h"}}
    model = spec.model.name
    plain = Request("anthropic", model, None, None, messages, {"max_tokens": 100})
    cached = Request("anthropic", model, None, None, messages, {"max_tokens": 100, "extra": extra})
    plain_in = len(json.dumps(messages[0])) + 32
    cached_in = plain_in + len(json.dumps(extra))
    assert worst_case_usd(provider, plain) == pytest.approx((plain_in * 3 + 1500) / 1e6)
    assert worst_case_usd(provider, cached) == pytest.approx((cached_in * 6 + 1500) / 1e6)
    assert worst_case_usd(provider, cached, batch=True) == pytest.approx(
        (cached_in * 6 + 1500) / 2e6
    )


def test_a_sweeps_ceiling_holds_across_its_cells_and_its_re_runs(srv, tmp_path: Path) -> None:
    """A sweep's max_cost_usd (or --max-cost) of one and a half cells' cost: the sweep
    stops inside its second cell (exit 3, the third never starts) having spent at most the
    ceiling over all its cells; the same command again spends nothing; a larger ceiling
    finishes it, no request paid twice. Before, a sweep had no ceiling of its own: each
    cell's run.max_cost_usd held, so N cells could spend N times it."""
    from cli_support import run_cli

    from gradetrail.ci.sweep import check_sweep
    from gradetrail.executors.budget import BudgetExhausted

    measured = run(spec_for(tmp_path, srv, "openai"), tmp_path / "measure", False)
    one_cell = measured.manifest.cost_usd
    srv.reset()
    spec_for(tmp_path, srv, "openai", start_over_budget=True)
    models = ["175b_verification", "175b_finetuning", "6b_verification"]
    sweep = tmp_path / "spec" / "sweep.yaml"
    raw = {"name": "budget", "spec": "spec.yaml", "axes": {"model.name": models}}
    sweep.write_text(yaml.safe_dump({**raw, "max_cost_usd": one_cell * 1.5}))
    root = tmp_path / "results"
    args = ("sweep", str(sweep), "--results-root", str(root), "--cache", str(tmp_path / "c.db"))

    def spent() -> list[float]:
        return [SpendingLog(d).total() for d in sorted(root.glob("gsm8k-http-*"))]

    first = run_cli(*args)
    assert first.code == 3, first.err
    assert first.err_lines[-1].startswith("error: cell 175b_finetuning: ")
    assert len(spent()) == 2 and 0 < sum(spent()) <= one_cell * 1.5 + 1e-12
    calls = srv.stats()["total"]
    assert ROWS < calls < 2 * ROWS
    again = run_cli(*args, "--json")  # what was done, as `run --json` prints a stop
    assert again.code == 3, again.err
    assert again.err_lines[-1].startswith("error: cell 175b_finetuning: ")
    shown = json.loads(again.out)  # before: nothing on stdout
    assert (shown["passed"], shown["status"], shown["stop_signal"]) == (None, "interrupted", None)
    assert again.err_lines[-1] == f"error: cell 175b_finetuning: {shown['stop_reason']}"
    assert [c["outcome"] for c in shown["cells"]] == ["existing", "interrupted", "pending"]
    assert [c["name"] for c in shown["cells"]] == models
    # the CI check (and the pytest plugin) says the ceiling, exit code 3, not "run it
    # again to finish it", which would stop at the same ceiling
    with pytest.raises(BudgetExhausted, match=r"^sweep budget: cell 175b_finetuning: ") as err:
        check_sweep(sweep, results_root=root, cache_path=tmp_path / "c.db")
    assert err.value.exit_code == 3
    assert srv.stats()["total"] == calls and sum(spent()) <= one_cell * 1.5 + 1e-12
    done = run_cli(*args, "--max-cost", str(one_cell * 4))
    assert done.code in (0, 1), done.err
    assert srv.stats()["total"] == 3 * ROWS and srv.stats()["repeated"] == 0
    assert len(spent()) == 3 and sum(spent()) <= one_cell * 4


def test_a_replay_run_is_free_under_a_ceiling(gsm8k_copy: Path, tmp_path: Path) -> None:
    """A replay calls nothing, so a ceiling holds it at 0 with no price or max_tokens: the
    bundled example runs under --max-cost (before: refused, exit 2, "model.params.max_tokens:
    a budgeted run needs a bound", then with max_tokens "no price is known for replay")."""
    from gradetrail.providers.base import Request

    spec = gradetrail.load_spec(gsm8k_copy, overrides=["dataset.limit=20", "run.max_cost_usd=0.01"])
    result = gradetrail.run_eval(spec, results_root=tmp_path / "results")
    assert result.manifest.status == "complete"
    assert result.manifest.counts == {"scored": 20}
    message = {"role": "user", "content": "Q: " + "x" * 10_000}
    request = Request("replay", spec.model.name, None, None, (message,), {})
    assert worst_case_usd(make_provider(spec.model, spec.base_dir), request) == 0.0
