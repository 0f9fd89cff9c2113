"""run.truncated over real truncated answers: GSM8K solutions served by the local protocol
server under a max_tokens that cuts some of them short. The summary (manifest and
samples.jsonl), the gate and the viewer's tally count them as the policy says; the policy
enters the identity, its default leaves the hash as it was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import run_cli
from http_support import gsm8k_spec
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

import gradetrail
from gradetrail.report.run import manifest_lines
from gradetrail.rundir.manifest import identity_body
from gradetrail.rundir.summary import Tally
from gradetrail.rundir.truncation import counted_score

server = protocol_server_fixture(scope="module", name="server")
srv = fresh_protocol_server_fixture("server", name="srv")

N = 40


def _run(tmp_path: Path, srv, policy: str | None) -> gradetrail.RunResult:  # noqa: ANN001
    run = {"truncated": policy} if policy else {}
    spec = gsm8k_spec(
        tmp_path / (policy or "default"),
        srv,
        "openai_compatible",
        limit=N,
        run=run,
        params={"max_tokens": 60},
    )
    return gradetrail.run_eval(
        spec, results_root=tmp_path / "r", cache_path=tmp_path / "cache.sqlite"
    )


def test_the_policy_decides_how_truncated_answers_count(srv, tmp_path: Path) -> None:
    runs = {p: _run(tmp_path, srv, p) for p in (None, "score", "exclude", "zero")}
    assert srv.stats()["statuses"]["200"] == N  # one set of calls, cached for the others
    rows = gradetrail.read_results(runs["score"].run_dir)
    cut = [r for r in rows if r["truncated"]]
    whole = [r for r in rows if not r["truncated"]]
    assert 5 <= len(cut) < N and all(r["state"] == "scored" for r in rows)
    assert all(r["stop_reason"] == "max_tokens" for r in cut)
    means = {p: r.manifest.score.mean for p, r in runs.items()}
    assert means[None] == means["score"] == pytest.approx(sum(r["score"] for r in rows) / N)
    assert means["exclude"] == pytest.approx(sum(r["score"] for r in whole) / len(whole))
    assert runs["exclude"].manifest.score.n == len(whole)
    assert means["zero"] == pytest.approx(sum(r["score"] for r in whole) / N)
    assert {r.manifest.truncated for r in runs.values()} == {len(cut)}
    stated = dict(manifest_lines(runs["exclude"].manifest, ""))["truncated"]
    assert stated == f"{len(cut)} responses stopped at max_tokens; left out of the mean"
    # samples.jsonl says the same
    lines = [json.loads(x) for x in (runs["zero"].run_dir / "samples.jsonl").read_text().split()]
    assert sum(line["score"] for line in lines) == pytest.approx(means["zero"] * N)
    # the default keeps the hash it had; the others are other runs
    hashes = {p: r.manifest.identity_hash for p, r in runs.items()}
    assert hashes[None] == hashes["score"]
    assert len({hashes["score"], hashes["exclude"], hashes["zero"]}) == 3
    assert "truncated" not in identity_body(runs["score"].manifest.spec)["run"]
    # the viewer's tally of the rows written (Tally.for_spec) agrees with the manifest
    tally = Tally.for_spec(gradetrail.load_spec(tmp_path / "exclude" / "spec.yaml"))
    for row in gradetrail.read_results(runs["exclude"].run_dir):
        tally.add(row)
    assert tally.score_stats().mean == pytest.approx(means["exclude"])

    # the gate reads the policy from each run, and refuses two policies
    refused = run_cli("gate", str(runs["score"].run_dir), str(runs["exclude"].run_dir))
    assert refused.code == 2 and "count truncated answers differently" in refused.err
    for policy in ("zero", "exclude"):
        same = run_cli("gate", str(runs[policy].run_dir), str(runs[policy].run_dir), "--json")
        assert same.code in (0, 1), same.err  # compared (40 samples decide no verdict here)
        gated = json.loads(same.out)
        assert gated["baseline_mean"] == pytest.approx(means[policy])
        assert gated["n"] == (N if policy == "zero" else len(whole))


@pytest.mark.parametrize(("policy", "expected"), [("score", 1.0), ("exclude", None), ("zero", 0.0)])
def test_counted_score(policy: str, expected: float | None) -> None:
    row = {"state": "scored", "score": 1.0, "truncated": True}
    assert counted_score(row, policy) == expected
    assert counted_score({**row, "truncated": False}, policy) == 1.0
    assert counted_score({**row, "state": "judge_error", "score": None}, policy) is None
