"""The ``openai`` / ``openai_compatible`` providers through the real ``openai`` SDK against
the local protocol server: the bundled GSM8K spec reproduces the replay accuracies, and
responses are normalized (stop reason, truncation, tokens, cost)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from http_support import SECRET_KEY, gsm8k_spec, replay_accuracy, run_http
from paths import GSM8K_SPEC
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

import gradetrail

server = protocol_server_fixture(scope="module", name="server")
srv = fresh_protocol_server_fixture("server", name="srv")

#: correct answers per model in the GSM8K authors' labels (examples/data/gsm8k/README.md)
CORRECT = {
    "6b_finetuning": 286,
    "6b_verification": 515,
    "175b_finetuning": 458,
    "175b_verification": 742,
}


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_KEY)


def test_bundled_spec_through_the_cli_matches_replay(srv, cli) -> None:
    """`gradetrail run examples/gsm8k.yaml --set model.provider=openai_compatible ...`
    scores 742/1,319 for 175b_verification, exactly what the replay provider scores."""
    out = cli(
        "run",
        str(GSM8K_SPEC),
        "--no-cache",
        "--json",
        "--set",
        "model.provider=openai_compatible",
        "--set",
        f"model.base_url={srv.openai_base_url}",
        "--set",
        "model.api_key_required=false",
        "--set",
        "run.concurrency=64",
    )
    assert out.exit_code == 0, out.stderr
    manifest = json.loads(out.stdout)
    assert manifest["counts"] == {"scored": 1319}
    assert manifest["score"]["mean"] * 1319 == pytest.approx(742)
    assert manifest["served_models"] == {"175b_verification": 1319}
    assert srv.stats()["unmatched"] == 0


@pytest.mark.parametrize("model", ["6b_finetuning", "6b_verification", "175b_finetuning"])
def test_every_recorded_model_scores_as_through_replay(srv, tmp_path: Path, model: str) -> None:
    """The other three models served over Chat Completions give the replay provider's
    exact accuracy (286, 515, 458 of 1,319)."""
    spec = gradetrail.load_spec(
        GSM8K_SPEC,
        [
            "model.provider=openai_compatible",
            f"model.base_url={srv.openai_base_url}",
            "model.api_key_required=false",
            f"model.name={model}",
            "run.concurrency=64",
        ],
    )
    result = gradetrail.run_eval(spec, results_root=tmp_path / "results", use_cache=False)
    assert result.manifest.counts == {"scored": 1319}
    score = result.manifest.score
    assert score is not None and score.mean is not None
    assert round(score.mean * 1319) == CORRECT[model]
    assert score.mean == replay_accuracy(model, tmp_path / "replay")


def test_max_tokens_cut_is_flagged_truncated_and_counted(srv, tmp_path: Path) -> None:
    """provider openai sends max_tokens as max_completion_tokens; an answer cut there
    has stop reason max_tokens (raw "length"), is flagged truncated per row and counted in
    the manifest and the printed summary."""
    spec = gsm8k_spec(
        tmp_path,
        srv,
        "openai",
        limit=3,
        params={"max_tokens": 5},
    )
    out = run_http(spec, tmp_path)
    for row in out.rows:
        assert (row["stop_reason"], row["raw_stop_reason"], row["truncated"]) == (
            "max_tokens",
            "length",
            True,
        )
        assert row["output_tokens"] == 5
    assert out.result.manifest.truncated == 3
    from rich.console import Console

    from gradetrail.report.run import print_summary

    console = Console(record=True, width=120)
    print_summary(out.result, console=console)
    assert "3 responses stopped at max_tokens" in console.export_text()


def test_finished_answer_is_end_turn_and_not_truncated(srv, tmp_path: Path) -> None:
    """A complete answer's finish_reason "stop" is normalized to end_turn."""
    out = run_http(gsm8k_spec(tmp_path, srv, "openai_compatible"), tmp_path)
    assert (out.row["stop_reason"], out.row["raw_stop_reason"]) == ("end_turn", "stop")
    assert out.row["truncated"] is False


def test_cached_prompt_tokens_are_part_of_input(srv, tmp_path: Path) -> None:
    """prompt_tokens includes the cache reads: a row's input_tokens is the whole prompt
    (the server counts its words) and cached_input_tokens the part read from the cache."""
    srv.configure(cache_read_tokens=10)
    out = run_http(gsm8k_spec(tmp_path, srv, "openai_compatible"), tmp_path)
    assert out.row["cached_input_tokens"] == 10
    assert out.row["input_tokens"] == prompt_words(out.result.manifest.spec)


def prompt_words(spec: dict) -> int:
    """The server's token count of the first sample's prompt: its whitespace-split words."""
    with open(spec["dataset"]["path"], encoding="utf-8") as f:
        question = json.loads(f.readline())["question"]
    return len(spec["prompt"].replace("{{ question }}", question).split())


def test_bundled_price_gives_the_cost_and_the_summary_shows_it(srv, tmp_path: Path) -> None:
    """A model in the bundled table (gpt-4o) is priced from it: cost = (input x 2.50 +
    cached x 1.25 + output x 10.00) / 1e6 per row; the manifest sums the rows."""
    srv.configure(
        script={"rules": [{"contains": "Q:", "reply": "The answer.\nA: 18"}], "models": ["gpt-4o"]},
        cache_read_tokens=4,
    )
    out = run_http(gsm8k_spec(tmp_path, srv, "openai", model="gpt-4o", limit=2), tmp_path)
    for row in out.rows:
        fresh = row["input_tokens"] - 4
        expected = (fresh * 2.5 + 4 * 1.25 + row["output_tokens"] * 10.0) / 1e6
        assert row["cached_input_tokens"] == 4 and row["output_tokens"] == 4
        assert row["cost_usd"] == pytest.approx(expected, rel=1e-9)
    assert out.result.manifest.cost_usd == pytest.approx(sum(r["cost_usd"] for r in out.rows))


def test_spec_price_overrides_and_unknown_price_is_null(srv, tmp_path: Path) -> None:
    """model.price prices a model the table lacks; without it the cost is null (n/a)."""
    price = {"input_per_mtok": 1.0, "output_per_mtok": 2.0}
    priced = run_http(
        gsm8k_spec(tmp_path / "p", srv, "openai_compatible", price=price), tmp_path / "p"
    )
    row = priced.row
    assert row["cost_usd"] == pytest.approx((row["input_tokens"] + 2 * row["output_tokens"]) / 1e6)
    unpriced = run_http(gsm8k_spec(tmp_path / "u", srv, "openai_compatible"), tmp_path / "u")
    assert unpriced.row["cost_usd"] is None
    assert unpriced.result.manifest.cost_usd is None


def test_content_filter_and_refusal_are_answers_with_their_usage(tmp_path: Path) -> None:
    """finish_reason content_filter and a message.refusal are model answers (stop reasons
    content_filter and refusal, usage kept), the refusal text apart from the visible
    text; a vLLM-style matched stop string is stop_sequence; an error under 200 is an
    InvalidResponse."""
    from gradetrail.errors import InvalidResponse
    from gradetrail.providers import make_provider

    spec = gsm8k_spec(tmp_path, None, "openai_compatible", base_url="http://127.0.0.1:9/v1")
    provider = make_provider(spec.model, spec.base_dir)
    usage = {"prompt_tokens": 9, "completion_tokens": 4}
    choice = {"message": {"content": None}, "finish_reason": "content_filter"}
    response, _ = provider.normalize({"choices": [choice], "model": "m", "usage": usage}, 0.1)
    assert (response.stop_reason, response.refused, response.text) == ("content_filter", True, "")
    assert (response.input_tokens, response.output_tokens) == (9, 4)
    refusal = {"message": {"content": None, "refusal": "I can't help."}, "finish_reason": "stop"}
    response, _ = provider.normalize({"choices": [refusal], "model": "m", "usage": usage}, 0.1)
    assert (response.text, response.refusal) == ("", "I can't help.")
    assert (response.stop_reason, response.raw_stop_reason) == ("refusal", "stop")
    assert response.refused and response.output_tokens == 4
    vllm = {"message": {"content": "A: 3"}, "finish_reason": "stop", "stop_reason": "\n\n"}
    response, _ = provider.normalize({"choices": [vllm]}, 0.1)
    assert response.stop_reason == "stop_sequence" and response.served_model is None
    with pytest.raises(InvalidResponse):
        provider.normalize({"choices": []}, 0.1)
