"""The gate on real `gradetrail run` output: the GSM8K 175B pair from the authors' data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from paths import GSM8K_SPEC


@pytest.fixture
def runs(cli, tmp_path: Path) -> dict[str, Path]:
    """Run directories of the bundled example for both 175B models."""
    out = {}
    for model in ("175b_verification", "175b_finetuning"):
        result = cli("run", str(GSM8K_SPEC), "--set", f"model.name={model}", "--json")
        assert result.exit_code == 0
        identity = json.loads(result.stdout)["identity_hash"]
        out[model] = tmp_path / "results" / f"gsm8k-{identity[:12]}"
    return out


def test_weaker_candidate_fails_the_gate(cli, runs: dict[str, Path]) -> None:
    """175b_finetuning as candidate against 175b_verification fails: exit 1, 360 vs 76."""
    out = cli("gate", str(runs["175b_verification"]), str(runs["175b_finetuning"]), "--json")
    assert out.exit_code == 1
    verdict = json.loads(out.stdout)
    assert (verdict["only_baseline"], verdict["only_candidate"]) == (360, 76)
    assert verdict["n"] == 1319 and verdict["method"] == "tango"
    assert verdict["delta"] == pytest.approx((458 - 742) / 1319)
    assert verdict["passed"] is False


def test_stronger_candidate_and_self_pass_the_gate(cli, runs: dict[str, Path]) -> None:
    """The reverse direction passes, and a run against itself passes."""
    reverse = cli("gate", str(runs["175b_finetuning"]), str(runs["175b_verification"]))
    assert reverse.exit_code == 0
    same = cli("gate", str(runs["175b_verification"]), str(runs["175b_verification"]))
    assert same.exit_code == 0
