"""Issue 15's hostile-input items at the user's boundary (the CLI in this process, real
files): sandboxed templates (item 11), printed-output spoofing (12) and a ``runs``
listing that tells runs apart (20)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import run_cli, write_eval


def run(spec: Path, tmp_path: Path, *args: str):
    return run_cli(
        "run", str(spec), "--cache", str(tmp_path / "cache.sqlite"),
        "--results-root", str(tmp_path / "results"), *args,
    )  # fmt: skip


ROWS = [{"id": "r1", "q": "1+1", "a": 2}, {"id": "r2", "q": "2+2", "a": 4}]


def test_a_template_cannot_reach_python(tmp_path: Path) -> None:
    """A spec prompt that walks to ``os.popen`` is refused in one line, exit 2, before any
    call: the command it names never runs and nothing is written."""
    marker = tmp_path / "pwned"
    prompt = "{{ cycler.__init__.__globals__.os.popen('touch " + str(marker) + "').read() }}"
    spec = write_eval(tmp_path / "e", ROWS, prompt=prompt)
    out = run(spec, tmp_path)
    assert out.code == 2 and len(out.err_lines) == 1, out.err
    assert "unsafe" in out.err and "sandboxed" in out.err
    assert not marker.exists()
    assert not (tmp_path / "results").exists() and not (tmp_path / "cache.sqlite").exists()


def test_a_judge_file_cannot_reach_python(tmp_path: Path) -> None:
    """The same walk in a judge file never runs either."""
    marker = tmp_path / "pwned"
    judge = tmp_path / "e" / "judge.j2"
    judge.parent.mkdir(parents=True)
    judge.write_text(
        "{{ lipsum.__globals__['os'].popen('touch " + str(marker) + "').read() }} {{ response }}"
    )
    scorer = {
        "type": "judge",
        "file": "judge.j2",
        "model": {"provider": "python", "name": "j", "function": "spoof_app:answer"},
    }
    spec = write_eval(tmp_path / "e", ROWS, scorer=scorer)
    out = run(spec, tmp_path)
    assert not marker.exists()
    assert "unsafe" in out.out + out.err


@pytest.mark.parametrize("planted", ["fifo", "dangling symlink", "directory"])
@pytest.mark.parametrize("field", ["scorer.file", "dataset.path", "model.recordings.path"])
def test_an_input_that_is_not_a_regular_file_is_one_line_never_a_wait(
    tmp_path: Path, field: str, planted: str
) -> None:
    """A FIFO, a dangling symlink or a directory where the spec names an input file: one
    line saying what is there, exit 2, nothing written (before: a FIFO judge file waited
    forever for a writer, and a FIFO dataset or recordings file read "not found")."""
    import os

    judge = {
        "type": "judge",
        "file": "input.txt",
        "model": {"provider": "python", "name": "j", "function": "spoof_app:answer"},
    }
    overrides = {
        "scorer.file": {"scorer": judge},
        "dataset.path": {"dataset": {"path": "input.txt", "format": "jsonl"}},
        "model.recordings.path": {
            "model": {
                "provider": "replay",
                "name": "m",
                "recordings": {"path": "input.txt", "response_field": "m"},
            }
        },
    }[field]
    spec = write_eval(tmp_path / "e", ROWS, **overrides)
    target = tmp_path / "e" / "input.txt"
    if planted == "fifo":
        os.mkfifo(target)
    elif planted == "directory":
        target.mkdir()
    else:
        target.symlink_to(tmp_path / "nowhere")
    out = run(spec, tmp_path)
    assert out.code == 2
    (line,) = out.err_lines
    what = {"fifo": "is a FIFO", "directory": "is a directory", "dangling symlink": "is a symlink"}
    assert line.startswith(f"error: {spec}: {field}: {target} {what[planted]}"), line
    assert not (tmp_path / "results").exists()


def test_dataset_text_stays_data(tmp_path: Path) -> None:
    """A row holding template syntax is sent as text, never rendered."""
    rows = [{"id": "r1", "q": "{{ 7*7 }} echo", "a": 2}]
    spec = write_eval(tmp_path / "e", rows)
    assert run(spec, tmp_path).code == 0
    (run_dir,) = (tmp_path / "results").iterdir()
    row = json.loads((run_dir / "results.jsonl").read_text())
    assert row["response"] == "What is {{ 7*7 }} echo? = 2"


def test_provider_messages_cannot_print_summary_lines(tmp_path: Path) -> None:
    """A provider error message holding newlines and fake summary lines is printed on
    the one errors line, its line breaks shown as \\n: the summary has exactly one status
    line and one mean-score line, the real ones."""
    rows = [*ROWS, {"id": "r3", "q": "boom", "a": 0}]
    spec = write_eval(tmp_path / "e", rows)
    out = run(spec, tmp_path)
    assert out.code == 0, out.err
    lines = out.out.splitlines()
    assert [line.split()[0] for line in lines[1:]] == [
        "rows", "mean", "errors", "tokens", "cost", "cache", "wall", "status", "results"
    ]  # fmt: skip
    (errors,) = [line for line in lines if line.startswith("  errors")]
    assert "bad\\n  mean score  1.0000\\n  status      complete\\nfake" in errors
    (status,) = [line for line in lines if line.startswith("  status")]
    assert status.split(None, 1)[1] == "complete, 1 of 3 rows errored"


def test_runs_tells_runs_apart(tmp_path: Path) -> None:
    """Runs that differ only in the dataset's content or the model's endpoint read
    differently in `gradetrail runs` (identity hash, dataset hash), and a run in which
    every row errored does not read plain complete."""
    spec = write_eval(tmp_path / "e", ROWS)
    assert run(spec, tmp_path).code == 0
    (tmp_path / "e" / "data.jsonl").write_text(json.dumps({"id": "r1", "q": "boom", "a": 1}))
    assert run(spec, tmp_path).code == 1  # every row errored
    out = run_cli("runs", "--results-root", str(tmp_path / "results"))
    assert out.code == 0
    rows = [line.split("  ") for line in out.out.splitlines()[1:]]
    cells = [[c.strip() for c in row if c.strip()] for row in rows]
    assert len(cells) == 2
    identities = {c[1] for c in cells}
    datasets = {c[4] for c in cells}
    assert len(identities) == 2 and len(datasets) == 2
    statuses = sorted(c[5] for c in cells)
    assert statuses == ["complete", "complete, but every row errored (1)"]


def test_an_ignored_sdk_base_url_variable_is_named_once(tmp_path: Path) -> None:
    """ANTHROPIC_BASE_URL set, no model.base_url: one warning line says the variable is
    ignored and names model.base_url (then the missing key stops the run, exit 1)."""
    import os
    import subprocess
    import sys

    spec = write_eval(tmp_path / "e", ROWS, model={"provider": "anthropic", "name": "claude-x"})
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["ANTHROPIC_BASE_URL"] = "http://127.0.0.1:9/proxy"
    proc = subprocess.run(
        [sys.executable, "-m", "gradetrail", "run", str(spec), "--no-cache"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert len(lines) == 2, proc.stderr
    assert lines[0].startswith("warning: ANTHROPIC_BASE_URL is set but ignored")
    assert "http://127.0.0.1:9/proxy" in lines[0] and "model.base_url" in lines[0]
    assert lines[1].startswith("error: ANTHROPIC_API_KEY is not set")


def test_the_sdks_are_core_dependencies() -> None:
    """`pip install gradetrail` brings both official SDKs (an anthropic or openai spec
    runs without an extra); heavy pieces stay in extras."""
    import tomllib

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    core = {dep.split(">")[0].split("[")[0] for dep in project["project"]["dependencies"]}
    assert {"openai", "anthropic"} <= core
    assert not core & {"pyarrow", "datasets", "starlette", "uvicorn", "ray", "playwright"}


RETRY_APP = """\
import json
import os
from pathlib import Path

from gradetrail.errors import ServerError

CALLS = []


def answer(request):
    logs = list(Path(os.environ["GT_RESULTS"]).glob("*/log.jsonl"))
    lines = [json.loads(x) for x in logs[0].read_text().splitlines()] if logs else []
    CALLS.append([x for x in lines if x["event"] == "provider_call"])
    Path(os.environ["GT_SEEN"]).write_text(json.dumps(CALLS))
    if len(CALLS) < 3:
        raise ServerError("busy", retry_after=1.0)
    return "A: 2"
"""


def test_each_attempt_is_logged_when_it_ends(tmp_path: Path, monkeypatch) -> None:
    """Two failed attempts then an answer: when the second and third attempts start,
    log.jsonl already holds the attempts before them (what `tail -f` shows), each with
    its own latency (not the backoff, not the sample's whole time) and its backoff."""
    directory = tmp_path / "e"
    spec = write_eval(
        directory,
        [ROWS[0]],
        model={"provider": "python", "name": "retry-app", "function": "retry_app:answer"},
    )
    (directory / "retry_app.py").write_text(RETRY_APP)
    monkeypatch.setenv("GT_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("GT_SEEN", str(tmp_path / "seen.json"))
    out = run(spec, tmp_path)
    assert out.code == 0, out.err
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert [len(lines) for lines in seen] == [0, 1, 2]  # each attempt already logged
    first, second = seen[2]
    assert [(x["attempt"], x["outcome"], x["retry_in_s"]) for x in seen[2]] == [
        (1, "error", 1.0),
        (2, "error", 1.0),
    ]
    assert first["ts"] < second["ts"]
    assert all(x["latency_ms"] < 1000.0 for x in seen[2])  # the backoff is not in it
    (run_dir,) = (tmp_path / "results").iterdir()
    log = [json.loads(x) for x in (run_dir / "log.jsonl").read_text().splitlines()]
    calls = [x for x in log if x["event"] == "provider_call"]
    assert [(x["attempt"], x["outcome"]) for x in calls] == [(1, "error"), (2, "error"), (3, "ok")]


ROW_APP = """\
def answer(request, row):
    # the structured input, not the prompt: two rows share one prompt text
    return "A: " + str(row["a"])


def legacy(request):
    return "A: " + request.prompt.rsplit("=", 1)[1].strip()
"""


def test_the_python_provider_receives_the_row(tmp_path: Path) -> None:
    """A two-argument function gets each sample's row; rows whose prompts are equal but
    whose fields differ get their own answers (the row is in the key), and a one-argument
    function still works."""
    directory = tmp_path / "e"
    rows = [
        {"id": "r1", "q": "x", "a": 2, "hidden": 1},
        {"id": "r2", "q": "x", "a": 2, "hidden": 2},
    ]
    rows.append({"id": "r3", "q": "y", "a": 7})
    spec = write_eval(
        directory,
        rows,
        prompt="What is {{ q }}?",
        model={"provider": "python", "name": "row-app", "function": "row_app:answer"},
    )
    (directory / "row_app.py").write_text(ROW_APP)
    out = run(spec, tmp_path)
    assert out.code == 0, out.err
    (run_dir,) = (tmp_path / "results").iterdir()
    result = [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()]
    assert [r["response"] for r in result] == ["A: 2", "A: 2", "A: 7"]
    assert [r["score"] for r in result] == [1.0, 1.0, 1.0]
    assert [r["cached"] for r in result] == [False, False, False]  # r1, r2 not shared
    legacy = write_eval(
        tmp_path / "l",
        ROWS,
        model={"provider": "python", "name": "legacy", "function": "row_app:legacy"},
    )
    assert run(legacy, tmp_path).code == 0


MIXED_APP = """\
from gradetrail.errors import BadRequest


def answer(request):
    if "1+1" in request.prompt:
        raise BadRequest("the app refused sample 'q1'")
    if "2+2" in request.prompt:
        raise BadRequest("the app has no database connection")
    if "3+3" in request.prompt:
        raise BadRequest("the app refused sample 'q3'")
    return "A: 8"
"""


def test_the_summary_names_each_reason(tmp_path: Path) -> None:
    """Errors of one kind but two reasons give two errors lines (messages that differ only
    in the sample they name count as one reason), most frequent first."""
    directory = tmp_path / "e"
    rows = [{"id": f"q{i}", "q": f"{i}+{i}", "a": 2 * i} for i in (1, 2, 3, 4)]
    spec = write_eval(
        directory, rows, model={"provider": "python", "name": "m", "function": "mixed_app:answer"}
    )
    (directory / "mixed_app.py").write_text(MIXED_APP)
    out = run(spec, tmp_path)
    assert out.code == 0, out.err
    errors = [
        line.split(None, 1)[1] for line in out.out.splitlines() if line.startswith("  errors")
    ]
    assert errors == [
        "2 provider_error BadRequest: the app refused sample 'q1'",
        "1 provider_error BadRequest: the app has no database connection",
    ]


@pytest.mark.parametrize(
    "prompt",
    [
        [{"role": "user", "content": "{{ ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'] | random }}"}],
        "{{ ['a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'] | random }}",
        "{{ [['a', 'b', 'c', 'd']] | map('random') | join }}",
        "{{ lipsum(1) }}",
    ],
    ids=["conversation", "one-message", "map", "lipsum"],
)
def test_a_template_that_draws_anew_each_render_is_refused(
    prompt: str | list[dict[str, str]], tmp_path: Path
) -> None:
    """A template is rendered once to key its request and again to send it (always for a
    conversation, past the held budget for one message): the ``random`` filter and
    ``lipsum`` draw anew each time, so a request went out that its key does not describe,
    and a cached response was later served for another prompt (the row read prompt 'm',
    response 'A: g'). They are refused in one line, exit 2, before any call."""
    spec = write_eval(tmp_path / "e", ROWS, prompt=prompt, target="{{ a }}")
    out = run(spec, tmp_path)
    assert out.code == 2 and len(out.err_lines) == 1, (out.code, out.err, out.out)
    assert "sample 'r1'" in out.err and "on every render" in out.err, out.err
    assert not (tmp_path / "results").exists() and not (tmp_path / "cache.sqlite").exists()


@pytest.mark.parametrize(
    ("prompt", "rows", "message"),
    [
        (  # the second row lacks the optional field: the global answered for it
            "{{ q }} in {{ namespace }} = {{ a }}",
            [
                {"id": "r1", "q": "1+1", "a": 2, "namespace": "prod"},
                {"id": "r2", "q": "2+2", "a": 4},
            ],
            "sample 'r2' (line 2): 'namespace' is undefined (the row has no field 'namespace'",
        ),
        (
            "{{ q }} over {{ range }} = {{ a }}",
            [{"id": "r1", "q": "1+1", "a": 2, "range": "0-9"}, {"id": "r2", "q": "2+2", "a": 4}],
            "sample 'r2' (line 2): 'range' is undefined (the row has no field 'range'",
        ),
        (
            "{{ dict }}: {{ q }} = {{ a }}",
            [{"id": "r1", "q": "1+1", "a": 2}],
            "sample 'r1' (line 1): 'dict' is undefined (the row has no field 'dict'",
        ),
        (  # a method shown without its call: an address in the prompt, another each run
            "{{ q.upper }} = {{ a }}",
            ROWS,
            "sample 'r1' (line 1): TypeError: the template shows the function 'upper'",
        ),
    ],
    ids=["namespace", "range", "dict", "method"],
)
def test_a_template_never_shows_a_function_for_a_field(
    prompt: str, rows: list[dict], message: str, tmp_path: Path
) -> None:
    """A row without a field named like a Jinja2 global (``namespace``, ``range``,
    ``dict``) rendered the global: the prompt read ``2+2 in <class
    'jinja2.utils.Namespace'>``, or ``<function _range at 0x7f...>``, whose address
    changes from run to run (so the request's key did too, and the cache never hit); a
    method shown without its call did the same. Now one line naming the sample, exit 2,
    before any call."""
    spec = write_eval(tmp_path / "e", rows, prompt=prompt, target="{{ a }}")
    out = run(spec, tmp_path)
    assert out.code == 2 and len(out.err_lines) == 1, (out.code, out.err, out.out)
    assert message in out.err, out.err
    assert not (tmp_path / "results").exists() and not (tmp_path / "cache.sqlite").exists()


def test_a_field_named_like_a_jinja2_global_renders_the_field(tmp_path: Path) -> None:
    """Rows that have such fields show their values, and ``namespace()`` still works in
    a template that calls it."""
    rows = [{"id": "r1", "q": "1+1", "a": 2, "range": "0-9", "dict": "en"}]
    prompt = (
        "{% set ns = namespace(n=0) %}{% for _ in [1, 2] %}{% set ns.n = ns.n + 1 %}"
        "{% endfor %}echo {{ ns.n }} {{ range }} {{ dict }} = {{ a }}"
    )
    spec = write_eval(tmp_path / "e", rows, prompt=prompt, target="{{ a }}")
    out = run(spec, tmp_path, "--json")
    assert out.code == 0, out.err
    run_dir = Path(json.loads(out.out)["run_dir"])
    row = json.loads((run_dir / "results.jsonl").read_text().splitlines()[0])
    assert row["prompt"] == "echo 2 0-9 en = 2"
