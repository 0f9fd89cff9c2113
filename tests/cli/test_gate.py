"""Tests for the `gate` and `power` commands, on a Typer app built with `register(app)`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from gate_support import passes, write_run
from typer.testing import CliRunner

from gradetrail.cli.gate import register


@pytest.fixture
def app() -> typer.Typer:
    """A fresh Typer app with only the gate and power commands."""
    app = typer.Typer()
    register(app)
    return app


@pytest.fixture
def runner() -> CliRunner:
    """A CLI runner (stdout and stderr kept apart)."""
    return CliRunner()


def test_gate_failing_candidate_exits_1_with_a_table(
    app: typer.Typer, runner: CliRunner, tmp_path: Path
) -> None:
    """100/100 vs 99/100 at the default margin: a table with the Tango interval, exit 1."""
    base = write_run(tmp_path / "b", passes(100))
    cand = write_run(tmp_path / "c", passes(99))
    result = runner.invoke(app, ["gate", str(base), str(cand)])
    assert result.exit_code == 1, result.output
    for text in ("only baseline passed", "-0.0545", "+0.0274", "Tango", "FAIL"):
        assert text in result.stdout


def test_gate_passing_candidate_exits_0(
    app: typer.Typer, runner: CliRunner, tmp_path: Path
) -> None:
    """The z method at margin 0.05 passes the seed vector: exit 0."""
    base = write_run(tmp_path / "b", passes(100))
    cand = write_run(tmp_path / "c", passes(99))
    args = ["gate", str(base), str(cand), "--margin", "0.05", "--method", "z"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "PASS" in result.stdout and "-0.0296" in result.stdout


def test_gate_json_prints_one_object(app: typer.Typer, runner: CliRunner, tmp_path: Path) -> None:
    """--json prints exactly one JSON object with the verdict and the interval."""
    base = write_run(tmp_path / "b", passes(90))
    cand = write_run(tmp_path / "c", passes(100))
    result = runner.invoke(app, ["gate", str(base), str(cand), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["passed"] is True and data["method"] == "tango"
    assert data["delta"] == pytest.approx(0.1)
    assert (data["only_baseline"], data["only_candidate"]) == (0, 10)


def test_gate_cannot_compare_exits_2_with_one_line_on_stderr(
    app: typer.Typer, runner: CliRunner, tmp_path: Path
) -> None:
    """Different datasets: exit 2, one line on stderr naming the fix, nothing on stdout."""
    base = write_run(tmp_path / "b", passes(4, 4), dataset_hash="aaa")
    cand = write_run(tmp_path / "c", passes(4, 4), dataset_hash="bbb")
    result = runner.invoke(app, ["gate", str(base), str(cand)])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert "--allow-different-data" in result.stderr


def test_gate_errors_option_counts_handled_samples(
    app: typer.Typer, runner: CliRunner, tmp_path: Path
) -> None:
    """--errors exclude reports the excluded sample by id in the table."""
    base = write_run(tmp_path / "b", passes(4, 4))
    cand = write_run(tmp_path / "c", passes(4, 4), states={("s2", 1): "provider_error"})
    refused = runner.invoke(app, ["gate", str(base), str(cand)])
    assert refused.exit_code == 2 and "--errors" in refused.stderr
    args = ["gate", str(base), str(cand), "--errors", "exclude", "--margin", "0.99"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "1: s2 (excluded from both runs)" in result.stdout


def test_gate_names_samples_present_in_one_run(
    app: typer.Typer, runner: CliRunner, tmp_path: Path
) -> None:
    """A sample only the baseline has stops the gate (exit 2) naming it; with
    --allow-partial it is named in the table."""
    base = write_run(tmp_path / "b", [1.0, 1.0, 1.0], ids=["a", "b", "lost"])
    cand = write_run(tmp_path / "c", [1.0, 1.0], ids=["a", "b"])
    refused = runner.invoke(app, ["gate", str(base), str(cand), "--margin", "0.99"])
    assert refused.exit_code == 2 and "only in the baseline (lost)" in refused.stderr
    args = ["gate", str(base), str(cand), "--margin", "0.99", "--allow-partial"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "only in baseline" in result.stdout and "lost" in result.stdout


def test_gate_rejects_an_unknown_method(
    app: typer.Typer, runner: CliRunner, tmp_path: Path
) -> None:
    """An unknown --method is a usage error (exit 2)."""
    base = write_run(tmp_path / "b", passes(4, 4))
    result = runner.invoke(app, ["gate", str(base), str(base), "--method", "bootstrap"])
    assert result.exit_code == 2


def test_gate_refuses_a_margin_every_candidate_would_pass(
    app: typer.Typer, runner: CliRunner, tmp_path: Path
) -> None:
    """--margin 2 (meant as two points) would pass any candidate on [0, 1] scores: one
    line naming the scale, exit 2; 0.02 gates the same runs."""
    base = write_run(tmp_path / "b", passes(40, 40))
    cand = write_run(tmp_path / "c", passes(0, 40))
    for margin in ("1", "2"):
        refused = runner.invoke(app, ["gate", str(base), str(cand), "--margin", margin])
        assert refused.exit_code == 2, refused.output
        assert f"margin {margin} is on the score scale" in refused.stderr
        assert "0.02 is two points" in refused.stderr
    gated = runner.invoke(app, ["gate", str(base), str(cand), "--margin", "0.02"])
    assert gated.exit_code == 1, gated.output
    zero = ["gate", str(base), str(cand), "--test", "equivalence", "--margin", "0"]
    refused = runner.invoke(app, zero)  # another out-of-range argument: one line, exit 2
    assert refused.exit_code == 2 and "an equivalence test needs a margin > 0" in refused.stderr


def test_power_sample_size_reproduces_miller(app: typer.Typer, runner: CliRunner) -> None:
    """omega^2 = 1/9, delta 0.03 -> n = 969, whether given as omega^2 or variance + rho."""
    direct = runner.invoke(app, ["power", "--omega2", str(1 / 9), "--delta", "0.03"])
    assert direct.exit_code == 0, direct.output
    assert "n = 969 samples" in direct.stdout
    args = ["power", "--variance", str(1 / 9), "--correlation", "0.5", "--delta", "0.03"]
    via_rho = runner.invoke(app, [*args, "--json"])
    assert json.loads(via_rho.stdout)["n"] == 969


def test_power_minimum_detectable_effect(app: typer.Typer, runner: CliRunner) -> None:
    """--n prints the minimum detectable effect (0.0300 at Miller's n = 969)."""
    result = runner.invoke(app, ["power", "--omega2", str(1 / 9), "--n", "969"])
    assert result.exit_code == 0, result.output
    assert "minimum detectable effect with n = 969: 0.0300" in result.stdout


def test_power_half_width(app: typer.Typer, runner: CliRunner) -> None:
    """--half-width prints the samples for that interval half-width."""
    result = runner.invoke(app, ["power", "--omega2", str(1 / 9), "--half-width", "0.02"])
    assert result.exit_code == 0, result.output
    assert "n = 1068 samples" in result.stdout


def test_power_needs_exactly_one_question(app: typer.Typer, runner: CliRunner) -> None:
    """Neither or both of --delta/--n, or no variance, is a usage error (exit 2)."""
    assert runner.invoke(app, ["power", "--omega2", "0.1"]).exit_code == 2
    both = ["power", "--omega2", "0.1", "--delta", "0.03", "--n", "100"]
    assert runner.invoke(app, both).exit_code == 2
    assert runner.invoke(app, ["power", "--delta", "0.03"]).exit_code == 2


def test_gate_table_says_when_the_interval_is_clipped(
    app: typer.Typer, runner: CliRunner, tmp_path: Path
) -> None:
    """Two samples of non-binary scores: the table shows [-1, +1] and the unclipped t
    interval, and a warning line says the verdict uses the unclipped bounds."""
    base = write_run(tmp_path / "b", [0.2, 0.5])
    cand = write_run(tmp_path / "c", [0.7, 0.5])
    result = runner.invoke(app, ["gate", str(base), str(cand)], env={"COLUMNS": "220"})
    assert result.exit_code == 1, result.output
    out = " ".join(result.stdout.split())
    assert "[-1.0000, +1.0000] (clipped to the possible range; unclipped [-2.9266," in out
    assert "the verdict uses the unclipped bounds" in out


def test_a_family_says_its_intervals_are_unadjusted_and_plans_n_at_its_level(
    app: typer.Typer, runner: CliRunner, tmp_path: Path
) -> None:
    """Two candidates each lose 5 and gain 5 of the baseline's 280/400: each 95% Tango
    interval [-0.0181, +0.0181] clears the margin, but Holm adjusts p 0.0168 to 0.0337, so
    both fail. The table, the reason, the Markdown and JUnit say the interval is unadjusted
    and that the adjusted p decides (the table said "pass iff lower bound >= -0.02" beside
    FAIL), and the n needed is planned at alpha/2 = 0.0125, 596 (it was 492, at the
    comparison's own level, which would not pass in this family)."""
    base = write_run(tmp_path / "b", passes(280, 400))
    one, two = passes(280, 400), passes(280, 400)
    for i in range(5):
        one[i], one[280 + i] = 0.0, 1.0
        two[10 + i], two[285 + i] = 0.0, 1.0
    cands = [write_run(tmp_path / "c1", one), write_run(tmp_path / "c2", two)]
    args = ["gate", str(base), str(cands[0]), str(base), str(cands[1])]
    md, xml = tmp_path / "gate.md", tmp_path / "gate.xml"
    out = runner.invoke(
        app, [*args, "--markdown", str(md), "--junit", str(xml)], env={"COLUMNS": "200"}
    )
    assert out.exit_code == 1, out.output
    assert out.stdout.count("95% interval (unadjusted) │ [-0.0181, +0.0181]") == 2
    assert out.stdout.count("pass iff Holm-adjusted p <= 0.025; the interval is unadjusted") == 2
    assert "pass iff lower bound" not in out.stdout
    assert (
        "95% unadjusted lower bound -0.0181 >= -0.0200; Holm-adjusted p 0.0337 > alpha"
        in out.stdout
    )
    assert "n needed at alpha/2 = 0.0125: 596" in out.stdout
    report = md.read_text()
    assert "| 95% interval (unadjusted) | [-0.0181, +0.0181]" in report
    assert "| p (Holm-adjusted, decides) | 0.0337 |" in report
    assert "95% unadjusted interval [-0.0181, +0.0181]" in xml.read_text()
    family = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    for r in family["results"]:
        assert (r["passed"], r["lo"], r["p_value"]) == (
            False,
            pytest.approx(-0.0181, abs=5e-5),
            pytest.approx(0.0168, abs=5e-5),
        )
        assert r["n_needed"] == 596 and r["power_command"].endswith("--alpha 0.025")
    alone = json.loads(runner.invoke(app, ["gate", str(base), str(cands[0]), "--json"]).stdout)
    assert alone["passed"] and alone["p_adjusted"] is None


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("spec", "x", "has spec 'x', not an object"),
        ("dataset", [1], "has dataset [1], not an object"),
        ("epochs", {"a": 1}, "has epochs {'a': 1}, not an integer"),
        (
            "spec",
            {"run": {"reducer": "pass_at_k", "pass_k": "2"}},
            "has spec.run.pass_k '2', not an integer",
        ),
    ],
)
def test_gate_a_manifest_field_of_the_wrong_type_exits_2_not_1(
    tmp_path: Path, field: str, value: object, said: str
) -> None:
    """An edited manifest whose spec, dataset or epochs has the wrong JSON type crashed
    the gate with a traceback (AttributeError, TypeError) and Python's exit code 1, the
    gate's fail: a CI step read a crash as a regression. Now one line naming the field,
    exit 2 (cannot compare), through the real entry point."""
    from cli_support import run_cli

    base = write_run(tmp_path / "b", passes(80))
    cand = write_run(tmp_path / "c", passes(80))
    manifest = json.loads((cand / "manifest.json").read_text())
    (cand / "manifest.json").write_text(json.dumps({**manifest, field: value}))
    outcome = run_cli("gate", str(base), str(cand))
    assert outcome.code == 2 and outcome.out == ""
    fix = "the file was edited or damaged since the run wrote it; run the same spec again"
    assert outcome.err_lines == [
        f"error: candidate run {cand}: manifest.json {said}: {fix} to rewrite it from the cache"
    ]


def test_reports_say_what_a_tango_n_needed_rests_on(tmp_path: Path) -> None:
    """Identical binary runs of 100 (no discordant pair) need 189 samples, from Tango's
    bound z^2 (1 - margin) / margin with no power command: the Markdown report printed
    "189 (`None`)" and the JUnit details left the figure out; now both say "189 (Tango,
    no discordant pair)", as the table does."""
    from cli_support import run_cli

    base = write_run(tmp_path / "b", passes(80))
    cand = write_run(tmp_path / "c", passes(80))
    md, xml = tmp_path / "gate.md", tmp_path / "gate.xml"
    outcome = run_cli("gate", str(base), str(cand), "--markdown", str(md), "--junit", str(xml))
    assert outcome.code == 1
    assert "| samples needed | 189 (Tango, no discordant pair) |" in md.read_text()
    assert "None" not in md.read_text()
    assert "samples needed: 189 (Tango, no discordant pair)" in xml.read_text()
    assert "n needed              │ 189 (Tango, no discordant pair)" in outcome.out
