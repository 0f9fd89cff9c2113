"""``gradetrail run --batch [--detach]`` and ``gradetrail batches`` against the protocol
server's batch API, in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from http_support import SECRET_KEY, gsm8k_spec
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

server = protocol_server_fixture(scope="module", name="server")
#: USD per million tokens (online; a batch response costs half)
PRICE = {"input_per_mtok": 2.0, "output_per_mtok": 8.0}
srv = fresh_protocol_server_fixture("server", name="srv")


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_KEY)


def test_detach_list_then_collect(srv, cli, tmp_path: Path) -> None:
    spec = gsm8k_spec(tmp_path / "s", srv, "openai", limit=3)
    srv.batches(polls=0)
    first = cli("run", spec.source, "--batch", "--detach", "--print-run-dir")
    assert first.exit_code == 0, first.stderr
    run_dir = first.stdout.strip().splitlines()[-1]
    assert "batches are still running" in first.stderr and "run the same command" in first.stderr
    listed = cli("batches", run_dir, "--json")
    (row,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert row["state"] == "in flight" and row["requests"] == 3 and row["batch_id"]
    second = cli("run", spec.source, "--batch")
    assert second.exit_code == 0, second.stderr
    assert "0 requests sent, 3 collected through openai batches" in second.stdout
    assert srv.batches()["repeated"] == 0 and srv.batches()["requests"] == 3
    text = cli("batches", run_dir).stdout
    assert "collected" in text and "3 ok, 0 failed" in text


def test_batches_of_a_missing_directory_says_so(cli, tmp_path: Path) -> None:
    out = cli("batches", str(tmp_path / "nope"))
    assert out.exit_code == 2 and "not a run directory" in out.stderr


def test_batches_of_a_directory_no_run_wrote_says_so(cli, tmp_path: Path) -> None:
    """A directory that exists but is no run's (the results root itself, a typo): exit 2,
    one line, as the docstring says (it was "no batches", exit 0)."""
    root = tmp_path / "results"
    root.mkdir()
    out = cli("batches", str(root))
    assert out.exit_code == 2 and "not a run directory" in out.stderr
    assert out.stderr.count("\n") == 1 and "--results-root" in out.stderr


def test_detach_without_batch_is_refused(cli, tmp_path: Path) -> None:
    out = cli("run", str(tmp_path / "x.yaml"), "--detach")
    assert out.exit_code == 2 and "needs --batch" in out.stderr


def test_estimate_makes_no_call_and_counts_what_the_cache_lacks(srv, cli, tmp_path: Path) -> None:
    spec = gsm8k_spec(
        tmp_path / "s",
        srv,
        "openai",
        limit=4,
        price={"input_per_mtok": 2.0, "output_per_mtok": 8.0},
        params={"max_tokens": 100},
    )
    out = cli("run", spec.source, "--estimate", "--batch", "--json")
    assert out.exit_code == 0, out.stderr
    found = json.loads(out.stdout)
    assert found["to_make"] == 4 and found["max_output_tokens"] == 400
    assert found["price_tier"] == "batch" and 0 < found["cost_usd"] <= found["max_cost_usd"]
    assert srv.stats()["total"] == 0 and srv.batches()["created"] == 0
    srv.batches(polls=0)
    assert cli("run", spec.source, "--batch").exit_code == 0
    again = json.loads(cli("run", spec.source, "--estimate", "--json").stdout)
    assert again["to_make"] == 0 and again["cost_usd"] == 0


def test_max_cost_stops_with_exit_3_and_says_how_to_finish(srv, cli, tmp_path: Path) -> None:
    spec = gsm8k_spec(
        tmp_path / "s",
        srv,
        "openai",
        limit=6,
        price={"input_per_mtok": 2.0, "output_per_mtok": 8.0},
        params={"max_tokens": 100},
        run={"concurrency": 1},
    )
    refused = cli("run", spec.source, "--max-cost", "0.0001")
    assert refused.exit_code == 2 and "--start-over-budget" in refused.stderr
    assert srv.stats()["total"] == 0
    stopped = cli("run", spec.source, "--max-cost", "0.003", "--start-over-budget")
    assert stopped.exit_code == 3, stopped.stderr
    assert "re-run with a larger --max-cost" in stopped.stderr
    assert 0 < srv.stats()["total"] < 6
    done = cli("run", spec.source, "--max-cost", "1")
    assert done.exit_code == 0, done.stderr
    assert "spent of $1.0000 (run.max_cost_usd)" in done.stdout
    assert srv.stats()["total"] == 6 and srv.stats()["repeated"] == 0


def test_a_batch_the_api_does_not_know_is_told_in_one_line(srv, cli, tmp_path: Path) -> None:
    """A recorded batch the API answers 404 for (another key's, or deleted): exit 1, one
    line naming the batch and how to collect it, the ledger kept (it was the bare '404
    invalid_request_error: batch not found')."""
    spec = gsm8k_spec(tmp_path / "s", srv, "openai", limit=3)
    srv.batches(polls=0)
    first = cli("run", spec.source, "--batch", "--detach", "--print-run-dir")
    run_dir = Path(first.stdout.strip().splitlines()[-1])
    (batch_id,) = [
        json.loads(line)["batch_id"]
        for line in cli("batches", str(run_dir), "--json").stdout.splitlines()
    ]
    srv.batches(reset=True)
    out = cli("run", spec.source, "--batch")
    assert out.exit_code == 1
    error = out.stderr.splitlines()[0]
    assert error.startswith(f"error: polling batch {batch_id} (openai) was refused: 404")
    assert "with the key that sent it, re-run the same command" in error
    assert srv.batches()["created"] == 0  # nothing sent again


def test_batch_cost_so_far_counts_every_process_that_collected(srv, cli, tmp_path: Path) -> None:
    """A batch collected by a first process (its other batch still running when it stopped
    waiting), the rest by a second: ``gradetrail batches`` shows each collected batch's
    cost and, as the run's batch cost so far, what all of them cost (every row's). It showed
    the last process's only (its manifest's): $0.000598 of $0.00093."""
    import gradetrail
    from gradetrail.engine.batching import BatchOptions
    from gradetrail.testing import FakeClock

    spec = gsm8k_spec(tmp_path / "s", srv, "openai", limit=4, price=PRICE)
    srv.batches(polls=1, expire_after=1)  # answers 1 of 4, the 3 others in a new batch
    clock = FakeClock()

    async def sleep(seconds: float) -> None:  # the new batch stays in progress
        srv.batches(polls=100)
        await clock.sleep(seconds)

    where = {"results_root": tmp_path / "results", "cache_path": tmp_path / "c.sqlite"}
    first = gradetrail.run_eval(
        spec, batch=BatchOptions(sleep=sleep, clock=clock.now, max_wait_s=30), **where
    )
    assert first.manifest.status == "interrupted"
    srv.batches(polls=0, expire_after=None)
    second = gradetrail.run_eval(
        spec, batch=BatchOptions(sleep=clock.sleep, clock=clock.now), **where
    )
    assert second.manifest.status == "complete"
    paid = sum(r["cost_usd"] for r in gradetrail.read_results(second.run_dir))
    assert second.manifest.executor["batch"]["cost_usd"] < paid  # this process's share
    listed = [
        json.loads(x) for x in cli("batches", str(second.run_dir), "--json").stdout.splitlines()
    ]
    assert all(row["state"] == "collected" for row in listed) and len(listed) == 3
    assert sum(row["cost_usd"] for row in listed) == pytest.approx(paid)
    text = cli("batches", str(second.run_dir)).stdout
    assert text.splitlines()[-1].endswith(f"batch cost so far: ${paid:.4f}")


def test_a_batch_whose_results_are_gone_is_abandoned_and_sent_again(
    srv, cli, tmp_path: Path
) -> None:
    """A batch that ended but whose results file the API expired: the run says how to give
    it up; ``gradetrail batches RUN_DIR --abandon ID`` does (before: no command, the run
    stuck on that batch forever), the next run sends its 3 requests again in a new batch,
    and the cost line says what the abandoned one billed is unknown (never $0)."""
    spec = gsm8k_spec(tmp_path / "s", srv, "openai", limit=3, price=PRICE)
    srv.batches(polls=0)
    first = cli("run", spec.source, "--batch", "--detach", "--print-run-dir")
    run_dir = first.stdout.strip().splitlines()[-1]
    (batch_id,) = [
        json.loads(line)["batch_id"]
        for line in cli("batches", run_dir, "--json").stdout.splitlines()
    ]
    srv.batches(expire_files=True)
    stuck = cli("run", spec.source, "--batch")
    assert stuck.exit_code == 1
    assert f"gradetrail batches {run_dir} --abandon {batch_id}" in stuck.stderr

    srv.batches(expire_files=False)  # new batches' results can be read again
    wrong = cli("batches", run_dir, "--abandon", "batch_nope")
    assert wrong.exit_code == 2 and f"open batches: {batch_id}" in wrong.stderr
    gave_up = cli("batches", run_dir, "--abandon", batch_id)
    assert gave_up.exit_code == 0, gave_up.stderr
    assert "its 3 requests are sent again by the next run" in gave_up.stdout
    again = cli("batches", run_dir, "--abandon", batch_id)
    assert again.exit_code == 2 and "is abandoned" in again.stderr

    done = cli("run", spec.source, "--batch")
    assert done.exit_code == 0, done.stderr
    counts = srv.batches()
    assert counts["created"] == 2 and counts["requests"] == 6
    listed = [json.loads(line) for line in cli("batches", run_dir, "--json").stdout.splitlines()]
    assert [row["state"] for row in listed] == ["abandoned", "collected"]
    text = cli("batches", run_dir).stdout
    assert f"plus what abandoned {batch_id} billed (unknown)" in text


def test_an_abandoned_batch_counts_at_its_worst_case_against_the_ceiling(
    srv, cli, tmp_path: Path
) -> None:
    """Sent under run.max_cost_usd, an abandoned batch may have been billed: its worst
    case (recorded when it was sent) is counted as paid in spending.jsonl, once however
    often the command is given, so the next run's ceiling never loses it (before: the
    next run counted it as $0)."""
    from gradetrail.rundir.batches import BatchLedger
    from gradetrail.rundir.spending import SpendingLog

    spec = gsm8k_spec(
        tmp_path / "s", srv, "openai", limit=3, price=PRICE, params={"max_tokens": 100}
    )
    srv.batches(polls=0)
    first = cli("run", spec.source, "--batch", "--detach", "--max-cost", "1", "--print-run-dir")
    assert first.exit_code == 0, first.stderr
    run_dir = first.stdout.strip().splitlines()[-1]
    (sub,) = BatchLedger.read(run_dir).submissions.values()
    assert sub.worst_usd is not None and sub.worst_usd > 0
    gave_up = cli("batches", run_dir, "--abandon", str(sub.batch_id))
    assert gave_up.exit_code == 0, gave_up.stderr
    assert f"counted at its worst case, ${sub.worst_usd:.4f}" in gave_up.stdout
    assert "never seen to end" in gave_up.stderr  # detached: it may still run and bill
    assert SpendingLog(Path(run_dir)).read().paid_usd == pytest.approx(sub.worst_usd)
    done = cli("run", spec.source, "--batch", "--max-cost", "1")
    assert done.exit_code == 0, done.stderr
    collected = [s for s in BatchLedger.read(run_dir).submissions.values() if s.cost_usd]
    (new,) = collected
    total = SpendingLog(Path(run_dir)).read().paid_usd
    assert total == pytest.approx(sub.worst_usd + (new.cost_usd or 0.0))
