"""Exit codes are part of the interface (docs/troubleshooting.md#exit-codes): every command
keeps to one table, driven here through the real CLI: 0 success, 1 the verdict failed, 2
bad usage or input (or no verdict reached), 3 stopped resumably, 130 / 143 signals, 141 a
broken pipe; bad input is one ``error:`` line on stderr, never a traceback, nothing on
stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
import yaml
from cli_support import run_cli, write_eval
from paths import ROOT

from gradetrail.cli import EXIT_CODES, _LazyCommands
from gradetrail.errors import DatasetError

ROWS = [{"id": f"r{i}", "q": f"{i}+0", "a": str(i)} for i in range(12)]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three runs of a 12-row python-provider eval (right, right again with another
    prompt, and wrong: an echo of the prompt, whose last number is not the answer), a
    sweep file, malformed inputs."""
    tmp = tmp_path_factory.mktemp("exit-codes")
    root = tmp / "results"
    made: dict[str, Path] = {"root": root, "tmp": tmp}
    for name, prompt in (
        ("right", None),
        ("again", "Compute {{ q }} = {{ a }}"),
        ("wrong", "echo {{ q }} = {{ a }}1"),
    ):
        spec = write_eval(tmp / name, ROWS, **({"prompt": prompt} if prompt else {}))
        made[f"{name}_spec"] = spec
        out = run_cli(
            "run", str(spec), "--print-run-dir", "--results-root", str(root), "--no-cache"
        )
        assert out.code == 0, out.err
        made[name] = Path(out.out.strip())
    sweep = tmp / "right" / "sweep.yaml"
    axes = {"v": {"plain": {}, "echo": {"prompt": "echo {{ q }} = {{ a }}1"}}}
    sweep.write_text(
        yaml.safe_dump({"name": "toy", "spec": "spec.yaml", "axes": axes}, sort_keys=False)
    )
    made["sweep"] = sweep
    (tmp / "bad.yaml").write_text("name: [unclosed\n")
    (tmp / "list.yaml").write_text("- a\n- b\n")
    (tmp / "data.jsonl").write_text('{"q": 1}\n')
    (tmp / "adir").mkdir()
    return made


def _refused(out, *starts: str) -> None:  # noqa: ANN001
    """One ``error:`` line on stderr (starting with one of ``starts``), nothing on stdout,
    no traceback, exit 2."""
    assert out.code == 2, (out.code, out.err)
    assert len(out.err_lines) == 1 and out.err_lines[0].startswith("error: "), out.err
    assert "Traceback" not in out.err and out.out == ""
    if starts:
        assert out.err_lines[0].startswith(starts), out.err


USAGE = [
    ["bogus"],
    ["rn"],
    ["run"],
    ["run", "x.yaml", "--bogus"],
    ["run", "x.yaml", "--executor", "nowhere"],
    ["run", "x.yaml", "--json", "--print-run-dir"],
    ["run", "x.yaml", "--min-score", "2"],
    ["schema", "--x"],
    ["runs", "--bogus"],
    ["diff", "a"],
    ["diff", "a", "b", "--kind", "nope"],
    ["view", "--port", "70000"],
    ["export"],
    ["gate", "a"],
    ["gate", "a", "b", "--marg", "1"],
    ["gate", "a", "b", "--margin", "x"],
    ["sweep"],
    ["sweep", "s.yaml", "--correction", "nope"],
    ["power"],
    ["power", "--delta", "x", "--variance", "0.1"],
    ["cache", "bogus"],
    ["cache", "stats", "--bogus"],
    ["cache", "check", "extra"],
    ["cache", "clear", "--model", " ", "--yes"],
    ["batches", "--bogus"],
    ["split", "x.yaml"],
    ["split", "x.yaml", "--out", "o.json", "--fractions", "train"],
    ["approve"],
]


@pytest.mark.parametrize("argv", USAGE, ids=[" ".join(a) for a in USAGE])
def test_bad_usage_is_one_line_and_exit_2_for_every_command(argv: list[str]) -> None:
    """An unknown command or flag, a missing argument, a typo'd option or a bad value:
    exit 2 and one line, for click's own errors and gradetrail's alike."""
    _refused(run_cli(*argv))


def _bad_inputs(w: dict[str, Path]) -> list[list[str]]:
    tmp, right = w["tmp"], str(w["right"])
    missing, adir, bad, lst, data = (
        str(tmp / n) for n in ("missing", "adir", "bad.yaml", "list.yaml", "data.jsonl")
    )
    out = []
    for path in (missing, adir, bad, lst, data):  # files the command reads as YAML
        out += [
            ["run", path],
            ["sweep", path],
            ["split", path, "--out", str(tmp / "s.json")],
            ["approve", path],
        ]
    for path in (missing, adir, data, bad):  # where a run directory is expected
        out += [
            ["gate", right, path],
            ["diff", path, right],
            ["export", path, "--out", str(tmp / "x.csv")],
            ["batches", path],
        ]
    for path in (missing, data):  # where a results root is expected
        out += [["runs", path], ["view", path, "--port", "0"]]
    for path in (adir, data, missing):  # where a cache file is expected
        out += [["cache", "stats", "--cache", path], ["cache", "check", "--cache", path]]
    out += [
        ["run", str(w["right_spec"]), "--results-root", data],
        ["sweep", str(w["sweep"]), "--results-root", data],
        ["run", str(w["right_spec"]), "--set", "nonsense"],
        ["export", right, "--format", "xls"],
        ["export", right, "--out", str(tmp / "missing" / "dir" / "x.csv")],
        ["gate", right, right, "--junit", str(tmp / "missing" / "gate.xml")],
        ["gate", right, right, "--json", "--markdown", adir],
        ["sweep", str(w["sweep"]), "--results-root", missing, "--markdown", adir],
        ["sweep", str(w["sweep"]), "--results-root", missing, "--junit", f"{missing}/j.xml"],
    ]
    return out


def test_bad_input_files_are_one_line_and_exit_2_for_every_command(world) -> None:  # noqa: ANN001
    """A missing path, a directory, malformed YAML, a list for a mapping, the wrong kind of
    file (a dataset for a spec, a spec for a sweep), a file for a results root: one line
    naming it, exit 2, nothing written to stdout, for each command that reads a file.
    Before, `runs` said "no runs under missing" and exited 0, a sweep whose results root
    was a file exited 1, the code of "no candidate passed", and a --junit or --markdown
    path that cannot be written was found after the gate printed its verdict (and after
    a sweep ran every cell)."""
    for argv in _bad_inputs(world):
        out = run_cli(*argv)
        try:
            _refused(out)
        except AssertionError as exc:
            raise AssertionError(f"{argv}: {exc}") from None
    assert not (world["tmp"] / "missing").exists()  # no sweep ran into it


def test_verdicts_exit_0_or_1_and_a_sweep_without_one_exits_2(world) -> None:  # noqa: ANN001
    """0 success, 1 the verdict failed: a run that scored (or missed --min-score), a gate
    that passes or finds a regression, a sweep where no candidate passed; a sweep with a
    cell that failed reached no verdict: 2 (it was 1, the same as "no candidate passed")."""
    right, again, wrong = (str(world[k]) for k in ("right", "again", "wrong"))
    assert run_cli("gate", right, again, "--margin", "0.5").code == 0
    gated = run_cli("gate", right, wrong, "--margin", "0.5", "--json")
    assert gated.code == 1 and json.loads(gated.out)["passed"] is False, gated.err
    assert run_cli("diff", right, wrong, "--json").code == 0
    root = str(world["root"])
    wrong_spec = str(world["wrong_spec"])
    scored = run_cli("run", wrong_spec, "--results-root", root, "--no-cache")
    assert scored.code == 0, scored.err  # every sample scored (0): the run itself succeeded
    missed = run_cli("run", wrong_spec, "--results-root", root, "--min-score", "0.5")
    assert missed.code == 1, missed.err
    low = run_cli("run", str(world["right_spec"]), "--results-root", root, "--min-score", "0.9")
    assert low.code == 1, low.err  # 12 of 12 right: the interval's lower bound is < 0.9
    swept = run_cli("sweep", str(world["sweep"]), "--results-root", root, "--json")
    assert swept.code == 1 and json.loads(swept.out)["passed"] is False, swept.err
    assert json.loads(swept.out)["status"] == "complete"

    broken = world["tmp"] / "right" / "broken.yaml"
    axes = {"v": {"plain": {}, "boom": {"prompt": "boom {{ q }} = {{ a }}"}}}
    broken.write_text(
        yaml.safe_dump({"name": "broken", "spec": "spec.yaml", "axes": axes}, sort_keys=False)
    )
    stopped = run_cli("sweep", str(broken), "--results-root", root, "--json")
    assert stopped.code == 2, stopped.err
    assert stopped.err_lines[-1].startswith("error: cell boom: stopped after the first 5")
    shown = json.loads(stopped.out)
    assert shown["passed"] is None and shown["status"] == "failed"
    assert [c["outcome"] for c in shown["cells"]] == ["existing", "failed"]


def test_run_json_prints_the_manifest_of_a_run_fail_fast_stopped(tmp_path: Path) -> None:
    """`run --json` of a run that fail-fast stopped (exit 1, no sample scored) prints its
    run directory and manifest, status failed, as a stopped run prints them (before:
    nothing on stdout, so a script reading it failed on empty input)."""
    spec = write_eval(tmp_path, ROWS, prompt="boom {{ q }} = {{ a }}")
    root = tmp_path / "results"
    out = run_cli("run", str(spec), "--json", "--results-root", str(root), "--no-cache")
    assert out.code == 1, out.err
    assert out.err_lines[0].startswith("error: stopped after the first 5 samples")
    shown = json.loads(out.out)
    (run_dir,) = root.iterdir()
    assert shown["run_dir"] == str(run_dir) and shown["status"] == "failed"
    assert shown["counts"]["provider_error"] >= 5 and "scored" not in shown["counts"]


def _gradetrail(*args: str, **popen) -> subprocess.Popen:  # noqa: ANN003
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "gradetrail", *args]
    return subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True, **popen)


@pytest.mark.parametrize("how", ["print", "rich", "stream"])
def test_a_broken_pipe_exits_141_with_nothing_on_stderr(world, how: str) -> None:  # noqa: ANN001
    """The reader of stdout has gone (`gradetrail ... | head -1`): exit 141 (128 +
    SIGPIPE), stderr empty, whether the command prints with print(), rich or a stream.
    Before: exit 1, the code of a failed verdict, or 120 with "Exception ignored"."""
    right, wrong = str(world["right"]), str(world["wrong"])
    argv = {
        "print": ["schema"],
        "rich": ["diff", right, wrong, "--all"],
        "stream": ["export", right, "--out", "-", "--format", "jsonl"],
    }[how]
    proc = _gradetrail(*argv, stdout=subprocess.PIPE)
    proc.stdout.close()  # the reader goes before the first write
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 141, err
    assert err == ""


def test_a_run_with_stdout_closed_keeps_its_exit_code(world, tmp_path: Path) -> None:  # noqa: ANN001
    """`gradetrail run spec.yaml >&-`: the run completes, exit 0, no traceback (before:
    exit 120 and a traceback from the output guard's flush of None)."""
    root = tmp_path / "results"
    spec = str(world["right_spec"])
    proc = _gradetrail(
        "run", spec, "--results-root", str(root), "--no-cache", preexec_fn=lambda: os.close(1)
    )
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0, err
    assert "Traceback" not in err
    (run_dir,) = root.iterdir()
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "complete"


def _app() -> typer.Typer:
    """A root group as the CLI's (its class, `_LazyCommands`) with commands that raise."""
    app = typer.Typer(cls=_LazyCommands, pretty_exceptions_enable=False)

    @app.command("crash")
    def crash() -> None:
        raise ZeroDivisionError("division by zero\nsecond line")

    @app.command("unread")
    def unread() -> None:
        raise DatasetError("data.jsonl: line 3: not JSON; fix the row")

    return app


def test_an_internal_error_exits_2_with_its_traceback_then_one_line(capsys) -> None:  # noqa: ANN001
    """A bug (an exception gradetrail did not raise on purpose) reached no verdict: its
    traceback, then one `error: internal error` line last, exit 2, never 1 (the code of a
    failed verdict, which Python's own uncaught exception gives)."""
    assert _app()(["crash"], standalone_mode=False) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err
    assert err.splitlines()[-1] == (
        "error: internal error: ZeroDivisionError: division by zero\\nsecond line (a gradetrail "
        "bug: please report it with the traceback above)"
    )


def test_an_error_no_command_caught_is_its_line_and_code(capsys) -> None:  # noqa: ANN001
    """A gradetrail error a command let through: its one line and its own exit code (2 for
    bad input), not a traceback and exit 1."""
    assert _app()(["unread"], standalone_mode=False) == 2
    assert capsys.readouterr().err == "error: data.jsonl: line 3: not JSON; fix the row\n"


def test_the_table_in_the_docs_is_the_codes_the_cli_uses() -> None:
    """docs/troubleshooting.md's table lists every code of EXIT_CODES, and nothing else."""
    text = (ROOT / "docs" / "troubleshooting.md").read_text()
    lines = text.split("## Exit codes", 1)[1].split("| code | meaning |", 1)[1].splitlines()
    codes = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        codes += [int(c) for c in line.split("|")[1].replace("/", " ").split()]
    assert sorted(codes) == sorted(EXIT_CODES)


def test_json_with_github_keeps_stdout_to_the_json(world, tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """`gate --json --github` and `sweep --json --github`: stdout is the JSON alone, the
    `::error` annotation goes to stderr (the Actions runner reads both); before, it
    followed the JSON on stdout and `json.loads` of the output failed."""
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    right, wrong = str(world["right"]), str(world["wrong"])
    gated = run_cli("gate", right, wrong, "--margin", "0.5", "--json", "--github")
    assert gated.code == 1 and json.loads(gated.out)["passed"] is False
    assert any(line.startswith("::error title=gradetrail gate") for line in gated.err_lines)
    root = str(world["root"])
    swept = run_cli("sweep", str(world["sweep"]), "--results-root", root, "--json", "--github")
    assert swept.code == 1 and json.loads(swept.out)["passed"] is False
    assert swept.err_lines[-1] == "::error title=gradetrail sweep toy::any candidate did not pass"
