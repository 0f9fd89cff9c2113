"""A change for speed changes no byte a run writes: the GSM8K example's results.jsonl,
samples.jsonl and identity hash, cold (filling the cache) and warm (every row a hit),
with one epoch and with two, are held to the SHA-256 they had before issue 29's work
(measured on the tree it started from). A change that means to alter what a run writes
updates these figures in the same commit, and says why."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from paths import GSM8K_SPEC

import gradetrail

#: label -> (overrides, identity hash, {phase: (results.jsonl, samples.jsonl) SHA-256})
EXPECTED = {
    "one epoch": (
        [],
        "4bb0c4d9176a517d860a251fd24a968ee951523aa68388c3418b1ddc6f132371",
        {
            "cold": (
                "f7b1f523da276b6965f2e1f46e3d6cea8566be1222a90bd06f52473df9e26b28",
                "3d1dbfb10fbcb4f80746147e88694b9c3c8cc10244dfb81a0a5efc43ff693c13",
            ),
            "warm": (
                "fb2a5844ad55e78e72c95e1b776529f4dabf1b9037ffbd477bc92427dea857bb",
                "3d1dbfb10fbcb4f80746147e88694b9c3c8cc10244dfb81a0a5efc43ff693c13",
            ),
        },
    ),
    "two epochs": (
        ["run.epochs=2", "dataset.limit=300"],
        "35f36c90df51dce4d363c9131ea03e0187e875e9c7698330fc3486fd2572a703",
        {
            "cold": (
                "4584512c9fb6cbae0a45f0c2b09324600a761f78b47032ae425783b36bd90d85",
                "e883c33ba37c3cb111ffb759264fb2c1e75c9b4ab2fb2e49211899a6cfda0070",
            ),
            "warm": (
                "a04b293d20959d383c0dfabfe9ce6547746c0f7d99bb48d786e1be583151e566",
                "e883c33ba37c3cb111ffb759264fb2c1e75c9b4ab2fb2e49211899a6cfda0070",
            ),
        },
    ),
}


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("label", list(EXPECTED))
def test_gsm8k_runs_write_the_same_bytes(label: str, tmp_path: Path) -> None:
    overrides, identity, phases = EXPECTED[label]
    spec = gradetrail.load_spec(GSM8K_SPEC, overrides)
    for phase, (results, samples) in phases.items():
        run = gradetrail.run_eval(
            spec, results_root=tmp_path / phase, cache_path=tmp_path / "cache.sqlite"
        )
        assert run.manifest.identity_hash == identity
        assert _sha256(run.run_dir / "results.jsonl") == results, phase
        assert _sha256(run.run_dir / "samples.jsonl") == samples, phase
