"""Every paid call is counted: a response the provider answered, and billed, before the
run refused it (another model served it under require_served_model) keeps its tokens,
cost and served model on its provider_error row, and a judge failing after the model
answered leaves the model's spend on the judge_error row; the manifest's cost is the
money spent, with the part spent on rows that did not score shown apart. Checked
against the local protocol server's own count of answered requests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from http_support import GSM8K_DATA
from paths import EXAMPLES
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

import gradetrail

server = protocol_server_fixture(scope="module", name="server")
srv = fresh_protocol_server_fixture("server", name="srv")

#: USD per million tokens
PRICE = {"input_per_mtok": 3.0, "output_per_mtok": 15.0}
N = 30


def _spec(tmp_path: Path, srv, **scorer) -> gradetrail.EvalSpec:  # noqa: ANN001
    model = {
        "provider": "openai_compatible",
        "name": "175b_verification",
        "base_url": srv.openai_base_url,
        "api_key_required": False,
        "require_served_model": True,
        "price": PRICE,
    }
    spec = {
        "name": "billed",
        "dataset": {"path": str(GSM8K_DATA / "test.jsonl"), "limit": N},
        "prompt": 'Solve the math word problem. End with a line "A: <answer>".\n\n'
        "Q: {{ question }}",
        "target": "{{ answer.split('####')[-1] | trim }}",
        "model": model,
        "scorer": scorer or {"type": "numeric", "marker": "A:"},
        "run": {"max_retries": 0, "concurrency": 4, "fail_fast": 0},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return gradetrail.load_spec(path)


def _usd(row: dict) -> float:
    return (row["input_tokens"] * PRICE["input_per_mtok"] + row["output_tokens"] * 15.0) / 1e6


def test_a_response_from_another_model_keeps_its_spend(srv, tmp_path: Path) -> None:
    srv.configure(faults=[{"kind": "alias", "served_model": "6b_finetuning", "every": 3}])
    result = gradetrail.run_eval(_spec(tmp_path, srv), results_root=tmp_path / "r", use_cache=False)
    rows = gradetrail.read_results(result.run_dir)
    stats = srv.stats()
    answered = stats["statuses"]["200"]
    assert answered == N and stats["faults"]["alias"] == N // 3
    refused = [r for r in rows if r["state"] == "provider_error"]
    assert len(refused) == N // 3
    for row in refused:
        assert row["error"]["error_type"] == "served_model_mismatch"
        assert row["served_model"] == "6b_finetuning"
        assert row["input_tokens"] > 0 and row["output_tokens"] > 0
        assert row["cost_usd"] == pytest.approx(_usd(row))
    # every answered request is a row that carries its tokens and its cost
    assert sum(1 for r in rows if r["input_tokens"] > 0 and r["cost_usd"]) == answered
    m = result.manifest
    assert m.cost_usd == pytest.approx(sum(_usd(r) for r in rows))
    assert m.cost_usd_unscored == pytest.approx(sum(_usd(r) for r in refused))
    assert 0 < m.cost_usd_unscored < m.cost_usd
    assert m.input_tokens == sum(r["input_tokens"] for r in rows)
    assert m.served_models == {"175b_verification": N - N // 3, "6b_finetuning": N // 3}


def test_a_judge_failing_after_the_model_answered_leaves_the_spend(srv, tmp_path: Path) -> None:
    (tmp_path / "judge.j2").write_text("Grade this answer: {{ response }}\nGRADE:")
    judge = {
        "provider": "openai_compatible",
        "name": "grader",
        "base_url": srv.openai_base_url,
        "api_key_required": False,
        "price": PRICE,
    }
    srv.configure(
        models=["grader"],
        script={"Grade this answer": "GRADE: C"},
        faults=[{"kind": "error", "status": 400, "contains": "Grade this answer", "every": 2}],
    )
    spec = _spec(tmp_path, srv, type="judge", file="judge.j2", model=judge)
    result = gradetrail.run_eval(spec, results_root=tmp_path / "r", use_cache=False)
    rows = gradetrail.read_results(result.run_dir)
    failed = [r for r in rows if r["state"] == "judge_error"]
    assert len(failed) == N // 2
    assert all(r["cost_usd"] == pytest.approx(_usd(r)) and r["output_tokens"] for r in failed)
    stats = srv.stats()
    # the model answered all N; the judge answered half of its N calls
    assert stats["statuses"]["200"] == N + N // 2
    m = result.manifest
    assert m.cost_usd == pytest.approx(sum(_usd(r) for r in rows))
    assert m.cost_usd_unscored == pytest.approx(sum(_usd(r) for r in failed))


def test_an_agent_loop_failing_after_a_paid_turn_keeps_that_turns_spend(
    srv, tmp_path: Path
) -> None:
    """The calculator agent example: every first turn is answered (tool calls), every
    second turn refused (a 400; an exhausted quota would stop the run instead): each
    provider_error row keeps the first turn's tokens and cost."""
    script = json.loads((EXAMPLES / "data" / "agent" / "server_script.json").read_text())
    srv.configure(
        script=script, faults=[{"kind": "error", "contains": "[tool_result", "status": 400}]
    )
    overrides = [
        "model.provider=openai_compatible",
        "model.name=scripted-agent",
        f"model.base_url={srv.openai_base_url}",
        "model.api_key_required=false",
        f"model.price={json.dumps(PRICE)}",
        "run.fail_fast=0",
        "run.max_retries=0",
    ]
    spec = gradetrail.load_spec(EXAMPLES / "agent-calculator.yaml", overrides)
    result = gradetrail.run_eval(spec, results_root=tmp_path / "r", use_cache=False)
    rows = gradetrail.read_results(result.run_dir)
    stats = srv.stats()
    assert [r["state"] for r in rows] == ["provider_error"] * 5
    assert stats["statuses"]["200"] == 5 and stats["total"] == 10
    for row in rows:
        assert len(row["transcript"]["turns"]) == 1  # the answered turn, kept
        turn = row["transcript"]["turns"][0]
        assert (row["input_tokens"], row["output_tokens"]) == (
            turn["input_tokens"],
            turn["output_tokens"],
        )
        assert row["input_tokens"] > 0 and row["cost_usd"] == pytest.approx(_usd(row))
    m = result.manifest
    assert m.cost_usd == pytest.approx(sum(_usd(r) for r in rows)) and m.cost_usd > 0
    assert m.cost_usd_unscored == pytest.approx(m.cost_usd)


def test_a_judge_reply_from_another_model_keeps_its_spend_in_the_judge_record(
    srv, tmp_path: Path
) -> None:
    (tmp_path / "judge.j2").write_text("Grade this answer: {{ response }}\nGRADE:")
    judge = {
        "provider": "openai_compatible",
        "name": "grader",
        "base_url": srv.openai_base_url,
        "api_key_required": False,
        "require_served_model": True,
        "price": PRICE,
    }
    srv.configure(
        models=["grader", "other-grader"],
        script={"Grade this answer": "GRADE: C"},
        faults=[{"kind": "alias", "served_model": "other-grader", "contains": "Grade this"}],
    )
    spec = _spec(tmp_path, srv, type="judge", file="judge.j2", model=judge)
    result = gradetrail.run_eval(spec, results_root=tmp_path / "r", use_cache=False)
    rows = gradetrail.read_results(result.run_dir)
    assert [r["state"] for r in rows] == ["judge_error"] * N
    assert srv.stats()["statuses"]["200"] == 2 * N  # every model and judge call answered
    for row in rows:
        assert row["error"]["provider_error"]["error_type"] == "served_model_mismatch"
        record = row["judge"]
        assert record["input_tokens"] > 0 and record["output_tokens"] > 0
        assert record["cost_usd"] == pytest.approx(
            (record["input_tokens"] * 3.0 + record["output_tokens"] * 15.0) / 1e6
        )
    judged = result.manifest.judge
    assert judged.cost_usd == pytest.approx(sum(r["judge"]["cost_usd"] for r in rows))
