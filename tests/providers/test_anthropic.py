"""The ``anthropic`` provider through the real ``anthropic`` SDK against the local protocol
server: the bundled GSM8K spec reproduces the replay accuracy, and responses are
normalized (stop reason, truncation, tokens, cost)."""

from __future__ import annotations

from pathlib import Path

import pytest
from http_support import SECRET_KEY, gsm8k_spec, replay_accuracy, run_http
from paths import GSM8K_SPEC
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

import gradetrail
from gradetrail.errors import InvalidResponse, SpecError
from gradetrail.providers import make_provider
from gradetrail.providers.anthropic import DEFAULT_MAX_TOKENS

server = protocol_server_fixture(scope="module", name="server")
srv = fresh_protocol_server_fixture("server", name="srv")


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET_KEY)


def test_bundled_spec_over_messages_scores_as_through_replay(srv, tmp_path: Path) -> None:
    """examples/gsm8k.yaml served over the Messages API scores 742/1,319 for
    175b_verification, exactly the replay provider's accuracy."""
    spec = gradetrail.load_spec(
        GSM8K_SPEC,
        ["model.provider=anthropic", f"model.base_url={srv.base_url}", "run.concurrency=64"],
    )
    result = gradetrail.run_eval(spec, results_root=tmp_path / "results", use_cache=False)
    assert result.manifest.counts == {"scored": 1319}
    score = result.manifest.score
    assert score is not None and score.mean is not None
    assert round(score.mean * 1319) == 742
    assert score.mean == replay_accuracy("175b_verification", tmp_path / "replay")
    assert srv.stats()["paths"] == {"/v1/messages": 1319}


def test_max_tokens_stop_is_flagged_truncated(srv, tmp_path: Path) -> None:
    """An answer cut at max_tokens keeps Anthropic's own stop reason and is truncated."""
    out = run_http(gsm8k_spec(tmp_path, srv, "anthropic", params={"max_tokens": 3}), tmp_path)
    row = out.row
    assert (row["stop_reason"], row["raw_stop_reason"], row["truncated"]) == (
        "max_tokens",
        "max_tokens",
        True,
    )
    assert row["output_tokens"] == 3 and out.result.manifest.truncated == 1


def test_stop_is_sent_as_stop_sequences(srv, tmp_path: Path) -> None:
    """params.stop reaches the Messages API as stop_sequences: the answer ends before the
    first "=" and its stop reason is stop_sequence."""
    out = run_http(gsm8k_spec(tmp_path, srv, "anthropic", params={"stop": ["="]}), tmp_path)
    assert out.row["stop_reason"] == "stop_sequence"
    assert "=" not in out.row["response"]


def test_cache_reads_are_reported_as_part_of_input(srv, tmp_path: Path) -> None:
    """A row's input_tokens is the whole prompt, cache reads included, and
    cached_input_tokens says how many of them were cache reads: the same prompt gives the
    same input total with and without them (as OpenAI's prompt_tokens does)."""
    plain = run_http(gsm8k_spec(tmp_path / "a", srv, "anthropic"), tmp_path / "a")
    srv.configure(cache_read_tokens=10)
    cached = run_http(gsm8k_spec(tmp_path / "b", srv, "anthropic"), tmp_path / "b")
    assert plain.row["cached_input_tokens"] == 0 and cached.row["cached_input_tokens"] == 10
    assert cached.row["input_tokens"] == plain.row["input_tokens"] > 10


def test_bundled_price_gives_the_cost(srv, tmp_path: Path) -> None:
    """claude-haiku-4-5 is priced from the table: $1 input, $0.10 cache reads, $5 output
    per million tokens."""
    srv.configure(
        script={"rules": [{"contains": "Q:", "reply": "So A: 18"}], "models": ["claude-haiku-4-5"]},
        cache_read_tokens=6,
    )
    out = run_http(gsm8k_spec(tmp_path, srv, "anthropic", model="claude-haiku-4-5"), tmp_path)
    row = out.row
    assert row["cached_input_tokens"] == 6 and row["output_tokens"] == 3
    expected = ((row["input_tokens"] - 6) * 1.0 + 6 * 0.10 + 3 * 5.0) / 1e6
    assert row["cost_usd"] == pytest.approx(expected, rel=1e-9)


def provider(tmp_path: Path, **fields):
    spec = gsm8k_spec(tmp_path, None, "anthropic", base_url="http://127.0.0.1:9", **fields)
    return make_provider(spec.model, spec.base_dir)


def test_cache_writes_count_as_input_priced_at_the_write_rate(tmp_path: Path) -> None:
    """cache_creation_input_tokens join input_tokens (Anthropic excludes both cache kinds
    from input_tokens) and cost the cache-write price."""
    p = provider(tmp_path, name="claude-sonnet-4-5")
    body = {
        "type": "message",
        "model": "claude-sonnet-4-5-20250929",
        "content": [{"type": "text", "text": "A: 1"}],
        "stop_reason": "end_turn",
        "usage": {
            "input_tokens": 100,
            "cache_creation_input_tokens": 1000,
            "cache_read_input_tokens": 2000,
            "output_tokens": 10,
        },
    }
    response, writes = p.normalize(body, 0.2)
    assert (response.input_tokens, response.cached_input_tokens, writes) == (1100, 2000, 1000)
    request = gradetrail.Request("anthropic", "claude-sonnet-4-5", None, None, (), {})
    priced = p._finish(request, response, writes)
    expected = (100 * 3.0 + 1000 * 3.75 + 2000 * 0.30 + 10 * 15.0) / 1e6
    assert priced.cost_usd == pytest.approx(expected, rel=1e-12)


def test_refusal_is_an_answer_with_usage_and_errors_under_200_are_invalid(
    tmp_path: Path,
) -> None:
    """stop_reason refusal is a model answer: its usage kept, its explanation recorded;
    an error object under 200 is an InvalidResponse (transient when the server says it
    was overloaded)."""
    p = provider(tmp_path)
    refusal = {
        "content": [],
        "stop_reason": "refusal",
        "stop_details": {"type": "refusal", "explanation": "declined by policy"},
        "usage": {"input_tokens": 40, "output_tokens": 0},
    }
    response, _ = p.normalize(refusal, 0.1)
    assert (response.stop_reason, response.refusal, response.text) == (
        "refusal",
        "declined by policy",
        "",
    )
    assert response.refused and response.input_tokens == 40
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    with pytest.raises(InvalidResponse) as bad:
        p.normalize(overloaded, 0.1)
    assert bad.value.transient is True and bad.value.error_type == "overloaded_error"


def test_default_max_tokens_enters_the_cache_key_and_seed_is_refused(tmp_path: Path) -> None:
    """Without params.max_tokens the provider sends 4,096 and says so in its identity
    (part of every cache key); a seed, which the API lacks, stops the run before any call."""
    assert provider(tmp_path / "a").identity() == {"default_max_tokens": DEFAULT_MAX_TOKENS}
    assert provider(tmp_path / "b", params={"max_tokens": 64}).identity() == {}
    with pytest.raises(SpecError, match="the Anthropic API has no seed"):
        provider(tmp_path / "c", params={"seed": 1}).check_ready()
