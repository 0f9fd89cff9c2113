"""Batched runs at the HTTP boundary: the real ``openai`` and ``anthropic`` SDKs against
the protocol server's batch APIs (tests/protocol_batches.py), polled on a fake clock.

Each test checks what the server counted (every custom_id submitted once, or once more
for each retry of a failed request), the rows, and what the run directory recorded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from http_support import SECRET_KEY, gsm8k_spec
from paths import GSM8K_DATA
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

import gradetrail
from gradetrail.engine.batching import BatchOptions
from gradetrail.errors import SpecError
from gradetrail.rundir.batches import BatchLedger
from gradetrail.rundir.spending import SpendingLog
from gradetrail.testing import FakeClock

server = protocol_server_fixture(scope="module", name="server")
srv = fresh_protocol_server_fixture("server", name="srv")

#: both batch APIs: (spec provider, base URL attribute of the server handle)
BATCH_PROTOCOLS = ("openai", "anthropic")
#: USD per million tokens: online; a batch response costs half
PRICE = {"input_per_mtok": 2.0, "output_per_mtok": 8.0}


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_KEY)


def batch_spec(tmp_path: Path, srv: Any, protocol: str, limit: int = 12) -> gradetrail.EvalSpec:
    """GSM8K's first ``limit`` problems over ``protocol``, priced (see :data:`PRICE`)."""
    return gsm8k_spec(tmp_path / "spec", srv, protocol, limit=limit, price=PRICE)


def run(
    spec: gradetrail.EvalSpec, tmp_path: Path, clock: FakeClock, **options: Any
) -> gradetrail.RunResult:
    """One batched run of ``spec`` on ``clock``, 5 requests a batch unless told."""
    options.setdefault("max_requests", 5)
    batch = BatchOptions(sleep=clock.sleep, clock=clock.now, **options)
    return gradetrail.run_eval(
        spec,
        results_root=tmp_path / "results",
        cache_path=tmp_path / "cache.sqlite",
        batch=batch,
    )


def rows(result: gradetrail.RunResult) -> list[dict[str, Any]]:
    return list(gradetrail.read_results(result.run_dir))


@pytest.mark.parametrize("protocol", BATCH_PROTOCOLS)
def test_batched_run_scores_as_online_at_half_the_price(srv, tmp_path: Path, protocol: str) -> None:
    """12 requests in 3 batches (5, 5, 2): every custom_id submitted once, the rows
    scored as the online run scores them, at half its cost; polls back off on the clock."""
    srv.batches(polls=2)
    spec = batch_spec(tmp_path, srv, protocol)
    clock = FakeClock()
    batched = run(spec, tmp_path / "b", clock, first_poll_s=10, max_poll_s=30)
    counts = srv.batches()
    assert counts["created"] == 3 and counts["requests"] == 12 and counts["repeated"] == 0
    assert batched.manifest.status == "complete"
    online = gradetrail.run_eval(
        spec, results_root=tmp_path / "o" / "results", cache_path=tmp_path / "o" / "c.sqlite"
    )
    b_rows, o_rows = rows(batched), rows(online)
    assert [r["score"] for r in b_rows] == [r["score"] for r in o_rows]
    assert batched.manifest.score.mean == online.manifest.score.mean
    batch_cost = sum(r["cost_usd"] for r in b_rows)
    online_cost = sum(r["cost_usd"] for r in o_rows)
    assert online_cost > 0 and batch_cost == pytest.approx(online_cost / 2)
    record = batched.manifest.executor["batch"]
    assert record["price_tier"] == "batch" and len(record["batch_ids"]) == 3
    assert record["sent"] == 12 and record["collected"] == 12 and record["waiting"] == []
    assert record["cost_usd"] == pytest.approx(batch_cost)
    # paid by this run (in its batches): not cache hits
    assert batched.manifest.cost_usd == pytest.approx(batch_cost)
    assert batched.manifest.cache_hits == 0 and all(not r["cached"] for r in b_rows)
    # each batch stays in progress for two polls: 10 s, then 20 s, then it has ended
    assert clock.slept == [10, 20]
    assert "batched" not in batched.manifest.identity_hash  # same identity as online
    assert batched.manifest.identity_hash == online.manifest.identity_hash


@pytest.mark.parametrize("protocol", BATCH_PROTOCOLS)
def test_rerun_collects_from_the_cache_and_sends_nothing(
    srv, tmp_path: Path, protocol: str
) -> None:
    spec = batch_spec(tmp_path, srv, protocol, limit=4)
    run(spec, tmp_path, FakeClock())
    again = run(spec, tmp_path, FakeClock())
    assert srv.batches()["created"] == 1
    assert again.manifest.status == "complete" and again.manifest.cache_hits == 4


@pytest.mark.parametrize("protocol", BATCH_PROTOCOLS)
def test_detach_then_collect_never_resubmits(srv, tmp_path: Path, protocol: str) -> None:
    """--detach sends, records and returns (interrupted, batch ids in the manifest and
    the ledger); the same call later collects every response without sending again."""
    spec = batch_spec(tmp_path, srv, protocol, limit=7)
    first = run(spec, tmp_path, FakeClock(), detach=True)
    assert first.manifest.status == "interrupted"
    waiting = first.manifest.executor["batch"]["waiting"]
    assert len(waiting) == 2
    ledger = BatchLedger.read(first.run_dir)
    assert ledger.batch_ids() == waiting and len(ledger.in_flight()) == 7
    second = run(spec, tmp_path, FakeClock())
    assert second.manifest.status == "complete"
    assert second.manifest.counts == {"scored": 7}
    counts = srv.batches()
    assert counts["created"] == 2 and counts["requests"] == 7 and counts["repeated"] == 0


@pytest.mark.parametrize("protocol", BATCH_PROTOCOLS)
def test_expired_requests_are_retried_in_a_new_batch_and_bad_ones_recorded(
    srv, tmp_path: Path, protocol: str
) -> None:
    """A batch that expires after answering 3 of its 5 requests: the other 2 go in a new
    batch (the retry policy's transient errors); a request the API refuses (400) is the
    row's provider_error at once, never sent again."""
    spec = batch_spec(tmp_path, srv, protocol, limit=5)
    first_q = _question(0)
    srv.configure(
        faults=[{"kind": "error", "status": 400, "contains": first_q[:60], "message": "bad"}]
    )
    srv.batches(expire_after=3)
    result = run(spec, tmp_path, FakeClock(), max_requests=5)
    srv.batches(expire_after=None)
    states = [r["state"] for r in rows(result)]
    assert states.count("provider_error") == 1 and states.count("scored") == 4
    bad = next(r for r in rows(result) if r["state"] == "provider_error")
    assert bad["error"]["status"] == 400 and bad["attempts"] == 1
    counts = srv.batches()
    # 5 in the first batch; the 2 it expired before answering went in a second batch,
    # which also expired after 3 (it held only 2): both answered there
    assert counts["created"] == 2 and counts["requests"] == 7
    assert counts["repeated"] == 2
    assert result.manifest.status == "complete"


def test_expired_past_the_retries_is_a_provider_error(srv, tmp_path: Path) -> None:
    """Every batch expires before answering anything: max_retries + 1 batches, then each
    row is a transient provider_error naming the expiry."""
    spec = batch_spec(tmp_path, srv, "openai", limit=2)
    spec = spec.model_copy(update={"run": spec.run.model_copy(update={"max_retries": 1})})
    srv.batches(expire_after=0)
    result = run(spec, tmp_path, FakeClock())
    assert srv.batches()["created"] == 2
    for row in rows(result):
        assert row["state"] == "provider_error" and row["attempts"] == 2
        assert row["error"]["code"] == "batch_expired"


def test_fallback_online_sends_expired_requests_online(srv, tmp_path: Path) -> None:
    spec = batch_spec(tmp_path, srv, "anthropic", limit=3)
    srv.batches(expire_after=1)
    result = run(spec, tmp_path, FakeClock(), fallback="online")
    assert srv.batches()["created"] == 1
    assert result.manifest.counts == {"scored": 3}
    assert result.manifest.executor["batch"]["online"] == 2
    costs = sorted(r["cost_usd"] for r in rows(result))
    assert costs[0] < costs[-1]  # one at the batch price, two online


def test_a_provider_without_a_batch_api_is_refused(tmp_path: Path) -> None:
    spec = gsm8k_spec(tmp_path, None, "openai_compatible", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(SpecError, match="has no batch API; run without --batch"):
        gradetrail.run_eval(spec, results_root=tmp_path / "r", batch=BatchOptions())


def _question(index: int) -> str:
    path = Path(__file__).resolve().parents[2] / "examples/data/gsm8k/test.jsonl"
    with path.open() as handle:
        for n, line in enumerate(handle):
            if n == index:
                return json.loads(line)["question"]
    raise IndexError(index)


def test_batches_are_split_by_bytes_too(srv, tmp_path: Path) -> None:
    """A byte limit that holds two requests' lines makes three batches of six requests;
    a limit under one request's line records it as the row's error, sent nowhere."""
    spec = batch_spec(tmp_path, srv, "openai", limit=6)
    result = run(spec, tmp_path / "a", FakeClock(), max_requests=100, max_bytes=1500)
    assert srv.batches()["created"] == 3 and result.manifest.counts == {"scored": 6}
    srv.reset()
    tiny = run(spec, tmp_path / "b", FakeClock(), max_bytes=100)
    assert srv.batches()["created"] == 0
    (row, *_) = rows(tiny)
    assert row["state"] == "provider_error" and "over the batch limit" in row["error"]["message"]


@pytest.mark.parametrize("protocol", BATCH_PROTOCOLS)
def test_a_batch_cancelled_elsewhere_is_reported_and_its_requests_sent_again(
    srv, tmp_path: Path, protocol: str
) -> None:
    """Someone cancels the batch (in the provider's console) while the run waits: the
    manifest names it, and its unanswered requests go in a new batch."""
    spec = batch_spec(tmp_path, srv, protocol, limit=3)
    srv.batches(polls=1)
    clock = FakeClock()
    path = "/v1/messages/batches" if protocol == "anthropic" else "/v1/batches"

    async def cancel_then_sleep(seconds: float) -> None:
        for batch_id, state in srv.batches()["states"].items():
            if state == "in_progress" and not clock.slept:
                srv._call("POST", f"{path}/{batch_id}/cancel", {})
        await clock.sleep(seconds)

    batch = BatchOptions(sleep=cancel_then_sleep, clock=clock.now)
    result = gradetrail.run_eval(
        spec, results_root=tmp_path / "r", cache_path=tmp_path / "c.sqlite", batch=batch
    )
    record = result.manifest.executor["batch"]
    assert len(record["cancelled"]) == 1 and len(record["batch_ids"]) == 2
    assert result.manifest.counts == {"scored": 3}
    assert srv.batches()["repeated"] == 3  # each sent twice: once cancelled, once answered


def test_judge_calls_go_in_a_batch_of_their_own_after_the_answers(srv, tmp_path: Path) -> None:
    """Answers through OpenAI's Batch API, then the judge's calls through Anthropic's
    Message Batches: no online call at all; a re-run sends nothing."""
    import yaml

    root = tmp_path / "judged"
    root.mkdir()
    (root / "judge.j2").write_text("Grade this response.\nResponse: {{ response }}\n")
    spec_data = yaml.safe_load(
        Path(batch_spec(tmp_path, srv, "openai", limit=4).source).read_text()
    )
    spec_data["scorer"] = {
        "type": "judge",
        "file": "judge.j2",
        "model": {
            "provider": "anthropic",
            "name": "175b_verification",
            "base_url": srv.anthropic_base_url,
            "price": PRICE,
        },
    }
    (root / "spec.yaml").write_text(yaml.safe_dump(spec_data))
    srv.configure(script=[{"contains": "Grade this response", "reply": "GRADE: C"}])
    spec = gradetrail.load_spec(root / "spec.yaml")
    result = run(spec, tmp_path, FakeClock())
    assert result.manifest.counts == {"scored": 4} and result.manifest.score.mean == 1.0
    record = result.manifest.executor["batch"]
    (judges,) = record["judges"]
    assert judges["protocol"] == "anthropic" and judges["sent"] == 4 and judges["collected"] == 4
    counts = srv.batches()
    assert counts["created"] == 2 and counts["requests"] == 8 and counts["repeated"] == 0
    assert srv.stats()["total"] == 8  # every answer was made inside a batch: none online
    again = run(spec, tmp_path, FakeClock())
    assert again.manifest.counts == {"scored": 4} and srv.batches()["created"] == 2


def test_anthropic_batches_ask_for_the_runs_api_version(srv, tmp_path: Path) -> None:
    """The Message Batches client sends the run's ``anthropic-version`` (default
    2023-06-01), as the online clients do, never the installed SDK's own default: under
    2026-10-21 a request with a temperature is refused, so the batched rows would fail
    where the online ones score."""
    spec = gsm8k_spec(
        tmp_path / "spec", srv, "anthropic", limit=3, price=PRICE, params={"temperature": 0.0}
    )
    batched = run(spec, tmp_path / "b", FakeClock())
    assert batched.manifest.counts == {"scored": 3}
    assert set(srv.stats()["versions"]) == {"2023-06-01"}


@pytest.mark.parametrize("protocol", BATCH_PROTOCOLS)
def test_rows_sharing_one_request_are_paid_once(srv, tmp_path: Path, protocol: str) -> None:
    """Six rows, the same three questions twice: one batch of three requests (their
    custom_ids are cache keys), paid once each. One row of each request is the paid one;
    its twin is a cache hit, as online, and the manifest's cost is what the batch cost,
    not twice it."""
    lines = (GSM8K_DATA / "test.jsonl").read_text().splitlines()[:3]
    rows_in = [{**json.loads(line), "id": f"r{i}"} for i, line in enumerate(lines * 2)]
    data = tmp_path / "dup.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows_in))
    base = batch_spec(tmp_path, srv, protocol)
    spec = gradetrail.load_spec(base.source, [f"dataset.path={data}", "dataset.limit=null"])
    result = run(spec, tmp_path, FakeClock())
    counts = srv.batches()
    assert counts["created"] == 1 and counts["requests"] == 3 and counts["repeated"] == 0
    got = rows(result)
    # one row of each twin pair is the paid one (cost at the batch price), one a cache hit
    assert [r["cost_usd"] for r in got[:3]] == [r["cost_usd"] for r in got[3:]]
    assert all(got[i]["cached"] != got[i + 3]["cached"] for i in range(3))
    batch_cost = result.manifest.executor["batch"]["cost_usd"]
    assert batch_cost == pytest.approx(sum(r["cost_usd"] for r in got[:3]))
    # unfixed: every row counted as paid, cost_usd twice batch_cost, no cache hits
    assert result.manifest.cost_usd == pytest.approx(batch_cost)
    assert result.manifest.cache_hits == 3


def test_batch_answers_billed_then_refused_are_counted_paid(srv, tmp_path: Path) -> None:
    """Under model.require_served_model, a batch answer from another model is billed (at
    the batch price) and then refused: its row keeps its cost, and the batch's cost (what
    the manifest and the budget count) includes it."""
    srv.configure(faults=[{"kind": "alias", "served_model": "some-other-model"}])
    base = batch_spec(tmp_path, srv, "openai", limit=4)
    raw = base.model_dump(mode="json", exclude_none=True)
    raw["model"]["require_served_model"] = True
    raw["run"]["max_cost_usd"] = 1.0
    raw["model"]["params"] = {"max_tokens": 300}
    path = Path(base.source)
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    result = run(gradetrail.load_spec(path), tmp_path, FakeClock())
    got = rows(result)
    assert all(r["state"] == "provider_error" for r in got)
    billed = sum(r["cost_usd"] for r in got)
    assert billed > 0
    # unfixed: the batch's cost and the budget's spending were $0
    assert result.manifest.executor["batch"]["cost_usd"] == pytest.approx(billed)
    assert SpendingLog(result.run_dir).total() == pytest.approx(billed)


def _budgeted(tmp_path: Path, srv: Any, protocol: str, limit: int) -> gradetrail.EvalSpec:
    """``batch_spec`` under a $1 ceiling (what the run paid goes in spending.jsonl)."""
    base = batch_spec(tmp_path, srv, protocol, limit=limit)
    raw = base.model_dump(mode="json", exclude_none=True)
    raw["run"]["max_cost_usd"] = 1.0
    raw["model"]["params"] = {"max_tokens": 300}
    path = Path(base.source)
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return gradetrail.load_spec(path)


@pytest.mark.parametrize("protocol", BATCH_PROTOCOLS)
def test_results_repeated_and_out_of_order_are_cached_and_paid_once(
    srv, tmp_path: Path, protocol: str
) -> None:
    """A results file with its lines reversed, each twice, and one for a custom_id the run
    never sent: each response is collected and paid once (the rows' cost, the batch's and
    the budget's spending agree)."""
    srv.batches(polls=0, mangle=["reverse", "duplicate", "unknown"])
    result = run(_budgeted(tmp_path, srv, protocol, 4), tmp_path, FakeClock())
    assert srv.batches()["repeated"] == 0
    got = rows(result)
    assert [r["state"] for r in got] == ["scored"] * 4
    paid = sum(r["cost_usd"] for r in got)
    record = result.manifest.executor["batch"]
    # unfixed: collected 8, the batch's cost and the spending twice what the rows cost
    assert record["collected"] == 4
    assert record["cost_usd"] == pytest.approx(paid)
    assert SpendingLog(result.run_dir).total() == pytest.approx(paid)


@pytest.mark.parametrize("protocol", BATCH_PROTOCOLS)
@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_unreadable_results_keep_what_was_read_and_send_nothing_twice(
    srv, tmp_path: Path, protocol: str, damage: str
) -> None:
    """Results whose last line is cut in half, or that are not JSONL at all: every line
    read is cached and paid; a request whose line could not be read (the API may have
    billed it) is its row's error saying to re-run, never sent again by the run itself;
    the re-run sends only those."""
    srv.batches(polls=0, mangle=[damage])
    spec = batch_spec(tmp_path, srv, protocol, limit=4)
    result = run(spec, tmp_path, FakeClock())  # unfixed: JSONDecodeError, nothing kept
    counts = srv.batches()
    assert counts["created"] == 1 and counts["repeated"] == 0
    got = rows(result)
    unread = [r for r in got if r["state"] == "provider_error"]
    assert len(unread) == (1 if damage == "truncate" else 4)
    assert all(r["state"] == "scored" for r in got if r not in unread)
    assert all(r["error"]["code"] == "unreadable_result" for r in unread)
    assert "re-run to send it again" in unread[0]["error"]["message"]
    srv.batches(mangle=[])
    again = run(spec, tmp_path, FakeClock())
    assert again.manifest.counts == {"scored": 4}
    assert srv.batches()["requests"] == 4 + len(unread)


def test_a_batch_failed_at_validation_names_the_line_and_resends_the_others(
    srv, tmp_path: Path
) -> None:
    """An OpenAI batch ``failed`` at validation, its ``errors`` naming line 1: that request
    is its row's error with the API's message, never resent; the 3 others (never run) go
    in one new batch. Unfixed: all 4 sent 4 times, each row 'no result'."""
    srv.batches(polls=0, fail="This line is too large (210 MB).")
    result = run(batch_spec(tmp_path, srv, "openai", limit=4), tmp_path, FakeClock())
    counts = srv.batches()
    assert counts["created"] == 2 and counts["requests"] == 7
    got = rows(result)
    assert [r["state"] for r in got] == ["provider_error"] + ["scored"] * 3
    error = got[0]["error"]
    assert error["status"] == 400 and not error["transient"]
    assert error["message"] == (
        "batch failed at validation: line 1: This line is too large (210 MB). (invalid_request)"
    )
    assert got[0]["attempts"] == 1


@pytest.mark.parametrize("protocol", BATCH_PROTOCOLS)
def test_throttled_polls_are_waited_out_at_their_retry_after(
    srv, tmp_path: Path, protocol: str
) -> None:
    """Six polls in a row answered 429 (Retry-After: 7 s), past the retry policy's 3
    retries: the wait goes on (the next poll no sooner than 7 s, the interval backing off
    as before) and the batch is collected, sent once. Unfixed: RateLimited out of the run
    after the fourth 429, the batch left to a re-run."""
    srv.batches(polls=1, poll_429=6)
    clock = FakeClock()
    result = run(batch_spec(tmp_path, srv, protocol, limit=3), tmp_path, clock, first_poll_s=5)
    assert result.manifest.status == "complete" and result.manifest.counts == {"scored": 3}
    assert srv.batches()["created"] == 1 and srv.batches()["repeated"] == 0
    # 3 retries of the first poll at 7 s; the wait's 7 s (its Retry-After, over the 5 s
    # interval); 2 retries at 7 s; then the interval (10 s): in progress once, then ended
    assert clock.slept == [7, 7, 7, 7, 7, 7, 10]


@pytest.mark.parametrize("protocol", BATCH_PROTOCOLS)
def test_results_that_fail_to_download_are_read_again_never_resent(
    srv, tmp_path: Path, protocol: str
) -> None:
    """The results download answers 500 six times (past the retry policy's 3 retries):
    the pass waits (first_poll_s doubled) and reads them again, collecting all 3. When it
    never works, the run ends interrupted with the batch still to collect, and the re-run
    collects it: sent once. Unfixed: '500 server_error' out of the run."""
    srv.batches(polls=0, results_500=6)
    clock = FakeClock()
    spec = batch_spec(tmp_path / "a", srv, protocol, limit=3)
    result = run(spec, tmp_path / "a", clock, first_poll_s=10)
    assert result.manifest.status == "complete" and result.manifest.counts == {"scored": 3}
    assert 20 in clock.slept  # the pass's own wait between reads, on the injected clock
    srv.batches(reset=True)
    srv.batches(polls=0, results_500=10**6)
    spec = batch_spec(tmp_path / "b", srv, protocol, limit=3)
    stuck = run(spec, tmp_path / "b", FakeClock())
    assert stuck.manifest.status == "interrupted"
    assert len(stuck.manifest.executor["batch"]["waiting"]) == 1
    srv.batches(results_500=0)
    again = run(spec, tmp_path / "b", FakeClock())
    assert again.manifest.counts == {"scored": 3}
    assert srv.batches()["created"] == 1 and srv.batches()["repeated"] == 0


def test_two_judges_on_one_batch_api_collect_only_their_own_batches(srv, tmp_path: Path) -> None:
    """Two judge models on Anthropic's Message Batches, each pass with its own batch, both
    still running when the first process stops waiting: the re-run's first judge pass
    polls and collects its own batch only, the second its own; every judge request sent
    once. Unfixed: with ``scorers:`` no judge call went in a batch (all 8 online, at the
    full price); and the first pass took the second's batch as its own (none of its
    results its requests), so the second judge's 4 paid answers were dropped and sent
    again in a fourth batch."""
    root = tmp_path / "judged"
    root.mkdir()
    (root / "judge.j2").write_text("Grade this response.\nResponse: {{ response }}\n")
    spec_data = yaml.safe_load(
        Path(batch_spec(tmp_path, srv, "openai", limit=4).source).read_text()
    )
    spec_data.pop("scorer")

    def judge(name: str) -> dict[str, Any]:
        model = {"provider": "anthropic", "name": name, "base_url": srv.anthropic_base_url}
        return {
            "name": "m" + name,
            "type": "judge",
            "file": "judge.j2",
            "model": model | {"price": PRICE},
        }

    spec_data["scorers"] = [judge("6b_verification"), judge("175b_verification")]
    (root / "spec.yaml").write_text(yaml.safe_dump(spec_data))
    srv.configure(script=[{"contains": "Grade this response", "reply": "GRADE: C"}])
    spec = gradetrail.load_spec(root / "spec.yaml")
    srv.batches(polls=1)
    clock = FakeClock()

    async def sleep(seconds: float) -> None:  # batches made from now on stay in progress
        srv.batches(polls=100)
        await clock.sleep(seconds)

    options = {"sleep": sleep, "clock": clock.now, "max_wait_s": 30, "first_poll_s": 10}
    first = gradetrail.run_eval(
        spec,
        results_root=tmp_path / "results",
        cache_path=tmp_path / "cache.sqlite",
        batch=BatchOptions(**options),
    )
    assert first.manifest.status == "interrupted"
    assert len(first.manifest.executor["batch"]["waiting"]) == 2  # a batch each judge
    srv.batches(polls=0)
    again = run(spec, tmp_path, FakeClock())
    assert again.manifest.status == "complete" and again.manifest.counts == {"scored": 4}
    counts = srv.batches()
    assert counts["created"] == 3 and counts["requests"] == 12 and counts["repeated"] == 0
    judges = again.manifest.executor["batch"]["judges"]
    assert [j["collected"] for j in judges] == [4, 4]


@pytest.mark.parametrize(("etype", "status"), [("billing_error", 402), ("request_too_large", 413)])
def test_anthropic_errored_results_of_a_permanent_type_are_not_resent(
    srv, tmp_path: Path, etype: str, status: int
) -> None:
    """An ``errored`` batch result whose error type is Anthropic's ``billing_error`` or
    ``request_too_large`` is the row's permanent error with that status, in one batch.
    Unfixed: read as a 500, transient, the request was sent in 3 more batches."""
    srv.configure(
        faults=[{"kind": "error", "status": status, "type": etype, "contains": _question(0)[:60]}]
    )
    srv.batches(polls=0)
    result = run(batch_spec(tmp_path, srv, "anthropic", limit=3), tmp_path, FakeClock())
    assert srv.batches()["created"] == 1
    got = rows(result)
    assert [r["state"] for r in got] == ["provider_error", "scored", "scored"]
    assert got[0]["error"]["status"] == status and got[0]["error"]["transient"] is False
    assert got[0]["error"]["error_type"] == etype


@pytest.mark.parametrize("protocol", BATCH_PROTOCOLS)
def test_a_batch_collected_again_after_a_kill_is_spent_once(
    srv, tmp_path: Path, protocol: str
) -> None:
    """A process killed after recording what a batch cost in spending.jsonl and before the
    ledger's 'collected' line (that line cut off here, as the kill leaves it): the re-run
    collects the batch again, and the run's spending counts it once. It counted twice
    (the ceiling reached at half the money)."""
    spec = _budgeted(tmp_path, srv, protocol, 4)
    srv.batches(polls=0)
    first = run(spec, tmp_path, FakeClock())
    paid = sum(r["cost_usd"] for r in rows(first))
    assert paid > 0 and SpendingLog(first.run_dir).total() == pytest.approx(paid)
    ledger = first.run_dir / "batches.jsonl"
    kept = [x for x in ledger.read_text().splitlines() if '"collected"' not in x]
    ledger.write_text("".join(x + "\n" for x in kept))
    again = run(spec, tmp_path, FakeClock())
    assert again.manifest.counts == {"scored": 4}
    assert srv.batches()["created"] == 1  # collected again, not sent again
    assert SpendingLog(again.run_dir).total() == pytest.approx(paid)


@pytest.mark.parametrize(
    ("protocol", "mangle", "code"),
    [
        ("openai", ["odd_code"], "odd_line_code"),
        ("anthropic", ["odd_code"], "odd_error"),
        ("anthropic", ["odd_code", "result_type"], "odd"),
    ],
)
def test_a_per_line_error_no_documentation_lists_is_recorded_not_resent(
    srv, tmp_path: Path, protocol: str, mangle: list[str], code: str
) -> None:
    """A results line with an error code (OpenAI), error type or result type (Anthropic)
    that no documentation lists is that request's permanent error: recorded at once, the
    request not sent again (before: retried in a new batch run.max_retries times, each
    one paid for if the API billed it)."""
    srv.batches(polls=0, mangle=mangle)
    spec = batch_spec(tmp_path, srv, protocol, limit=4)
    result = run(spec, tmp_path, FakeClock())
    assert srv.batches()["created"] == 1 and srv.batches()["requests"] == 4
    assert result.manifest.counts == {"scored": 3, "provider_error": 1}
    (failed,) = [r for r in rows(result) if r["state"] == "provider_error"]
    error = failed["error"]
    assert (error["kind"], error["transient"]) == ("BadRequest", False)
    assert code in error["message"] or error["error_type"] == code
