"""What a CI job reads from ``gradetrail run``: the run directory in --json, --print-run-dir
for pipelines, a --min-score threshold on the interval's lower bound; --version, -h."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from paths import GSM8K_SPEC

from gradetrail import __version__
from gradetrail.ci.threshold import check_min_score
from gradetrail.cli import app


@pytest.fixture
def interval(cli) -> tuple[float, float]:
    """The 95% interval of the bundled run (175b_verification, 742 of 1319 solved), as its
    manifest reports it: Wilson's (statsmodels 0.15.0 proportion_confint(742, 1319,
    method="wilson") = (0.5356326528399583, 0.5890988475978164))."""
    score = json.loads(cli("run", str(GSM8K_SPEC), "--json").stdout)["score"]
    assert score["mean"] == pytest.approx(742 / 1319)
    assert (score["ci_low"], score["ci_high"]) == pytest.approx((0.535633, 0.589099), abs=1e-6)
    return score["ci_low"], score["ci_high"]


def test_json_names_the_run_dir_identity_status_and_score(cli, tmp_path: Path) -> None:
    """run --json carries the run directory beside the manifest's identity, status, score."""
    out = cli("run", str(GSM8K_SPEC), "--json")
    assert out.exit_code == 0, out.stderr
    data = json.loads(out.stdout)
    run_dir = Path(data["run_dir"])
    assert run_dir.name == f"gsm8k-{data['identity_hash'][:12]}"
    assert (run_dir / "manifest.json").is_file()
    assert data["status"] == "complete"
    assert data["score"]["mean"] == pytest.approx(742 / 1319)
    assert "min_score" not in data


def test_print_run_dir_prints_only_the_directory(cli) -> None:
    """--print-run-dir prints one line, the run directory, fit for $(...)."""
    out = cli("run", str(GSM8K_SPEC), "--print-run-dir")
    assert out.exit_code == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 1
    assert (Path(lines[0]) / "results.jsonl").is_file()


@pytest.mark.parametrize(
    ("offset", "code"), [(-0.03, 0), (-0.0001, 0), (0.0001, 1), (0.02, 1), (0.3, 1)]
)
def test_min_score_holds_the_lower_bound_not_the_mean(
    cli, interval: tuple[float, float], offset: float, code: int
) -> None:
    """--min-score passes iff the 95% CI's lower bound reaches it: a threshold just over
    the lower bound fails though it is under the mean (0.5625)."""
    low = interval[0]
    threshold = round(low + offset, 6)
    out = cli("run", str(GSM8K_SPEC), "--min-score", str(threshold))
    assert out.exit_code == code, out.stdout + out.stderr
    line = next(ln for ln in out.stdout.splitlines() if ln.strip().startswith("min score"))
    assert ("PASS" if code == 0 else "FAIL") in line
    assert f"lower bound {low:.4f}" in line


def test_min_score_in_json(cli, interval: tuple[float, float]) -> None:
    """--json with --min-score reports the threshold check and still exits 1 on a miss,
    though the threshold (0.56) is under the mean."""
    out = cli("run", str(GSM8K_SPEC), "--json", "--min-score", "0.56")
    assert out.exit_code == 1
    check = json.loads(out.stdout)["min_score"]
    assert check["passed"] is False and check["min_score"] == 0.56
    assert (check["ci_low"], check["ci_high"]) == pytest.approx(interval)
    assert check["mean"] == pytest.approx(742 / 1319)


def test_min_score_must_be_finite(cli, tmp_path: Path) -> None:
    """--min-score nan is a usage error (exit 2), before anything runs."""
    out = cli("run", str(GSM8K_SPEC), "--min-score", "nan")
    assert out.exit_code == 2
    assert "--min-score" in out.stderr
    assert not (tmp_path / "results").exists()


def test_check_min_score_without_a_score() -> None:
    """A run with nothing scored never meets a threshold."""
    result = check_min_score(None, 0.1)
    assert not result.passed and "no sample scored" in result.message()


def test_version_flag(cli) -> None:
    """--version prints the one version string (from gradetrail/_version.py), past 0.2."""
    out = cli("--version")
    assert out.exit_code == 0
    assert out.stdout.strip() == f"gradetrail {__version__}"
    major, minor = (int(p) for p in __version__.split(".")[:2])
    assert (major, minor) > (0, 2)


def _commands(group, path=()):  # noqa: ANN001, ANN202 - click objects
    """Every command path under ``group``, through click's group API (the root group
    builds its commands on demand, so its ``commands`` dict starts empty)."""
    if not hasattr(group, "list_commands"):
        return
    for name in group.list_commands(None):
        yield (*path, name)
        yield from _commands(group.get_command(None, name), (*path, name))


def test_every_command_answers_dash_h(cli) -> None:
    """-h and --help work on the root and on every command and subcommand."""
    import typer.main

    group = typer.main.get_command(app)
    commands = list(_commands(group))
    assert ("cache", "stats") in commands and ("gate",) in commands
    for path in [(), *commands]:
        for flag in ("-h", "--help"):
            out = cli(*path, flag)
            assert out.exit_code == 0, (path, flag, out.stderr)
            assert "Usage" in out.stdout, (path, flag)


def test_shell_completion_is_offered(cli) -> None:
    """The root help offers shell completion."""
    out = cli("--help")
    assert "--install-completion" in out.stdout and "--show-completion" in out.stdout
