"""A quota that will not come back within the run (credit, a spend cap, a per-day or
per-month quota) stops the run at its first row, one line naming the quota and the fix,
exit 3; what was paid for is cached, and the same command run again once the quota is
back requests only the rest. A per-minute rate limit of the same wording is retried."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import run_cli
from http_support import gsm8k_spec
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

from gradetrail.engine.failfast import QuotaExhausted, check_stop
from gradetrail.errors import BadRequest, RateLimited
from gradetrail.rundir.results import make_row

server = protocol_server_fixture(scope="module", name="server")
srv = fresh_protocol_server_fixture("server", name="srv")


def _google_429(quota_id: str) -> list[dict]:
    """Gemini's OpenAI-compatible 429, in Google's list envelope: the same words for a
    per-minute and a per-day quota, told apart only by the violated quota's id."""
    return [
        {
            "error": {
                "code": 429,
                "message": "You exceeded your current quota; check your plan and billing "
                "details at https://ai.example.dev/rate-limits. Please retry in 20.5s.",
                "status": "RESOURCE_EXHAUSTED",
                "details": [
                    {
                        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                        "violations": [
                            {"quotaMetric": "example/requests", "quotaId": quota_id},
                        ],
                    },
                    {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "20s"},
                ],
            }
        }
    ]


DAILY = _google_429("GenerateRequestsPerDayPerProjectPerModel-FreeTier")
PER_MINUTE = _google_429("GenerateRequestsPerMinutePerProjectPerModel-FreeTier")


def _run(spec, tmp_path: Path):  # noqa: ANN001, ANN202
    return run_cli(
        "run",
        spec.source,
        "--cache",
        str(tmp_path / "cache.sqlite"),
        "--results-root",
        str(tmp_path / "r"),
    )


def test_a_daily_quota_stops_the_run_and_a_rerun_resumes_it(srv, tmp_path: Path) -> None:  # noqa: ANN001
    """Gemini's per-day quota runs out at the third request: the run stops there, exit 3,
    one line; the two answers paid for are cached, and the same command once the quota is
    back asks only for the four samples without an answer (before: every sample was sent,
    each 429 retried as a per-minute limit)."""
    srv.configure(faults=[{"kind": "answer", "body": DAILY, "status": 429, "after": 2}])
    run = {"concurrency": 1, "max_retries": 3}
    spec = gsm8k_spec(tmp_path, srv, "openai_compatible", limit=6, run=run)
    out = _run(spec, tmp_path)
    assert out.code == 3, out.err
    (error,) = [line for line in out.err_lines if line.startswith("error:")]
    assert error == (
        "error: stopped: the provider says its per-day quota ran out (RateLimited: 429 error: "
        "You exceeded your current quota; check your plan and billing details at "
        "https://ai.example.dev/rate-limits. Please retry in 20.5s.); wait for it to reset, "
        "or raise it at the provider, then run the same command again: responses already "
        "paid for are cached, only the rest is requested"
    )
    assert srv.stats()["total"] == 3  # no retry of the 429, nothing sent after it
    (run_dir,) = (tmp_path / "r").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    assert manifest["stop_reason"] == error.removeprefix("error: ")
    assert manifest["counts"] == {"scored": 2, "provider_error": 1}
    rows = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert rows[2]["error"]["quota"] == "daily" and rows[2]["attempts"] == 1

    srv.configure(faults=[])  # the quota is back
    before = srv.stats()["total"]
    again = _run(spec, tmp_path)
    assert again.code == 0, again.err
    assert srv.stats()["total"] - before == 4  # the two paid answers come from the cache
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["counts"] == {"scored": 6}


def test_a_per_minute_quota_of_the_same_words_is_retried(srv, tmp_path: Path) -> None:  # noqa: ANN001
    """The same 429 naming a per-minute quota is a rate limit: waited out and retried,
    the run completes."""
    srv.configure(faults=[{"kind": "answer", "body": PER_MINUTE, "status": 429, "first": 1}])
    spec = gsm8k_spec(tmp_path, srv, "openai_compatible", limit=2, run={"concurrency": 1})
    out = _run(spec, tmp_path)
    assert out.code == 0, out.err
    (run_dir,) = (tmp_path / "r").iterdir()
    rows = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert [r["attempts"] for r in rows] == [2, 1]
    assert [r["state"] for r in rows] == ["scored", "scored"]


@pytest.mark.parametrize("state", ["provider_error", "judge_error"])
def test_check_quota_names_the_quota_and_the_fix(state: str) -> None:
    """A row whose (judge's) provider error carries a quota stops the run with exit 3."""
    error = RateLimited("429 insufficient_quota: out", transient=False, status=429, quota="quota")
    detail = error.detail()
    row = make_row(
        sample_id="1",
        state=state,
        error=detail if state == "provider_error" else {"provider_error": detail},
    )
    with pytest.raises(QuotaExhausted) as info:
        check_stop(row)
    who = "the provider" if state == "provider_error" else "the judge's provider"
    assert str(info.value).startswith(
        f"stopped: {who} says its quota ran out (RateLimited: 429 insufficient_quota: out); "
        "check the plan, quota and billing at the provider, then run the same command again"
    )
    assert info.value.exit_code == 3


def test_other_errors_do_not_stop_the_run() -> None:
    """A permanent error without a quota, or a transient 429, leaves the run going."""
    for error in (
        BadRequest("400 invalid_request_error: too long", status=400),
        RateLimited("429 rate_limit_exceeded", status=429),
    ):
        check_stop(make_row(sample_id="1", state="provider_error", error=error.detail()))


@pytest.mark.parametrize(
    ("status", "body", "quota"),
    [
        (  # Anthropic's workspace spend limit, as a 400 of the generic request type
            400,
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "You have reached your specified workspace API usage limits. "
                    "You will regain access on 2027-01-01 at 00:00 UTC.",
                },
            },
            "spend_cap",
        ),
        (  # a 400 about one prompt that says "per day" is not a quota
            400,
            {"error": {"type": "invalid_request_error", "message": "at most 5 files per day"}},
            None,
        ),
        (  # Google's per-minute quota id under a "per day"-free message: a rate limit
            429,
            PER_MINUTE,
            None,
        ),
        (429, DAILY, "daily"),
    ],
    ids=["workspace-limit", "400-per-day", "per-minute", "per-day"],
)
def test_which_refusals_name_a_quota(status: int, body: object, quota: str | None) -> None:
    """The classification at the HTTP boundary: which refusals carry a quota."""
    from gradetrail.providers._http import classify_status

    error = classify_status(status, None, body)
    assert error.quota == quota
    assert error.transient is (status == 429 and quota is None)
