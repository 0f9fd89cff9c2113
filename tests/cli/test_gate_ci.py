"""The gate's CI outputs on the GSM8K 175B pair: JUnit XML (checked against the common
JUnit schema and read back by a JUnit parser), a Markdown report, GitHub annotations and
the step summary."""

from __future__ import annotations

import json
from pathlib import Path

import junitparser
import pytest
import xmlschema
from paths import GSM8K_DATA, GSM8K_SPEC, ROOT

from gradetrail.ci.text import github_data, markdown_code, xml_text

SCHEMA = xmlschema.XMLSchema(ROOT / "tests" / "data" / "junit.xsd")


def _labels() -> tuple[list[str], list[str]]:
    """Sample ids only 175b_verification solves, and only 175b_finetuning solves (the
    GSM8K authors' is_correct labels; ids are 1-based line numbers)."""
    problems = [
        json.loads(line)
        for line in (GSM8K_DATA / "example_model_solutions.jsonl").read_text().splitlines()
    ]
    only_v, only_f = [], []
    for i, p in enumerate(problems, start=1):
        v, f = p["175b_verification"]["is_correct"], p["175b_finetuning"]["is_correct"]
        if v and not f:
            only_v.append(str(i))
        elif f and not v:
            only_f.append(str(i))
    return only_v, only_f


@pytest.fixture
def runs(cli) -> dict[str, str]:
    """Run directories of both 175B models, from --print-run-dir."""
    out = {}
    for model in ("175b_verification", "175b_finetuning"):
        result = cli("run", str(GSM8K_SPEC), "--set", f"model.name={model}", "--print-run-dir")
        assert result.exit_code == 0, result.stderr
        out[model] = result.stdout.strip()
    return out


def test_junit_is_valid_and_names_every_regressed_sample(cli, runs, tmp_path: Path) -> None:
    """A failing gate's JUnit file validates against the JUnit schema; the verdict case
    fails with the interval; the 360 regressed samples are failed cases, the rest pass."""
    path = tmp_path / "gate.xml"
    out = cli("gate", runs["175b_verification"], runs["175b_finetuning"], "--junit", str(path))
    assert out.exit_code == 1
    SCHEMA.validate(str(path))
    suite = next(iter(junitparser.JUnitXml.fromfile(str(path))))
    assert (suite.tests, suite.failures, suite.errors) == (1320, 361, 0)
    cases = {case.name: case for case in suite}
    verdict = cases["non-inferiority"]
    assert not verdict.is_passed
    assert "[-0.2442, -0.1866]" in verdict.result[0].message
    failed = [c.name for c in suite if c.classname == "gradetrail.samples" and not c.is_passed]
    only_v, only_f = _labels()
    assert failed == only_v and len(failed) == 360
    assert all(cases[sid].is_passed for sid in only_f)


def test_junit_of_a_passing_gate(cli, runs, tmp_path: Path) -> None:
    """The reverse direction passes: the verdict case passes, its output holds the
    interval, and the 76 samples the verification model loses are the failed cases."""
    path = tmp_path / "gate.xml"
    out = cli("gate", runs["175b_finetuning"], runs["175b_verification"], "--junit", str(path))
    assert out.exit_code == 0
    SCHEMA.validate(str(path))
    suite = next(iter(junitparser.JUnitXml.fromfile(str(path))))
    assert (suite.tests, suite.failures) == (1320, 76)
    assert next(c for c in suite if c.name == "non-inferiority").is_passed


def test_junit_when_runs_cannot_be_compared(cli, runs, tmp_path: Path) -> None:
    """Exit 2 still writes a valid JUnit file: the verdict case in error, saying why."""
    path = tmp_path / "gate.xml"
    out = cli("gate", runs["175b_verification"], str(tmp_path), "--junit", str(path))
    assert out.exit_code == 2
    SCHEMA.validate(str(path))
    suite = next(iter(junitparser.JUnitXml.fromfile(str(path))))
    assert suite.errors == 1
    assert "not a run directory" in next(iter(suite)).result[0].message


def test_markdown_report(cli, runs, tmp_path: Path) -> None:
    """The Markdown report: verdict, interval against the margin, paired counts, regressed
    ids (the first 25, then a count), and the identity difference."""
    path = tmp_path / "gate.md"
    out = cli("gate", runs["175b_verification"], runs["175b_finetuning"], "--markdown", str(path))
    assert out.exit_code == 1
    text = path.read_text()
    assert text.startswith("### ❌ gradetrail gate: FAIL (non-inferiority)")
    assert "95% lower bound -0.2442 < -0.0200; half-width 0.0288 against margin 0.02" in text
    assert "| 95% interval | [-0.2442, -0.1866] (half-width 0.0288) |" in text
    assert "| regressed · improved | 360 · 76 |" in text
    only_v, _ = _labels()
    listed = ", ".join(f"`{sid}`" for sid in only_v[:25])
    assert f"**Regressed samples (360):** {listed} and 335 more" in text
    assert '- `spec model.name: "175b_verification" -> "175b_finetuning"`' in text


def test_github_annotations_and_step_summary(
    cli, runs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--github prints an ::error annotation for a failed gate and appends the report to
    $GITHUB_STEP_SUMMARY (after what was already there)."""
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    out = cli("gate", runs["175b_verification"], runs["175b_finetuning"], "--github")
    assert out.exit_code == 1
    errors = [ln for ln in out.stdout.splitlines() if ln.startswith("::error")]
    assert len(errors) == 1
    title, message = errors[0].removeprefix("::error title=").split("::", 1)
    assert title == "gradetrail gate failed%3A " + runs["175b_finetuning"].replace(":", "%3A")
    assert message.startswith(
        "FAIL (non-inferiority): mean difference -0.2153 (candidate - baseline), 95%25 "
        "interval [-0.2442, -0.1866], margin 0.02."
    )
    assert message.endswith("360 samples regressed, 76 improved")
    text = summary.read_text()
    assert text.startswith("earlier step\n### ❌ gradetrail gate: FAIL")


def test_github_warns_about_run_warnings(cli, gsm8k_copy: Path, runs, tmp_path: Path) -> None:
    """Rows in an error state in a run become ::warning annotations naming the run."""
    recordings = gsm8k_copy.parent / "data" / "gsm8k" / "example_model_solutions.jsonl"
    lines = recordings.read_text().splitlines()
    recordings.write_text("\n".join(lines[:-3]) + "\n")  # three samples lose their recording
    partial = cli("run", str(gsm8k_copy), "--print-run-dir").stdout.strip()
    out = cli("gate", partial, partial, "--github", "--errors", "exclude")
    assert out.exit_code == 0, out.stdout + out.stderr
    warnings = [ln for ln in out.stdout.splitlines() if ln.startswith("::warning")]
    assert any(
        ln.startswith("::warning title=gradetrail baseline run::3 provider_error rows")
        for ln in warnings
    ), warnings


def test_untrusted_text_cannot_break_the_formats() -> None:
    """Control characters and lone surrogates leave XML valid; a newline cannot start a
    new workflow command; a backtick or pipe cannot end a Markdown code span or cell."""
    assert xml_text("a\x00b\x1b\ud800c") == "a\ufffdb\ufffd\ufffdc"
    assert github_data("x\n::error::forged") == "x%0A::error::forged"
    assert markdown_code("a`b|c\nd") == "`a'b¦c d`"


def test_several_pairs_give_one_suite_each(cli, runs, tmp_path: Path) -> None:
    """Two comparisons gated at once (Holm) give two JUnit suites and two report sections;
    one failing comparison fails the gate."""
    v, f = runs["175b_verification"], runs["175b_finetuning"]
    xml, md = tmp_path / "gate.xml", tmp_path / "gate.md"
    out = cli("gate", f, v, v, f, "--junit", str(xml), "--markdown", str(md))
    assert out.exit_code == 1
    SCHEMA.validate(str(xml))
    suites = list(junitparser.JUnitXml.fromfile(str(xml)))
    assert [(s.tests, s.failures) for s in suites] == [(1320, 76), (1320, 361)]
    text = md.read_text()
    assert text.startswith("## ❌ gradetrail gate: FAIL (1 of 2 comparisons pass, Holm")
    assert text.count("### ") == 2


@pytest.mark.parametrize("option", ["--junit", "--markdown", "--github"])
def test_a_planted_symlink_is_never_written_through(
    cli, runs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: str
) -> None:
    """`gate --junit FILE --markdown FILE` (the docs/ci.md command) and the step summary,
    each at a name where a symlink to another file was planted: the target is untouched
    and the gate says, in one line, that it never writes through a link (exit 2)
    (before: the report overwrote, or was appended to, the link's target)."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    link = tmp_path / "report.out"
    link.symlink_to(victim)
    args = [option] if option == "--github" else [option, str(link)]
    if option == "--github":
        monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(link))
    out = cli("gate", runs["175b_verification"], runs["175b_finetuning"], *args)
    assert out.exit_code == 2, out.stdout + out.stderr
    assert "never writes through a link" in out.stderr
    assert victim.read_text() == "precious\n"
    assert link.is_symlink()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
