"""The pairwise scorer: both orders, win/tie/loss, win rate with its interval, missing
baseline samples named, through the cache (scripted judge, python provider)."""

from __future__ import annotations

import json
from pathlib import Path

import fake_judges
import pytest
import yaml
from judge_evals import run
from pairwise_support import ROWS
from pairwise_support import baseline_run as _baseline
from pairwise_support import pairwise_spec as _pairwise

import gradetrail
from gradetrail.errors import SpecError
from gradetrail.report.run import summary_lines
from gradetrail.stats.intervals import summarize


def test_both_orders_cancel_position_bias(tmp_path: Path) -> None:
    """The judge sees each pair in both orders; win 1, loss 0, tie 0.5, and a judge that
    always picks the first position scores a split 0.5 rather than a win."""
    baseline = _baseline(tmp_path, ROWS)
    result, rows = run(_pairwise(tmp_path, ROWS, baseline), tmp_path / "results")
    assert [r["score"] for r in rows] == [1.0, 0.0, 0.5, 0.5]
    assert [r["judge"]["outcome"] for r in rows] == ["win", "loss", "tie", "split"]
    shown = sorted(r.prompt.split("\n")[1] for r in fake_judges.CALLS if r.sample_id == "s1")
    assert shown == ["<<A>>GOOD s1<<B>>bad s1<<END_PAIR>>", "<<A>>bad s1<<B>>GOOD s1<<END_PAIR>>"]
    orders = rows[3]["scorer"]["orders"]
    assert [o["candidate"] for o in orders] == ["A", "B"]
    assert [o["verdicts"][0]["grade"] for o in orders] == ["A", "A"]
    assert [o["value"] for o in orders] == [1.0, 0.0]
    assert rows[0]["scorer"]["baseline_epoch"] == 1
    assert result.manifest.judge.outcomes == {"win": 1, "tie": 1, "loss": 1, "split": 1}
    assert result.manifest.judge.requests == 8 and result.manifest.judge.calls == 8


def test_win_rate_has_its_confidence_interval(tmp_path: Path) -> None:
    """The run's score is the win rate over samples, with summarize's SE and 95% CI (t on
    3 degrees of freedom, clipped to [0, 1]), and the summary calls it a win rate."""
    baseline = _baseline(tmp_path, ROWS)
    result, _ = run(_pairwise(tmp_path, ROWS, baseline), tmp_path / "results")
    expected = summarize([1.0, 0.0, 0.5, 0.5])
    s = result.manifest.score
    assert (s.n, s.mean) == (4, 0.5)
    assert expected.ci_low < 0 and expected.ci_high > 1
    assert (s.se, s.ci_low, s.ci_high) == pytest.approx((expected.se, 0.0, 1.0), abs=1e-12)
    lines = dict(summary_lines(result))
    assert lines["win rate"].startswith("0.5000 ± 0.2041 SE, 95% CI [0.0000, 1.0000]")
    assert lines["outcomes"] == "1 win, 1 tie, 1 loss, 1 split (the two orders disagreed)"


def test_sample_missing_from_the_baseline_is_named(tmp_path: Path) -> None:
    """A sample the baseline lacks is a judge_error naming it, never skipped."""
    baseline = _baseline(tmp_path, ROWS, "dataset.limit=3")
    result, rows = run(_pairwise(tmp_path, ROWS, baseline), tmp_path / "results")
    missing = rows[3]
    assert missing["state"] == "judge_error"
    assert missing["error"]["reason"] == "missing_baseline"
    assert missing["error"]["message"] == (
        f"sample 's4' is missing from the baseline run {baseline}; re-run the baseline on "
        "this dataset"
    )
    assert result.manifest.counts == {"scored": 3, "judge_error": 1}
    assert result.manifest.judge.errors == {"missing_baseline": 1}
    assert not any(r.sample_id == "s4" for r in fake_judges.CALLS)


def test_baseline_row_without_response_is_a_judge_error(tmp_path: Path) -> None:
    """A baseline row in provider_error has no response to compare: a judge_error."""
    rows = [dict(ROWS[0]), {**ROWS[1], "base": "FAIL s2"}]
    baseline = _baseline(tmp_path, rows, candidate="flaky")
    _, out = run(_pairwise(tmp_path, rows, baseline), tmp_path / "results")
    assert out[0]["state"] == "scored"
    assert out[1]["error"]["reason"] == "baseline_error"
    message = out[1]["error"]["message"]
    assert "no response for sample 's2' (epoch 1, state provider_error)" in message


def test_the_baseline_is_shown_as_the_candidate_is_without_its_reasoning(tmp_path: Path) -> None:
    """A baseline response with <think> reasoning is shown to the judge as the
    candidate's is, its answer only: the same answer ties, never loses to reasoning the
    judge was shown for one side; reasoning never closed shows an empty answer."""
    rows = [
        {"id": "s1", "base": "<think>GOOD reasoning</think>bad s1", "cand": "bad s1"},
        {"id": "s2", "base": "<think>GOOD but out of tokens", "cand": "GOOD s2"},
    ]
    rows = [{**r, "biased": False} for r in rows]
    baseline = _baseline(tmp_path, rows)
    assert gradetrail.read_results(baseline)[0]["response"].startswith("<think>GOOD")
    _, out = run(_pairwise(tmp_path, rows, baseline), tmp_path / "results")
    shown = sorted(r.prompt.split("\n")[1] for r in fake_judges.CALLS if r.sample_id == "s1")
    assert shown == ["<<A>>bad s1<<B>>bad s1<<END_PAIR>>"]  # both orders: one prompt, one call
    assert [r["score"] for r in out] == [0.5, 1.0]
    assert [r["judge"]["outcome"] for r in out] == ["tie", "win"]
    s2 = [r.prompt.split("\n")[1] for r in fake_judges.CALLS if r.sample_id == "s2"]
    assert sorted(s2) == ["<<A>><<B>>GOOD s2<<END_PAIR>>", "<<A>>GOOD s2<<B>><<END_PAIR>>"]


def test_orders_that_agree_on_the_side_are_an_outcome_not_a_split(tmp_path: Path) -> None:
    """With samples: 3 and mean, orders of 1.0 and 0.67 both favour the candidate: a win
    (score 0.83); 0.67 and 0.33 disagree: a split. The scripted judge reads the script
    of whichever response is shown first, so each order gets its own verdicts."""

    def script(*verdicts: str) -> str:
        return "<<SCRIPT>>" + json.dumps([f"WINNER: {v}" for v in verdicts]) + "<<END>>"

    rows = [
        {"id": "agree", "cand": script("A", "A", "A"), "base": script("B", "B", "A")},
        {"id": "split", "cand": script("A", "A", "B"), "base": script("A", "A", "B")},
    ]
    baseline = _baseline(tmp_path, rows)
    spec = _pairwise(
        tmp_path,
        rows,
        baseline,
        samples=3,
        model={"provider": "python", "name": "scripted", "function": "fake_judges:scripted"},
    )
    (spec.parent / "judge.j2").write_text("First:\n{{ response_a }}\nSecond:\n{{ response_b }}\n")
    result, out = run(spec, tmp_path / "results")
    values = [o["value"] for r in out for o in r["scorer"]["orders"]]
    assert values == pytest.approx([1.0, 2 / 3, 2 / 3, 1 / 3])
    assert [r["judge"]["outcome"] for r in out] == ["win", "split"]
    assert out[0]["score"] == pytest.approx(5 / 6)
    assert result.manifest.judge.outcomes == {"win": 1, "split": 1}


def test_rerun_makes_zero_judge_calls_and_k_samples_per_order(tmp_path: Path) -> None:
    """samples: 2 asks 2 x 2 orders per sample; a re-run answers all from the cache."""
    baseline = _baseline(tmp_path, ROWS[:2])
    spec = _pairwise(tmp_path, ROWS[:2], baseline, samples=2)
    first, _ = run(spec, tmp_path / "results")
    assert len(fake_judges.CALLS) == 8
    assert len({r.key() for r in fake_judges.CALLS}) == 8
    second, rows = run(spec, tmp_path / "results")
    assert fake_judges.CALLS == []
    assert second.manifest.judge.cache_hits == 8
    assert [r["score"] for r in rows] == [1.0, 0.0]


def test_baseline_enters_the_identity_through_its_responses(tmp_path: Path) -> None:
    """The baseline's responses enter file_hashes and the identity hash: re-running the
    baseline from the cache keeps the identity, a changed baseline response changes it."""
    baseline = _baseline(tmp_path, ROWS)
    first, _ = run(_pairwise(tmp_path, ROWS, baseline), tmp_path / "results")
    rerun = _baseline(tmp_path, ROWS)  # from the cache: new latencies and cache flags
    assert rerun == baseline
    same, _ = run(_pairwise(tmp_path, ROWS, baseline), tmp_path / "results")
    assert same.manifest.identity_hash == first.manifest.identity_hash
    changed_dir = _baseline(tmp_path, ROWS, "prompt='{{ base }} now'")  # same dataset
    moved, _ = run(_pairwise(tmp_path, ROWS, changed_dir), tmp_path / "results")
    assert moved.manifest.file_hashes["baseline"] != first.manifest.file_hashes["baseline"]
    assert moved.manifest.identity_hash != first.manifest.identity_hash


def test_a_baseline_run_on_another_dataset_stops_the_run(tmp_path: Path, cli) -> None:
    """A baseline whose dataset differs from the run's (one row's question edited since)
    is refused before any call, naming both dataset hashes: joined on sample id, its
    responses would answer other questions. The same baseline on the same data scores."""
    edited = [{**ROWS[0], "cand": "GOOD s1, asked again"}, *ROWS[1:]]
    baseline = _baseline(tmp_path / "old", edited)
    fake_judges.CALLS.clear()
    out = cli(
        "run", str(_pairwise(tmp_path, ROWS, baseline)), "--results-root", str(tmp_path / "r")
    )
    assert out.exit_code == 2 and len(out.stderr.strip().splitlines()) == 1
    assert f"scorer.baseline: {baseline} ran on another dataset (dataset_hash" in out.stderr
    assert "re-run the baseline on this dataset" in out.stderr
    assert fake_judges.CALLS == [] and not (tmp_path / "r").exists()
    same = _baseline(tmp_path, ROWS)
    result, _ = run(_pairwise(tmp_path, ROWS, same), tmp_path / "results")
    assert result.manifest.counts == {"scored": 4}
    allowed = _pairwise(tmp_path, ROWS, baseline, allow_different_data=True)
    anyway, _ = run(allowed, tmp_path / "results")  # the user's call: compared anyway
    assert anyway.manifest.counts == {"scored": 4}


def test_baseline_that_is_not_a_run_directory_stops_the_run(tmp_path: Path) -> None:
    """A baseline path without results.jsonl is a one-line SpecError before any call."""
    (tmp_path / "empty").mkdir()
    spec = _pairwise(tmp_path, ROWS, tmp_path / "empty")
    with pytest.raises(SpecError, match=r"scorer\.baseline: .*empty is not a run directory"):
        gradetrail.plan_run(gradetrail.load_spec(spec))


def test_a_row_without_a_field_the_pairwise_file_reads_stops_the_run(tmp_path: Path, cli) -> None:
    """A pairwise judge file reading a row field the last row lacks stops the run with one
    line naming the sample, exit 2, before any candidate or judge call."""
    rows = [{**r, "rubric": "be brief"} for r in ROWS[:-1]] + [ROWS[-1]]
    baseline = _baseline(tmp_path, rows)
    spec = _pairwise(tmp_path, rows, baseline)
    judge = spec.parent / "judge.j2"
    judge.write_text("{{ rubric }}\n" + judge.read_text())
    fake_judges.CALLS.clear()
    out = cli("run", str(spec), "--results-root", str(tmp_path / "cand-results"))
    assert out.exit_code == 2, out.stdout
    (line,) = [x for x in out.stderr.splitlines() if x.strip()]
    assert "sample 's4' (line 4)" in line and "rubric" in line, line
    assert fake_judges.CALLS == [] and not (tmp_path / "cand-results").exists()


def test_a_pairwise_file_that_never_shows_one_response_stops_the_run(tmp_path: Path, cli) -> None:
    """A pairwise judge file without ``{{ response_b }}`` shows the judge one response:
    it cannot compare them. Refused in one line, exit 2, before any call."""
    baseline = _baseline(tmp_path, ROWS)
    spec = _pairwise(tmp_path, ROWS, baseline)
    (spec.parent / "judge.j2").write_text("Is this good? {{ response_a }}\n")
    fake_judges.CALLS.clear()
    out = cli("run", str(spec), "--results-root", str(tmp_path / "cand-results"))
    assert out.exit_code == 2, out.stdout
    (line,) = [x for x in out.stderr.splitlines() if x.strip()]
    assert line.endswith(
        "scorer.file (judge.j2): the judge file never reads {{ response_b }}, so the judge "
        "would compare without seeing both responses; show both with {{ response_a }} and "
        "{{ response_b }}"
    ), line
    assert fake_judges.CALLS == [] and not (tmp_path / "cand-results").exists()


# --------------------------------------------------------------------------------------
# At the HTTP boundary: model, baseline and judge over the openai SDK and the local
# protocol server; the judge is scripted to prefer the response reaching the reference.

from paths import GSM8K_DATA  # noqa: E402
from protocol_server import protocol_server_fixture  # noqa: E402

server = protocol_server_fixture(scope="module", name="server")

HTTP_PAIR_JUDGE = """Reference answer: {{ answer.split('####')[-1] | trim }}

Response A:
{{ response_a }}

Response B:
{{ response_b }}

Which response reaches the reference answer? End with "WINNER: A", "WINNER: B" or "WINNER: TIE".
"""
_REF = r"Reference answer: ([^\n]*)\n\nResponse A:\n"
_A_RIGHT = r"(?:.*\n)?A: \1\n\nResponse B:\n"
_B_RIGHT = r"(?:.*\n)?A: \1\n\nWhich"
CORRECTNESS_SCRIPT = {
    "rules": [
        {"regex": _REF + _A_RIGHT + _B_RIGHT, "reply": "Both reach it.\nWINNER: TIE"},
        {"regex": _REF + _A_RIGHT, "reply": "Only A reaches it.\nWINNER: A"},
        {"regex": _REF + r".*\n\nResponse B:\n" + _B_RIGHT, "reply": "Only B.\nWINNER: B"},
        {"contains": "Response B:", "reply": "Neither reaches it.\nWINNER: TIE"},
    ],
    "models": ["judge-model"],
}


def _gsm8k_spec(root: Path, name: str, model: str, url: str, scorer: dict) -> Path:
    root.mkdir(parents=True)
    spec = {
        "name": name,
        "dataset": {"path": str(GSM8K_DATA / "test.jsonl"), "limit": 100},
        "prompt": 'Solve the math word problem. End with a line "A: <answer>".\n\n'
        "Q: {{ question }}\n",
        "target": "{{ answer.split('####')[-1] | trim }}",
        "model": {
            "provider": "openai_compatible",
            "name": model,
            "base_url": url,
            "api_key_required": False,
        },
        "scorer": scorer,
        "run": {"max_retries": 0},
    }
    (root / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return root / "spec.yaml"


def test_http_pairwise_win_rate_against_a_baseline_run(server, tmp_path: Path) -> None:
    """175b_verification against a 175b_finetuning baseline, both served over HTTP: the
    judge is asked in both orders (2 distinct requests a sample), never splits, and the
    win rate is what the solutions' final lines imply."""
    server.reset()
    server.configure(script=CORRECTNESS_SCRIPT)
    url = server.openai_base_url
    base_spec = _gsm8k_spec(tmp_path / "b", "base", "175b_finetuning", url, {"type": "exact"})
    baseline = gradetrail.run_eval(
        gradetrail.load_spec(base_spec), results_root=tmp_path / "results"
    )
    judge = {
        "provider": "openai_compatible",
        "name": "judge-model",
        "base_url": url,
        "api_key_required": False,
    }
    scorer = {
        "type": "pairwise",
        "file": "pair.j2",
        "model": judge,
        "baseline": str(baseline.run_dir),
    }
    spec_path = _gsm8k_spec(tmp_path / "c", "cand", "175b_verification", url, scorer)
    spec_path.parent.joinpath("pair.j2").write_text(HTTP_PAIR_JUDGE)
    server.reset(config=False)
    result, rows = run(spec_path, tmp_path / "results")
    stats = server.stats()
    assert stats["models"] == {"175b_verification": 100, "judge-model": 200}
    assert stats["repeated"] == 0  # the two orders are two different prompts

    expected = []
    for line in (GSM8K_DATA / "example_model_solutions.jsonl").open().readlines()[:100]:
        row = json.loads(line)
        target = row["ground_truth"].split("A:")[-1].strip()
        ok = {m: row[m]["solution"].split("\n")[-1] == f"A: {target}" for m in MODELS}
        cand, base = ok["175b_verification"], ok["175b_finetuning"]
        expected.append(0.5 if cand == base else 1.0 if cand else 0.0)
    assert [r["score"] for r in rows] == expected
    assert result.manifest.judge.outcomes == {
        "win": expected.count(1.0),
        "tie": expected.count(0.5),
        "loss": expected.count(0.0),
    }
    assert result.manifest.score.mean == pytest.approx(sum(expected) / 100)
    assert expected.count(1.0) > expected.count(0.0) > 0


MODELS = ("175b_verification", "175b_finetuning")


@pytest.mark.parametrize(
    ("style", "outcomes"),
    [
        ("mt-bench", ["win", "loss", "tie", "win"]),
        ("arena-hard", ["win", "loss", "tie", "win"]),
        ("prometheus", ["win", "loss", "split", "win"]),  # no tie: a first-position pick
        ("alpaca-eval", ["win", "loss", "split", "win"]),
    ],
)
def test_published_pairwise_formats_read_without_a_pattern(
    tmp_path: Path, style: str, outcomes: list[str]
) -> None:
    """MT-Bench's [[A]] / [[B]] / [[C]] (a tie), Arena-Hard's [[A>>B]] ... [[B>A]],
    Prometheus's [RESULT] A / B and AlpacaEval 2's bare m / M (case matters: m is the
    first output) are read by ``format`` alone, in both orders."""
    rows = [{**r, "style": style, "biased": False} for r in ROWS]
    baseline = _baseline(tmp_path, rows)
    spec = _pairwise(tmp_path, rows, baseline, parse={"format": style})
    raw = yaml.safe_load(spec.read_text())
    (spec.parent / raw["scorer"]["file"]).write_text(
        "Which is better?\n<<A>>{{ response_a }}<<B>>{{ response_b }}<<END_PAIR>>\n"
        "<<STYLE:{{ style }}>>\n"
    )
    _, out = run(spec, tmp_path / "results")
    assert [r["judge"]["outcome"] for r in out] == outcomes
    assert [r["score"] for r in out] == [{"win": 1.0, "loss": 0.0}.get(o, 0.5) for o in outcomes]


def test_arena_hard_counts_a_strong_verdict_as_three_battles(tmp_path: Path) -> None:
    """Arena-Hard-Auto counts [[A>>B]] as 3 battles and [[A>B]] as 1 (show_result.py,
    --weight 3). A judge biased to position A, strongly when A is the better response:
    s1's candidate wins 3 battles (shown first) and loses 1 (shown second), 3/4 = 0.75;
    s2's wins 1 and loses 3, 0.25 (before: each order one vote, 0.5 and 0.5)."""
    rows = [{**r, "style": "arena-hard-biased", "biased": False} for r in ROWS]
    baseline = _baseline(tmp_path, rows)
    spec = _pairwise(tmp_path, rows, baseline, parse={"format": "arena-hard"})
    raw = yaml.safe_load(spec.read_text())
    (spec.parent / raw["scorer"]["file"]).write_text(
        "Which is better?\n<<A>>{{ response_a }}<<B>>{{ response_b }}<<END_PAIR>>\n"
        "<<STYLE:{{ style }}>>\n"
    )
    result, out = run(spec, tmp_path / "results")
    assert [r["score"] for r in out] == [0.75, 0.25, 0.5, 0.75]
    assert [r["scorer"]["battles"] for r in out] == [4, 4, 2, 4]
    assert [r["judge"]["outcome"] for r in out] == ["split"] * 4  # position A each time
    assert result.manifest.score.mean == pytest.approx(0.5625)


def test_arena_hard_reports_its_pooled_battle_rate_apart_from_the_gated_win_rate(
    tmp_path: Path,
) -> None:
    """Arena-Hard-Auto's leaderboard averages every battle of every question
    (show_result.py): 8 of 14 battles won, 0.5714; the run's win rate weighs each sample
    once, 0.5625. The summary shows both, each saying which it is, and the gate compares
    the per-sample win rate the summary's win rate line shows, and says so. Before, only
    the per-sample mean was shown, under the same "win rate" a leaderboard user compares."""
    rows = [{**r, "style": "arena-hard-biased", "biased": False} for r in ROWS]
    baseline = _baseline(tmp_path, rows)
    spec = _pairwise(tmp_path, rows, baseline, parse={"format": "arena-hard"})
    raw = yaml.safe_load(spec.read_text())
    (spec.parent / raw["scorer"]["file"]).write_text(
        "Which is better?\n<<A>>{{ response_a }}<<B>>{{ response_b }}<<END_PAIR>>\n"
        "<<STYLE:{{ style }}>>\n"
    )
    result, _ = run(spec, tmp_path / "results")
    judge = result.manifest.judge
    assert (judge.battles, judge.battles_won) == (14, 8.0)
    lines = dict(summary_lines(result))
    assert lines["battles"].startswith(
        "Arena-Hard pooled win rate 0.5714: 8 of 14 battles won (a tie half), every battle "
        "weighed once"
    )
    assert lines["win rate"].startswith("0.5625 ")
    gated = gradetrail.regression_gate(result.run_dir, result.run_dir, allow_different_data=True)
    assert gated.baseline_mean == pytest.approx(0.5625) == gated.candidate_mean
    assert gated.quantity.startswith("win rate against the pairwise baseline, each sample")
    assert "not the leaderboard's pooled battle rate" in gated.quantity
