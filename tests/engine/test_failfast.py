"""Fail fast: the first samples all failing the same permanent way stop the run with that
one error; anything else lets it go on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from http_support import gsm8k_spec
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

import gradetrail
from gradetrail.engine.failfast import FailFast
from gradetrail.errors import AuthError, RunError, ServerError
from gradetrail.rundir.results import Row, make_row

server = protocol_server_fixture(scope="module", name="server")
srv = fresh_protocol_server_fixture("server", name="srv")

AUTH = AuthError("401 authentication_error: invalid x-api-key", status=401)


def failed(error: Exception, sample: str = "1") -> Row:
    return make_row(sample_id=sample, state="provider_error", error=error.detail())


def scored(sample: str = "1") -> Row:
    return make_row(sample_id=sample, state="scored", score=1.0)


def test_five_identical_permanent_errors_stop_the_run() -> None:
    """The fifth identical AuthError raises one RunError naming it; the first four don't."""
    watch = FailFast(5)
    for i in range(4):
        watch.observe(failed(AUTH, str(i)))
    with pytest.raises(RunError) as info:
        watch.observe(failed(AUTH, "5"))
    assert str(info.value) == (
        "stopped after the first 5 samples all failed with the same error (run.fail_fast): "
        "AuthError: 401 authentication_error: invalid x-api-key"
    )
    assert info.value.exit_code == 1


@pytest.mark.parametrize(
    "breaker",
    [
        scored(),
        failed(ServerError("500 boom", status=500)),
        failed(AuthError("401 authentication_error: another message", status=401)),
    ],
    ids=["a success", "a transient error", "a different message"],
)
def test_anything_else_among_the_first_disarms_it(breaker: Row) -> None:
    """A success, a transient error or a different error among the first N: no stop."""
    watch = FailFast(3)
    watch.observe(failed(AUTH))
    watch.observe(breaker)
    for _ in range(10):
        watch.observe(failed(AUTH))
    assert watch.armed is False


def test_zero_disables_it() -> None:
    """run.fail_fast: 0 never stops a run."""
    watch = FailFast(0)
    for _ in range(10):
        watch.observe(failed(AUTH))


def test_a_judge_provider_error_counts_like_the_models() -> None:
    """judge_error rows carrying the same permanent provider error stop the run too."""
    watch = FailFast(2)
    row = make_row(
        sample_id="1",
        state="judge_error",
        error={"reason": "provider_error", "provider_error": AUTH.detail(), "message": "x"},
    )
    watch.observe(row)
    with pytest.raises(RunError):
        watch.observe(row)


def test_wrong_key_stops_the_run_at_its_first_row(srv, tmp_path: Path, monkeypatch) -> None:
    """A rejected key: `gradetrail run` exits 3 (a resumable stop, like a quota's) with one
    line instead of 1,319 error rows (before: exit 1 after five rows, fail-fast's); the
    manifest says interrupted and only the samples already in flight reached the server."""
    from typer.testing import CliRunner

    from gradetrail.cli import app

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-wrong")
    srv.configure(api_key="the-right-key")
    spec = gsm8k_spec(tmp_path, srv, "anthropic", limit=None, run={"concurrency": 4})
    results = tmp_path / "results"
    out = CliRunner().invoke(
        app, ["run", spec.source, "--no-cache", "--results-root", str(results)]
    )
    assert out.exit_code == 3
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: stopped: the provider refused the API key (AuthError: 401 "
        "authentication_error: invalid x-api-key; check the key in ANTHROPIC_API_KEY); set "
        "a valid key, then run the same command again: responses already paid for are "
        "cached, only the rest is requested"
    ]
    requests = srv.stats()["total"]
    assert 1 <= requests <= 1 + 4
    (run_dir,) = results.iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    assert 1 <= manifest["counts"]["provider_error"] <= 4


def test_a_server_that_cannot_be_reached_stops_the_run_after_five_samples(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A well-formed base_url where nothing listens: each sample fails only after its
    retries, so before, every sample of the dataset was retried against it (1,319 GSM8K
    samples: about 27 minutes). Now the first five, failing alike, stop the run with one
    line naming the endpoint and model.base_url, exit 1."""
    import socket

    from cli_support import run_cli

    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    class Dead:
        openai_base_url = f"http://127.0.0.1:{port}/v1"
        anthropic_base_url = f"http://127.0.0.1:{port}"

    spec = gsm8k_spec(tmp_path, Dead, "openai_compatible", limit=None, run={"max_retries": 1})
    out = run_cli("run", spec.source, "--no-cache", "--results-root", str(tmp_path / "r"))
    assert out.code == 1
    (error,) = [line for line in out.err_lines if line.startswith("error:")]
    assert error.startswith(
        "error: stopped after the first 5 samples all failed with the same error "
        f"(run.fail_fast): ProviderConnectionError: cannot reach http://127.0.0.1:{port}/v1"
    )
    assert error.endswith("; check model.base_url and that the server is up")
    (run_dir,) = (tmp_path / "r").iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "failed"
    assert manifest["counts"]["provider_error"] < 100


@pytest.mark.parametrize(
    ("protocol", "suffix", "path", "advice"),
    [
        (
            "openai_compatible",
            "",
            "/chat/completions",
            " (an OpenAI-compatible server's usually ends in /v1)",
        ),
        ("anthropic", "/v1", "/v1/v1/messages", " (without /v1: gradetrail adds /v1/messages)"),
    ],
)
def test_a_base_url_that_misses_the_api_names_where_the_request_went(
    srv,  # noqa: ANN001
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    protocol: str,
    suffix: str,
    path: str,
    advice: str,
) -> None:
    """A first-contact mistake: the base URL without /v1 (OpenAI-compatible) or with it
    (Anthropic) gets the server's bare 404; the one line says which URL answered nothing
    and what to check (before: "404 error: Not Found")."""
    from cli_support import run_cli

    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    base = srv.base_url + suffix
    spec = gsm8k_spec(tmp_path, srv, protocol, limit=8, base_url=base)
    out = run_cli("run", spec.source, "--no-cache", "--results-root", str(tmp_path / "r"))
    assert out.code == 3  # stopped at the first 404: no route, no request of the run fits
    (error,) = [line for line in out.err_lines if line.startswith("error:")]
    url = srv.base_url + path
    assert f"404 error: Not Found; nothing answered at {url}: check model.base_url{advice})" in (
        error
    )


def test_a_404_naming_the_model_gets_no_endpoint_hint(srv, tmp_path: Path) -> None:  # noqa: ANN001
    """An unknown model is the provider's own 404 (model_not_found): no base_url advice."""
    from cli_support import run_cli

    spec = gsm8k_spec(tmp_path, srv, "openai_compatible", limit=8, model="no-such-model")
    out = run_cli("run", spec.source, "--no-cache", "--results-root", str(tmp_path / "r"))
    assert out.code == 3
    (error,) = [line for line in out.err_lines if line.startswith("error:")]
    assert "no-such-model" in error and "nothing answered" not in error


def test_disabled_fail_fast_records_every_row(srv, tmp_path: Path, monkeypatch) -> None:
    """run.fail_fast: 0 runs every sample and records each error (a refused key too: it
    turns off the stop at the first such row with fail-fast)."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-wrong")
    srv.configure(api_key="the-right-key")
    spec = gsm8k_spec(tmp_path, srv, "anthropic", limit=12, run={"fail_fast": 0})
    result = gradetrail.run_eval(spec, results_root=tmp_path / "results", use_cache=False)
    assert result.manifest.counts == {"provider_error": 12}
    assert result.manifest.status == "complete"
