"""The judge scorer end to end: parse forms, failure forms, k-sample reduction, the cache
and the judge file's place in the identity, with a scripted judge (python provider)."""

from __future__ import annotations

import json
from pathlib import Path

import fake_judges
import pytest
from judge_evals import SCRIPTED_JUDGE, run, write_eval

import gradetrail
from gradetrail.errors import SpecError


def _rows(*scripts: list) -> list[dict]:
    return [{"id": f"s{i}", "answer": f"answer {i}", "script": s} for i, s in enumerate(scripts)]


def test_grade_form_scores_each_grade(tmp_path: Path) -> None:
    """GRADE: C / P / I (any case, last one wins) score 1 / 0.5 / 0, each verdict recorded."""
    spec = write_eval(
        tmp_path,
        _rows(["Fine.\nGRADE: C"], ["grade: p"], ["GRADE: C at first... final GRADE: I"]),
    )
    result, rows = run(spec, tmp_path / "results")
    assert [r["score"] for r in rows] == [1.0, 0.5, 0.0]
    assert [r["scorer"]["verdicts"][0]["grade"] for r in rows] == ["C", "p", "I"]
    first = rows[0]["scorer"]["verdicts"][0]
    assert first == {
        "sample": 1,
        "grade": "C",
        "value": 1.0,
        "truncated": False,
        "stop_reason": "end_turn",
        "cached": False,
        "reply": "Fine.\nGRADE: C",
    }
    assert result.manifest.score.mean == pytest.approx(0.5)
    assert result.manifest.judge.verdicts == 3 and result.manifest.judge.errors == {}


def test_numeric_form_normalizes_to_unit_interval(tmp_path: Path) -> None:
    """SCORE: 7 and a bare 7/10 on a 0..10 scale score 0.7; SCORE: 4/5 scores 0.8."""
    spec = write_eval(
        tmp_path,
        _rows(["Solid.\nSCORE: 7"], ["I'd say 7/10."], ["SCORE: 4/5"]),
        scorer={"parse": {"kind": "numeric"}},
    )
    _, rows = run(spec, tmp_path / "results")
    assert [r["score"] for r in rows] == pytest.approx([0.7, 0.7, 0.8])
    assert [r["scorer"]["verdicts"][0]["grade"] for r in rows] == ["7", "7/10", "4/5"]


def test_json_form_reads_a_fenced_block(tmp_path: Path) -> None:
    """JSON verdicts are read from a fenced block, a bare object, or a grade string."""
    fenced = 'Reasoning first.\n```json\n{"verdict": {"score": 0.25}}\n```'
    spec = write_eval(
        tmp_path,
        _rows([fenced], ['{"verdict": {"score": true}}'], ['x {"verdict": {"score": "P"}} y']),
        scorer={"parse": {"kind": "json", "field": "verdict.score"}},
    )
    _, rows = run(spec, tmp_path / "results")
    assert [r["score"] for r in rows] == [0.25, 1.0, 0.5]


def test_unparseable_reply_is_a_judge_error_with_truncated_reply(tmp_path: Path) -> None:
    """A reply with no verdict is a judge_error (never 0) carrying head and tail of the
    reply, counted apart from scored rows."""
    long_reply = "The answer looks plausible. " * 200  # 5,600 characters, no GRADE
    spec = write_eval(tmp_path, _rows(["GRADE: C"], [long_reply]))
    result, rows = run(spec, tmp_path / "results")
    bad = rows[1]
    assert bad["state"] == "judge_error" and bad["score"] is None
    assert bad["error"]["kind"] == "JudgeError"
    assert bad["error"]["reason"] == "unparseable"
    assert "no grade matching 'GRADE: C|P|I'" in bad["error"]["message"]
    assert len(bad["error"]["reply"]) < 2100
    assert "[... 3600 characters omitted ...]" in bad["error"]["reply"]
    assert bad["error"]["reply"].startswith("The answer looks plausible.")
    assert result.manifest.counts == {"scored": 1, "judge_error": 1}
    assert result.manifest.score.n == 1 and result.manifest.score.mean == 1.0
    assert result.manifest.judge.errors == {"unparseable": 1}


def test_reply_cut_at_max_tokens_says_so(tmp_path: Path) -> None:
    """A reply stopped at max_tokens before any verdict is a judge_error that says so;
    one cut after its verdict is scored and counted as truncated."""
    spec = write_eval(
        tmp_path,
        _rows(
            [{"text": "Let me think step by step about", "stop_reason": "max_tokens"}],
            [{"text": "GRADE: C because the", "stop_reason": "max_tokens"}],
        ),
        scorer={"model": {**_judge(), "params": {"max_tokens": 7}}},
    )
    result, rows = run(spec, tmp_path / "results")
    cut = rows[0]["error"]
    assert cut["reason"] == "truncated" and cut["truncated"] is True
    assert "cut at max_tokens (7 tokens) before a verdict" in cut["message"]
    assert "raise scorer.model.params.max_tokens" in cut["message"]
    assert rows[1]["state"] == "scored" and rows[1]["scorer"]["verdicts"][0]["truncated"]
    assert result.manifest.judge.truncated == 2
    assert result.manifest.judge.errors == {"truncated": 1}


def test_unreachable_judge_is_a_judge_error_naming_the_provider_error(tmp_path: Path) -> None:
    """A judge call that fails is a judge_error naming the judge and the classified
    provider error; nothing is cached, so a re-run asks again."""
    spec = write_eval(
        tmp_path, _rows([{"raise": "ServerError", "message": "upstream down", "status": 503}])
    )
    result, rows = run(spec, tmp_path / "results")
    error = rows[0]["error"]
    assert error["reason"] == "provider_error"
    assert error["message"] == (
        "judge python:fake-judge: ServerError: upstream down (after 1 attempt)"
    )
    assert error["provider_error"]["kind"] == "ServerError"
    assert error["provider_error"]["status"] == 503
    assert result.manifest.judge.errors == {"provider_error": 1}
    run(spec, tmp_path / "results")
    assert len(fake_judges.CALLS) == 1


def test_k_samples_are_distinct_calls_reduced_by_mean_or_majority(tmp_path: Path) -> None:
    """samples: 3 makes three distinct judge requests (epoch 1..3); mean gives 2/3,
    majority gives 1, and re-scoring with the other reduction makes no judge call."""
    spec = write_eval(
        tmp_path,
        _rows(["GRADE: C", "GRADE: I", "GRADE: C"]),
        scorer={"samples": 3, "reduce": "mean"},
    )
    result, rows = run(spec, tmp_path / "results")
    assert sorted(r.epoch for r in fake_judges.CALLS) == [1, 2, 3]
    assert len({r.key() for r in fake_judges.CALLS}) == 3
    assert rows[0]["score"] == pytest.approx(2 / 3)
    assert [v["grade"] for v in rows[0]["scorer"]["verdicts"]] == ["C", "I", "C"]
    assert result.manifest.judge.requests == 3 and result.manifest.judge.calls == 3
    majority, rows = run(spec, tmp_path / "results", "scorer.reduce=majority")
    assert fake_judges.CALLS == []
    assert rows[0]["score"] == 1.0
    assert majority.manifest.judge.cache_hits == 3
    assert majority.manifest.identity_hash != result.manifest.identity_hash


def test_second_run_makes_zero_judge_calls(tmp_path: Path) -> None:
    """Re-running a judge eval answers every judge request from the cache."""
    spec = write_eval(tmp_path, _rows(["GRADE: C"], ["GRADE: I"], ["GRADE: P"]))
    first, _ = run(spec, tmp_path / "results")
    assert len(fake_judges.CALLS) == 3
    second, rows = run(spec, tmp_path / "results")
    assert fake_judges.CALLS == []
    assert second.manifest.judge.calls == 0 and second.manifest.judge.cache_hits == 3
    assert all(r["scorer"]["verdicts"][0]["cached"] for r in rows)
    assert second.manifest.score == first.manifest.score
    assert second.manifest.identity_hash == first.manifest.identity_hash


def test_editing_the_judge_file_misses_every_judge_entry_and_no_candidate_entry(
    tmp_path: Path,
) -> None:
    """A changed judge file changes the identity hash and the manifest's judge hash, asks
    the judge again for every sample, and reads every candidate response from the cache."""
    spec = write_eval(tmp_path, _rows(["GRADE: C"], ["GRADE: I"], ["GRADE: P"]))
    first, _ = run(spec, tmp_path / "results")
    (tmp_path / "judge.j2").write_text("Be strict.\n" + SCRIPTED_JUDGE)
    second, _ = run(spec, tmp_path / "results")
    assert len(fake_judges.CALLS) == 3
    assert all(r.prompt.startswith("Be strict.") for r in fake_judges.CALLS)
    assert second.manifest.cache_hits == 3  # every candidate response
    assert second.manifest.judge.calls == 3 and second.manifest.judge.cache_hits == 0
    assert second.manifest.identity_hash != first.manifest.identity_hash
    assert second.manifest.file_hashes["judge"] != first.manifest.file_hashes["judge"]


def test_judge_file_hash_is_in_the_manifest_and_its_path_is_not_in_the_identity(
    tmp_path: Path,
) -> None:
    """The manifest records the judge file's SHA-256; moving the file keeps the identity."""
    import hashlib

    spec = write_eval(tmp_path, _rows(["GRADE: C"]))
    first, _ = run(spec, tmp_path / "results")
    digest = hashlib.sha256((tmp_path / "judge.j2").read_bytes()).hexdigest()
    assert first.manifest.file_hashes["judge"] == digest
    (tmp_path / "judges").mkdir()
    (tmp_path / "judge.j2").rename(tmp_path / "judges" / "grade.j2")
    moved, _ = run(spec, tmp_path / "results", "scorer.file=judges/grade.j2")
    assert moved.manifest.identity_hash == first.manifest.identity_hash
    assert fake_judges.CALLS == []


def test_judge_sees_prompt_response_target_and_row_fields(tmp_path: Path) -> None:
    """The judge file renders the row's fields, prompt, response and target."""
    text = (
        "Q={{ question }} P={{ prompt }} R={{ response }} T={{ target }} "
        'ID={{ sample_id }} <<SCRIPT>>["GRADE: C"]<<END>>'
    )
    (tmp_path / "x").mkdir()
    spec = write_eval(
        tmp_path / "x", [{"id": "q1", "question": "2+2?", "answer": "4"}], judge_text=text
    )
    raw = spec.read_text().replace("prompt: '{{ answer }}'", "prompt: '{{ answer }}'\ntarget: '4'")
    spec.write_text(raw)
    run(spec, tmp_path / "results")
    assert fake_judges.CALLS[0].prompt == 'Q=2+2? P=4 R=4 T=4 ID=q1 <<SCRIPT>>["GRADE: C"]<<END>>'
    assert fake_judges.CALLS[0].model == "fake-judge"


def test_judge_file_errors_stop_the_run_before_any_call(tmp_path: Path) -> None:
    """A missing judge file, an unknown variable and an unimportable judge each stop the
    run with a one-line SpecError naming the fix, before any call."""
    fake_judges.CALLS.clear()
    spec = write_eval(tmp_path, _rows(["GRADE: C"]))
    with pytest.raises(SpecError, match=r"scorer\.file: .*nope\.j2 not found; check the path"):
        gradetrail.plan_run(gradetrail.load_spec(spec, ["scorer.file=nope.j2"]))
    (tmp_path / "judge.j2").write_text("{{ responze }}")
    with pytest.raises(SpecError, match="template uses responze but the first row has only"):
        gradetrail.plan_run(gradetrail.load_spec(spec))
    (tmp_path / "judge.j2").write_text(SCRIPTED_JUDGE)
    with pytest.raises(SpecError, match=r"judge python:fake-judge: model\.function: cannot import"):
        gradetrail.plan_run(gradetrail.load_spec(spec, ["scorer.model.function=nomod:fn"]))
    assert fake_judges.CALLS == []


def test_judge_file_failing_on_one_sample_is_a_judge_error(tmp_path: Path) -> None:
    """A judge file that fails on one row's data makes that row a judge_error naming the
    sample, and the run goes on."""
    text = '{{ (1 / weight) }} <<SCRIPT>>["GRADE: C"]<<END>>'
    rows = [{"id": "a", "answer": "x", "weight": 2}, {"id": "b", "answer": "y", "weight": 0}]
    spec = write_eval(tmp_path, rows, judge_text=text)
    result, out = run(spec, tmp_path / "results")
    assert out[0]["state"] == "scored"
    assert out[1]["error"]["reason"] == "template_error"
    assert "sample 'b': ZeroDivisionError" in out[1]["error"]["message"]
    assert result.manifest.judge.errors == {"template_error": 1}


def test_summary_counts_judge_errors_apart(tmp_path: Path, cli) -> None:
    """The printed summary names the judge, its calls and cache hits, and the judge
    errors per reason, apart from the scored rows."""
    spec = write_eval(tmp_path, _rows(["GRADE: C"], ["no verdict"], [{"raise": "AuthError"}]))
    out = cli("run", str(spec), "--results-root", str(tmp_path / "results"))
    assert out.exit_code == 0, out.stderr
    lines = {ln.split(None, 1)[0]: ln for ln in out.stdout.splitlines()[1:]}
    assert "scored 1, provider_error 0, judge_error 2" in lines["rows"]
    assert "python:fake-judge: 3 requests for 3 rows, 3 calls made, 0 cache hits" in out.stdout
    assert "judge error 2 rows not scored: 1 provider_error, 1 unparseable" in out.stdout
    manifest = json.loads((_run_dir(out.stdout) / "manifest.json").read_text())
    assert manifest["judge"]["errors"] == {"provider_error": 1, "unparseable": 1}


def _run_dir(stdout: str) -> Path:
    line = next(ln for ln in stdout.splitlines() if ln.strip().startswith("results "))
    return Path(line.split(None, 1)[1].strip())


def _judge() -> dict:
    from judge_evals import FAKE_JUDGE

    return dict(FAKE_JUDGE)


def test_replayed_verdicts_are_matched_by_sample_id(tmp_path: Path) -> None:
    """A replay judge serves verdicts recorded elsewhere, one per sample id, even when two
    samples render the same judge prompt."""
    rows = [
        {"id": "a", "answer": "same", "script": []},
        {"id": "b", "answer": "same", "script": []},
    ]
    (tmp_path / "verdicts.jsonl").write_text(
        '{"id": "a", "judge": {"reply": "GRADE: C"}}\n{"id": "b", "judge": {"reply": "GRADE: I"}}\n'
    )
    replay = {
        "provider": "replay",
        "name": "judge",
        "recordings": {"path": "verdicts.jsonl", "response_field": "{model}.reply"},
    }
    spec = write_eval(tmp_path, rows, scorer={"model": replay})
    _, out = run(spec, tmp_path / "results")
    assert [r["score"] for r in out] == [1.0, 0.0]
