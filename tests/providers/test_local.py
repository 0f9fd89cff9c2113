"""The replay and python providers, through the whole run pipeline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import gradetrail

APP = """
import asyncio, json, os
from gradetrail import Response
from gradetrail.errors import ServerError

def _log(request):
    with open(os.environ["ECHO_LOG"], "a") as f:
        f.write(json.dumps({"sample": request.sample_id, "prompt": request.prompt}) + "\\n")

def sync_app(request):
    _log(request)
    return request.prompt.split("=")[-1].strip()

async def async_app(request):
    _log(request)
    await asyncio.sleep(0.001)
    return Response(text="A: 7", stop_reason="end_turn", served_model="app-v2",
                    input_tokens=3, output_tokens=2)

def broken(request):
    _log(request)
    raise KeyError("db down")

def flaky(request):
    _log(request)
    n = sum(1 for _ in open(os.environ["ECHO_LOG"]))
    if n % 2:
        raise ServerError("try again", status=503)
    return "7"

def wrong_type(request):
    return 7

def hang(request):
    import time
    time.sleep(3600)

def traced(fn):  # a decorator without functools.wraps
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper

@traced
def traced_app(request):
    return request.prompt.split("=")[-1].strip()

@traced
async def traced_async_app(request):
    await asyncio.sleep(0)
    return request.prompt.split("=")[-1].strip()

def mutating(request):
    answer = request.prompt.split("=")[-1].strip()
    request.messages[0]["content"] = "changed by the app"
    request.params["temperature"] = 2.0
    _log(request)
    if sum(request.sample_id in line for line in open(os.environ["ECHO_LOG"])) == 1:
        raise ServerError("first attempt fails", status=503)
    return answer

def odd_fields(request):
    return Response(text="7", served_model=5, latency_s="x", ttft_s=float("nan"), batch="no")

def gen_exit(request):
    raise GeneratorExit

async def agen_exit(request):
    raise GeneratorExit

class Opaque(Exception):
    def __str__(self):
        raise RuntimeError("no text")

def opaque(request):
    raise Opaque()

def hard_exit(request):
    if "5+" in request.prompt:
        os._exit(0)
    return request.prompt.split("=")[-1].strip()

async def ahard_exit(request):
    if "5+" in request.prompt:
        os._exit(0)
    return request.prompt.split("=")[-1].strip()

def forking(request):
    import multiprocessing
    child = multiprocessing.get_context("fork").Process(target=os._exit, args=(0,))
    child.start()
    child.join()
    return request.prompt.split("=")[-1].strip() if child.exitcode == 0 else "child failed"

def bad_response(request):
    return Response(text=42) if "5+" in request.prompt else Response(text="7", input_tokens=-5)
"""


@pytest.fixture
def app_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A dataset of three sums and a module of application functions."""
    rows = [{"id": f"q{i}", "expr": f"{3 + i}+{4 - i}={7 if i != 2 else 8}"} for i in range(3)]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "myapp.py").write_text(APP)
    monkeypatch.setenv("ECHO_LOG", str(tmp_path / "calls.jsonl"))
    return tmp_path


def _spec(
    app_dir: Path, function: str, module: str = "myapp", **run: object
) -> gradetrail.EvalSpec:
    text = (
        "name: app\ndataset: {path: data.jsonl}\nprompt: '{{ expr }}'\ntarget: '7'\n"
        f"model: {{provider: python, name: {module}, function: '{module}:{function}'}}\n"
        "scorer: {type: numeric}\n"
        f"run: {json.dumps({'concurrency': 2, 'max_retries': 0, **run})}\n"
    )
    (app_dir / "s.yaml").write_text(text)
    return gradetrail.load_spec(app_dir / "s.yaml")


def _calls(app_dir: Path) -> list[dict]:
    path = app_dir / "calls.jsonl"
    return [json.loads(x) for x in path.open()] if path.exists() else []


def _rows(result: gradetrail.RunResult) -> list[dict]:
    return gradetrail.read_results(result.run_dir)


def _cli(app_dir: Path, *args: str, timeout: float | None = None) -> subprocess.CompletedProcess:
    """``python -m gradetrail ARGS`` in ``app_dir``, a process of its own, running this
    checkout's gradetrail (PYTHONPATH), its output captured as text."""
    from paths import ROOT

    return subprocess.run(
        [sys.executable, "-m", "gradetrail", *args],
        cwd=app_dir,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_sync_function_is_called_once_per_sample_then_cached(app_dir: Path) -> None:
    """A sync function sees the rendered request; a re-run makes no call."""
    result = gradetrail.run_eval(_spec(app_dir, "sync_app"), results_root=app_dir / "r")
    assert [r["score"] for r in _rows(result)] == [1.0, 1.0, 0.0]
    assert sorted(c["sample"] for c in _calls(app_dir)) == ["q0", "q1", "q2"]
    again = gradetrail.run_eval(_spec(app_dir, "sync_app"), results_root=app_dir / "r")
    assert again.manifest.cache_hits == 3
    assert len(_calls(app_dir)) == 3


def test_async_function_returning_response_keeps_detail(app_dir: Path) -> None:
    """An async function may return a Response: tokens, stop reason and served model flow."""
    result = gradetrail.run_eval(_spec(app_dir, "async_app"), results_root=app_dir / "r")
    row = _rows(result)[0]
    assert row["response"] == "A: 7" and row["score"] == 1.0
    assert row["served_model"] == "app-v2" and row["stop_reason"] == "end_turn"
    assert (row["input_tokens"], row["output_tokens"]) == (3, 2)
    assert result.manifest.input_tokens == 9


def test_function_exception_is_a_provider_error_row(app_dir: Path) -> None:
    """An exception in the user's code is a provider_error naming it; nothing is cached."""
    result = gradetrail.run_eval(_spec(app_dir, "broken"), results_root=app_dir / "r")
    rows = _rows(result)
    assert [r["state"] for r in rows] == ["provider_error"] * 3
    assert rows[0]["error"]["message"] == "KeyError: 'db down'"
    assert rows[0]["score"] is None and rows[0]["response"] is None
    assert result.manifest.counts == {"provider_error": 3}
    gradetrail.run_eval(_spec(app_dir, "broken"), results_root=app_dir / "r")
    assert len(_calls(app_dir)) == 6  # errors are never cached: called again


@pytest.mark.parametrize(
    ("function", "message"),
    [
        ("gen_exit", "the function raised GeneratorExit"),
        ("agen_exit", "the function raised GeneratorExit"),
        ("opaque", "Opaque (its message cannot be printed: RuntimeError)"),
    ],
)
def test_an_exception_of_any_kind_is_the_rows_error(
    app_dir: Path, function: str, message: str
) -> None:
    """GeneratorExit (sync or async) and an exception whose str() raises are each that
    row's provider_error; before, either one ended the run with a traceback."""
    result = gradetrail.run_eval(_spec(app_dir, function), results_root=app_dir / "r")
    rows = _rows(result)
    assert [r["state"] for r in rows] == ["provider_error"] * 3
    assert {r["error"]["message"] for r in rows} == {message}
    assert result.manifest.status == "complete"


@pytest.mark.parametrize("function", ["traced_app", "traced_async_app"])
def test_a_function_under_a_plain_wrapper_is_answered(app_dir: Path, function: str) -> None:
    """A decorator's ``wrapper(*args, **kwargs)`` (no functools.wraps) is called with the
    request alone, and the coroutine a plain wrapper around an ``async def`` returns is
    awaited; before, every row was a TypeError (it was handed the row too) or 'returned
    coroutine'."""
    result = gradetrail.run_eval(_spec(app_dir, function), results_root=app_dir / "r")
    assert [r["score"] for r in _rows(result)] == [1.0, 1.0, 0.0]


def test_a_function_changing_its_request_changes_no_row_or_retry(app_dir: Path) -> None:
    """The function gets its own copy of the request: editing its messages or params
    leaves the row's prompt, the retry's request and the cache key as they were (before,
    each row recorded the app's 'changed by the app' as its prompt, and the retry got the
    changed request)."""
    spec = _spec(app_dir, "mutating", max_retries=1, concurrency=1)
    result = gradetrail.run_eval(spec, results_root=app_dir / "r", cache_path=app_dir / "c.db")
    rows = _rows(result)
    assert [(r["prompt"], r["score"], r["attempts"]) for r in rows] == [
        ("3+4=7", 1.0, 2),
        ("4+3=7", 1.0, 2),
        ("5+2=8", 0.0, 2),
    ]
    again = gradetrail.run_eval(spec, results_root=app_dir / "r", cache_path=app_dir / "c.db")
    assert again.manifest.cache_hits == 3


def test_a_response_with_fields_of_the_wrong_type_is_its_rows_error(app_dir: Path) -> None:
    """A Response whose served_model, latency_s, ttft_s or batch has the wrong type is a
    provider_error naming each field (before, latency_s='x' ended the run with a
    TypeError); a Response without its own latency_s gets the call's."""
    result = gradetrail.run_eval(_spec(app_dir, "odd_fields"), results_root=app_dir / "r")
    (message,) = {r["error"]["message"] for r in _rows(result)}
    assert message == (
        "model.function returned a bad Response: served_model is int, not str or None; "
        "latency_s is 'x', not a non-negative number of seconds; ttft_s is nan, not a "
        "non-negative number of seconds; batch is 'no', not a bool"
    )
    timed = gradetrail.run_eval(_spec(app_dir, "async_app"), results_root=app_dir / "r")
    assert all(r["latency_s"] > 0 for r in _rows(timed))


def test_transient_error_from_function_is_retried(app_dir: Path) -> None:
    """A ProviderError marked transient is retried by the shared policy."""
    spec = _spec(app_dir, "flaky", max_retries=3, concurrency=1)
    result = gradetrail.run_eval(spec, results_root=app_dir / "r")
    rows = _rows(result)
    assert [r["state"] for r in rows] == ["scored"] * 3
    assert [r["attempts"] for r in rows] == [2, 2, 2]


def test_non_string_return_is_a_clear_error(app_dir: Path) -> None:
    """Returning something other than str or Response is a provider_error saying so."""
    result = gradetrail.run_eval(_spec(app_dir, "wrong_type"), results_root=app_dir / "r")
    assert "return str or Response" in _rows(result)[0]["error"]["message"]


def test_replay_keys_on_sample_id(tmp_path: Path) -> None:
    """Two samples with the same prompt get their own recordings (replay keys on the id)."""
    (tmp_path / "d.jsonl").write_text('{"q": "same"}\n{"q": "same"}\n')
    (tmp_path / "rec.jsonl").write_text('{"m": "1"}\n{"m": "2"}\n')
    (tmp_path / "s.yaml").write_text(
        "name: r\ndataset: {path: d.jsonl}\nprompt: '{{ q }}'\ntarget: '2'\n"
        "model: {provider: replay, name: m, recordings: {path: rec.jsonl}}\n"
        "scorer: {type: exact}\n"
    )
    for _ in range(2):  # cold, then from the cache
        result = gradetrail.run_eval(
            gradetrail.load_spec(tmp_path / "s.yaml"), results_root=tmp_path
        )
        assert [r["response"] for r in gradetrail.read_results(result.run_dir)] == ["1", "2"]


def test_replay_missing_recording_names_the_sample(tmp_path: Path) -> None:
    """A sample with no recording is a provider_error naming its id, not a crash."""
    (tmp_path / "d.jsonl").write_text('{"id": "a"}\n{"id": "b"}\n')
    (tmp_path / "rec.jsonl").write_text('{"id": "a", "out": {"text": "x"}}\n{"id": "b"}\n')
    (tmp_path / "s.yaml").write_text(
        "name: r\ndataset: {path: d.jsonl}\nprompt: '{{ id }}'\ntarget: x\n"
        "model: {provider: replay, name: m, recordings: {path: rec.jsonl, "
        "response_field: out.text}}\nscorer: {type: exact}\n"
    )
    result = gradetrail.run_eval(gradetrail.load_spec(tmp_path / "s.yaml"), results_root=tmp_path)
    rows = gradetrail.read_results(result.run_dir)
    assert rows[0]["state"] == "scored" and rows[0]["score"] == 1.0
    assert rows[1]["state"] == "provider_error"
    assert rows[1]["error"]["message"] == "recording for sample id 'b' has no text at 'out.text'"


def test_replay_recordings_out_of_step_with_the_dataset_stop_the_run(tmp_path: Path, cli) -> None:
    """With match_fields, a recordings file one line short (ids are line numbers) stops the
    run before any call, naming the first sample whose recording answers another
    question; in step, the run scores as without the check, under the same identity."""
    from paths import GSM8K_SPEC

    examples = GSM8K_SPEC.parent
    data = (examples / "data" / "gsm8k" / "test.jsonl").read_text().splitlines()[:6]
    recorded = (examples / "data" / "gsm8k" / "example_model_solutions.jsonl").read_text()
    recorded = recorded.splitlines()[:6]
    (tmp_path / "d.jsonl").write_text("\n".join(data) + "\n")
    spec = tmp_path / "s.yaml"
    spec.write_text(
        GSM8K_SPEC.read_text()
        .replace("data/gsm8k/test.jsonl", "d.jsonl")
        .replace("data/gsm8k/example_model_solutions.jsonl", "rec.jsonl")
    )
    assert "match_fields: [question]" in spec.read_text()
    (tmp_path / "rec.jsonl").write_text("\n".join(recorded) + "\n")
    checked = cli("run", str(spec), "--json", "--results-root", str(tmp_path / "r"))
    assert checked.exit_code == 0, checked.stderr
    unchecked_spec = tmp_path / "u.yaml"
    unchecked_spec.write_text(spec.read_text().replace("match_fields: [question]", ""))
    unchecked = cli("run", str(unchecked_spec), "--json", "--results-root", str(tmp_path / "r"))
    first, second = json.loads(checked.stdout), json.loads(unchecked.stdout)
    assert first["identity_hash"] == second["identity_hash"]  # a check, not the identity
    labels = [json.loads(line)["175b_verification"]["is_correct"] for line in recorded]
    assert first["score"]["mean"] == second["score"]["mean"] == sum(labels) / 6  # the authors'

    # line 3 removed: recordings 3-5 would answer samples 3-5's neighbours' questions
    (tmp_path / "rec.jsonl").write_text("\n".join(recorded[:2] + recorded[3:]) + "\n")
    out = cli("run", str(spec), "--results-root", str(tmp_path / "r2"))
    assert out.exit_code == 2 and len(out.stderr.strip().splitlines()) == 1
    assert "the recording for sample '3' (line 3 of rec.jsonl) has question 'James" in out.stderr
    assert "out of step with the dataset" in out.stderr
    assert not (tmp_path / "r2").exists()  # nothing written, nothing called
    # without the check the same file is read as it always was: by line number, shifted
    shifted = cli("run", str(unchecked_spec), "--json", "--results-root", str(tmp_path / "r2"))
    assert json.loads(shifted.stdout)["score"]["mean"] != first["score"]["mean"]


def test_replay_match_fields_a_recording_lacks_is_named(tmp_path: Path) -> None:
    """A match field a recording does not hold stops the run as a difference does."""
    (tmp_path / "d.jsonl").write_text('{"q": "1+1"}\n')
    (tmp_path / "rec.jsonl").write_text('{"m": "2"}\n')
    (tmp_path / "s.yaml").write_text(
        "name: r\ndataset: {path: d.jsonl}\nprompt: '{{ q }}'\ntarget: '2'\n"
        "model: {provider: replay, name: m, recordings: {path: rec.jsonl, match_fields: [q]}}\n"
        "scorer: {type: exact}\n"
    )
    with pytest.raises(gradetrail.DatasetError, match=r"has q no value where the dataset's row"):
        gradetrail.run_eval(gradetrail.load_spec(tmp_path / "s.yaml"), results_root=tmp_path)


def test_editing_the_function_module_misses_the_cache(app_dir: Path) -> None:
    """After an edit to the function's module, a re-run calls it again (new answers), under
    a new identity hash; an unchanged module is all cache hits."""
    _spec(app_dir, "sync_app")  # writes s.yaml

    def run() -> dict:
        out = _cli(app_dir, "run", "s.yaml", "--json")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    first = run()
    assert (first["cache_hits"], first["score"]["mean"]) == (0, pytest.approx(2 / 3))
    assert run()["cache_hits"] == 3
    module = app_dir / "myapp.py"
    module.write_text(module.read_text().replace('split("=")[-1]', 'split("=")[0]'))
    edited = run()
    assert edited["cache_hits"] == 0 and edited["score"]["mean"] == 0.0
    assert edited["identity_hash"] != first["identity_hash"]
    assert len(_calls(app_dir)) == 6


WRAPPED_APP = """
import functools
import retrying

def _answer(request, suffix):
    return request.prompt.split("=")[-1].strip() + suffix

partial_app = functools.partial(_answer, suffix="")

@retrying.retry
def decorated_app(request):
    return request.prompt.split("=")[-1].strip()
"""

RETRYING = """
import functools

def retry(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper
"""


@pytest.mark.parametrize("function", ["partial_app", "decorated_app"])
def test_editing_a_wrapped_function_misses_the_cache(app_dir: Path, function: str) -> None:
    """A functools.partial, or a function under another module's functools.wraps
    decorator, is followed to its code: editing it re-runs every sample (before, the key
    hashed functools.py or the decorator's file, and the edited app was served its old
    cached answers)."""
    (app_dir / "wrapped.py").write_text(WRAPPED_APP)
    (app_dir / "retrying.py").write_text(RETRYING)
    _spec(app_dir, function, module="wrapped")

    def run() -> dict:
        out = _cli(app_dir, "run", "s.yaml", "--json")
        assert out.returncode in (0, 1), out.stderr
        return json.loads(out.stdout)

    first = run()
    assert (first["cache_hits"], first["score"]["mean"]) == (0, pytest.approx(2 / 3))
    module = app_dir / "wrapped.py"
    module.write_text(module.read_text().replace('split("=")[-1]', 'split("=")[0]'))
    edited = run()
    assert (edited["cache_hits"], edited["score"]["mean"]) == (0, 0.0)


def test_a_second_run_in_one_process_runs_the_edited_function(app_dir: Path) -> None:
    """Two runs in one process (a notebook) with the app's module edited between: the
    second calls the edited code, and caches its answers under the edited code's key
    (before, it ran the first version again and stored its answers under the new key, so
    even a fresh process was served the old answers)."""
    module = app_dir / "notebook_app.py"
    module.write_text(APP)
    spec = _spec(app_dir, "sync_app", module="notebook_app")
    first = gradetrail.run_eval(spec, results_root=app_dir / "r", cache_path=app_dir / "c.db")
    assert first.manifest.score.mean == pytest.approx(2 / 3)
    module.write_text(APP.replace('split("=")[-1]', 'split("=")[0]'))
    edited = gradetrail.run_eval(spec, results_root=app_dir / "r", cache_path=app_dir / "c.db")
    assert (edited.manifest.cache_hits, edited.manifest.score.mean) == (0, 0.0)
    assert [r["response"] for r in _rows(edited)] == ["3+4", "4+3", "5+2"]


NOISY_APP = """
import subprocess, sys

print("loading the app")

def answer(request):
    print("debug:", request.prompt)
    subprocess.run([sys.executable, "-c", "print('from a subprocess')"], check=True)
    sys.stdout.close()
    return request.prompt.split("=")[-1].strip()
"""


@pytest.mark.parametrize("flag", ["--json", "--print-run-dir"])
def test_an_app_printing_or_closing_stdout_leaves_the_commands_output_whole(
    app_dir: Path, flag: str
) -> None:
    """What the app prints (itself, or a subprocess it runs) goes to stderr while the
    command's stdout is for machines, and its ``sys.stdout.close()`` does not break it:
    stdout is exactly the JSON or the run directory (before: the app's lines came first,
    and closing stdout ended the command with a traceback, exit 1)."""
    (app_dir / "noisy.py").write_text(NOISY_APP)
    _spec(app_dir, "answer", module="noisy", concurrency=1)  # lines not interleaved
    out = _cli(app_dir, "run", "s.yaml", flag)
    assert out.returncode == 0, out.stderr
    if flag == "--json":
        assert json.loads(out.stdout)["counts"] == {"scored": 3}
    else:
        assert (app_dir / out.stdout.strip() / "manifest.json").is_file()
    assert "from a subprocess" in out.stderr and "debug: 3+4=7" in out.stderr


def test_replay_unknown_model_stops_before_any_sample(cli) -> None:
    """A model name the recordings lack is one line naming the fields there are, exit 2."""
    from paths import GSM8K_SPEC

    out = cli("run", str(GSM8K_SPEC), "--set", "model.name=nosuch")
    assert out.exit_code == 2
    assert "no 'nosuch.solution'" in out.stderr and "175b_finetuning" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert out.stderr.rstrip().endswith("check model.name and response_field")
    typo = cli("run", str(GSM8K_SPEC), "--set", "model.name=175b_finetunning")
    assert typo.exit_code == 2 and len(typo.stderr.strip().splitlines()) == 1
    assert typo.stderr.rstrip().endswith("did you mean model.name: 175b_finetuning?")


def test_summary_names_the_most_frequent_errors(app_dir: Path, cli) -> None:
    """When rows fail, the summary and manifest say why, with counts."""
    _spec(app_dir, "broken")
    out = cli("run", str(app_dir / "s.yaml"))
    assert out.exit_code == 1
    assert "errors      3 provider_error BadRequest (function_error): KeyError: 'db down'" in (
        out.stdout
    )
    run = cli("run", str(app_dir / "s.yaml"), "--json")
    top = json.loads(run.stdout)["top_errors"]
    assert top == [
        {
            "state": "provider_error",
            "kind": "BadRequest",
            "error_type": "function_error",
            "status": None,
            "rows": 3,
            "message": "KeyError: 'db down'",
        }
    ]


def test_hanging_sync_function_times_out_and_the_process_ends(app_dir: Path) -> None:
    """A sync function that never returns is a ProviderTimeout row after run.timeout_s, and
    the process still finishes (its thread is abandoned, not waited for)."""
    _spec(app_dir, "hang", timeout_s=0.5)
    out = _cli(app_dir, "run", "s.yaml", "--json", timeout=60)
    assert out.returncode == 1, out.stderr
    manifest = json.loads(out.stdout)
    assert manifest["status"] == "complete"
    assert manifest["top_errors"][0]["kind"] == "ProviderTimeout"
    assert manifest["counts"] == {"provider_error": 3}


def test_malformed_recordings_stop_the_run_before_its_directory_exists(tmp_path: Path, cli) -> None:
    """A broken line anywhere in the recordings is one line, exit 2, and no run directory
    is left behind."""
    (tmp_path / "d.jsonl").write_text('{"id": "a"}\n{"id": "b"}\n')
    (tmp_path / "rec.jsonl").write_text('{"id": "a", "m": "x"}\n{broken\n')
    (tmp_path / "s.yaml").write_text(
        "name: r\ndataset: {path: d.jsonl}\nprompt: '{{ id }}'\ntarget: x\n"
        "model: {provider: replay, name: m, recordings: {path: rec.jsonl}}\n"
        "scorer: {type: exact}\n"
    )
    out = cli("run", str(tmp_path / "s.yaml"), "--results-root", str(tmp_path / "results"))
    assert out.exit_code == 2
    assert "rec.jsonl:2: not valid JSON" in out.stderr
    assert not (tmp_path / "results").exists()


def test_malformed_response_from_function_is_an_error_row_never_cached(app_dir: Path) -> None:
    """A Response whose text is not a string, or whose token count is negative, is a
    provider_error naming the field; nothing is cached, nothing crashes."""
    result = gradetrail.run_eval(_spec(app_dir, "bad_response"), results_root=app_dir / "r")
    rows = _rows(result)
    assert [r["state"] for r in rows] == ["provider_error"] * 3
    assert "input_tokens is -5, not a non-negative int" in rows[0]["error"]["message"]
    assert "text is int, not str" in rows[2]["error"]["message"]
    assert result.manifest.status == "complete" and result.manifest.cache_hits == 0
    again = gradetrail.run_eval(_spec(app_dir, "bad_response"), results_root=app_dir / "r")
    assert again.manifest.cache_hits == 0


BLOCKING_APP = """
import asyncio, threading, time

RELEASE = threading.Event()
STOP_SPINNING = False
SEEN = []


def _answer(request):
    loop, thread = id(asyncio.get_running_loop()), threading.current_thread().name
    SEEN.append((request.sample_id, loop, thread))
    return request.prompt.split("=")[-1].strip()


async def behaves(request):
    await asyncio.sleep(0)
    return _answer(request)


async def blocks(request):
    \"\"\"Holds its event loop without awaiting on sample q1 (as time.sleep would), until
    the test that started it sets RELEASE.\"\"\"
    if request.sample_id == "q1":
        RELEASE.wait(600)
    await asyncio.sleep(0)
    return _answer(request)


async def holds(request):
    \"\"\"Holds its event loop for 1.5 s without awaiting on q1 and q2 (CPU-bound work, a
    heavy first import), then answers.\"\"\"
    if request.sample_id in ("q1", "q2"):
        time.sleep(1.5)
    await asyncio.sleep(0)
    return _answer(request)


async def spins(request):
    \"\"\"Spins without awaiting on sample q1, until the test sets STOP_SPINNING.\"\"\"
    while request.sample_id == "q1" and not STOP_SPINNING:
        pass
    await asyncio.sleep(0)
    return _answer(request)


class _Answerer:
    async def __call__(self, request):
        await asyncio.sleep(0)
        return _answer(request)


answerer = _Answerer()


async def interrupts(request):
    raise KeyboardInterrupt
"""


@pytest.fixture
def blocking_app(app_dir: Path) -> Iterator[tuple[Path, str]]:
    """A module of async functions that hold their loop; whatever they hold is let go
    when the test ends (Python cannot kill the thread: a spinning one would keep half of
    the GIL for every later test)."""
    name = f"blockapp_{app_dir.name.replace('-', '_')}"
    (app_dir / f"{name}.py").write_text(BLOCKING_APP)
    yield app_dir, name
    module = sys.modules.pop(name, None)
    if module is not None:
        module.STOP_SPINNING = True
        module.RELEASE.set()


def _held_warnings(run_dir: Path) -> list[dict]:
    lines = [json.loads(line) for line in (run_dir / "log.jsonl").open()]
    return [e for e in lines if e["event"] == "function_held_loop"]


_FIX = (
    "(time.sleep, a blocking client or CPU-bound work in an async def); use await "
    "asyncio.sleep, move blocking code into await asyncio.to_thread(...), or make it a "
    "plain def (gradetrail runs those in threads)"
)


def test_an_async_function_that_holds_its_loop_for_a_while_is_answered_and_said_once(
    blocking_app: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """An async function that holds its event loop for 1.5 s without awaiting, on two
    samples, is not failed for it: every sample is answered on its first attempt (the
    one queued behind the hold moved to a fresh loop, no retry used), and the run says so
    once, in log.jsonl and on stderr, naming the function, the sample, the hold and the
    fix (before: each such sample was a permanent function_blocked error)."""
    app_dir, module = blocking_app
    spec = _spec(app_dir, "holds", module, concurrency=2, max_retries=3)
    result = gradetrail.run_eval(spec, results_root=app_dir / "r")
    rows = {r["sample_id"]: r for r in _rows(result)}
    assert {q: (r["state"], r["response"], r["attempts"]) for q, r in rows.items()} == {
        "q0": ("scored", "7", 1),
        "q1": ("scored", "7", 1),
        "q2": ("scored", "8", 1),
    }
    [warning] = _held_warnings(result.run_dir)
    assert warning["level"] == "warning"
    assert (warning["function"], warning["sample_id"]) == (f"{module}:holds", "q1")
    assert warning["held_s"] >= 1.0  # first seen just past the bound (kept to the ms)
    message = warning["message"]
    assert message.startswith(f"model.function '{module}:holds' ")
    assert "held its event loop for " in message
    assert f"without awaiting in sample 'q1' {_FIX}. " in message
    assert "Calls that arrive meanwhile run on a fresh event loop beside it" in message
    assert capsys.readouterr().err.count(f"warning: {message}\n") == 1


@pytest.mark.parametrize("function", ["blocks", "spins"])
def test_an_async_function_that_holds_its_loop_past_its_timeout_is_function_blocked(
    blocking_app: tuple[Path, str], function: str
) -> None:
    """An async function that blocks (a sync wait) or spins for good on one sample holds
    its loop until run.timeout_s: that sample is a permanent function_blocked error (a
    retry would hold another loop) naming the function and the fix; the others are
    answered on a loop of their own, the run's timeouts and signals alive."""
    app_dir, module = blocking_app
    spec = _spec(app_dir, function, module, concurrency=2, max_retries=3, timeout_s=2)
    result = gradetrail.run_eval(spec, results_root=app_dir / "r")
    rows = {r["sample_id"]: r for r in _rows(result)}
    assert rows["q1"]["state"] == "provider_error"
    assert rows["q1"]["attempts"] == 1  # permanent: it would block again
    assert rows["q1"]["error"]["error_type"] == "function_blocked"
    message = rows["q1"]["error"]["message"]
    assert message.startswith(f"model.function '{module}:{function}' held its event loop for ")
    assert message.endswith(
        f" s without awaiting in sample 'q1', until its attempt timed out {_FIX}"
    )
    assert [(rows[q]["state"], rows[q]["response"]) for q in ("q0", "q2")] == [
        ("scored", "7"),
        ("scored", "8"),
    ]
    assert [w["sample_id"] for w in _held_warnings(result.run_dir)] == ["q1"]


def test_async_functions_share_one_loop_off_the_runs_thread(
    blocking_app: tuple[Path, str],
) -> None:
    """Calls of an async function that awaits (or of an object with an async __call__)
    run on one event loop of their own (so a module-level async client serves them all),
    never on the run's thread; its own KeyboardInterrupt is an error row, not the end of
    the run."""
    app_dir, module = blocking_app
    for function in ("behaves", "answerer"):
        spec = _spec(app_dir, function, module)
        result = gradetrail.run_eval(spec, results_root=app_dir / "r")
        assert [r["response"] for r in _rows(result)] == ["7", "7", "8"]
    seen = sys.modules[module].SEEN
    assert sorted(sample for sample, _, _ in seen) == ["q0", "q0", "q1", "q1", "q2", "q2"]
    assert len({loop for _, loop, _ in seen}) == 1
    assert {thread for _, _, thread in seen} == {"gradetrail-async-function"}
    spec = _spec(app_dir, "interrupts", module)
    rows = _rows(gradetrail.run_eval(spec, results_root=app_dir / "r"))
    assert [r["error"]["message"] for r in rows] == ["the function raised KeyboardInterrupt"] * 3


HELD_APP = """
import asyncio, os, threading


async def answer(request):
    if request.sample_id == "q0":
        threading.Event().wait(600)  # holds its loop for good: only the process's end stops it
    while not os.path.exists("release"):
        await asyncio.sleep(0.01)
    return request.prompt.split("=")[-1].strip()
"""


def test_sigterm_ends_a_run_whose_async_function_holds_its_loop(app_dir: Path) -> None:
    """While an async function holds its loop for good on one sample (said in the log)
    and the others run on a fresh loop, SIGTERM still stops the run: exit 143, the manifest says
    interrupted, and the held thread does not keep the process alive."""
    import os
    import signal

    from run_support import only_run_dir, send, start_run, wait_until

    (app_dir / "heldapp.py").write_text(HELD_APP)
    _spec(app_dir, "answer", "heldapp", concurrency=3, max_retries=5)
    cache, results = app_dir / "cache.sqlite", app_dir / "results"
    proc = start_run(app_dir / "s.yaml", cache, results, dict(os.environ))
    wait_until(lambda: results.exists() and any(results.iterdir()), proc=proc)
    log = only_run_dir(results) / "log.jsonl"
    held = '"event":"function_held_loop"'
    wait_until(lambda: log.exists() and held in log.read_text(), proc=proc, what=held)
    send(proc, signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 143
    manifest = json.loads((only_run_dir(results) / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"


def test_two_specs_beside_their_own_app_module_each_run_their_own(tmp_path: Path) -> None:
    """Two specs in one process (a notebook), each in its own directory beside its own
    ``app.py``: each runs its own function, and then the first again its own. Before,
    importing by name returned the first spec's module, so the second ran the first's
    code (its rows answered 'a') and would have cached those answers under its own
    requests."""
    for name in ("a", "b"):
        d = tmp_path / name
        d.mkdir()
        (d / "data.jsonl").write_text('{"id": "1", "q": "x"}\n')
        (d / "twin_app.py").write_text(f"def answer(request):\n    return {name!r}\n")
        (d / "s.yaml").write_text(
            "name: t\ndataset: {path: data.jsonl}\nprompt: '{{ q }}'\ntarget: 'b'\n"
            "model: {provider: python, name: app, function: 'twin_app:answer'}\n"
            "scorer: {type: exact}\n"
        )
    answers = []
    try:
        for name in ("a", "b", "a"):
            spec = gradetrail.load_spec(tmp_path / name / "s.yaml")
            result = gradetrail.run_eval(spec, results_root=tmp_path / "r", use_cache=False)
            answers += [row["response"] for row in _rows(result)]
    finally:
        sys.modules.pop("twin_app", None)
    assert answers == ["a", "b", "a"]


@pytest.mark.parametrize("function", ["hard_exit", "ahard_exit"])
def test_an_app_calling_os_exit_never_ends_the_run_as_a_success(
    app_dir: Path, function: str
) -> None:
    """A sync or async function that calls ``os._exit(0)`` on one sample: before, the
    whole process ended there with exit code 0 (a CI read success) and no row or manifest
    written. Now the call is refused in the run's process: that sample is its row's
    ``function_error`` naming ``os._exit(0)``, the other two are scored, the manifest is
    complete, and the summary counts the error."""
    _spec(app_dir, function)
    out = _cli(app_dir, "run", "s.yaml", "--json", timeout=60)
    manifest = json.loads(out.stdout)
    assert manifest["status"] == "complete", out.stderr
    assert manifest["counts"] == {"scored": 2, "provider_error": 1}
    (error,) = manifest["top_errors"]
    assert error["kind"] == "BadRequest" and "os._exit(0)" in error["message"]


def test_a_forked_child_of_the_app_still_exits_with_os_exit(app_dir: Path) -> None:
    """``os._exit`` in a child process the app forks (multiprocessing's own way to end a
    child) ends that child as it always did: the app sees exit code 0."""
    _spec(app_dir, "forking")
    out = _cli(app_dir, "run", "s.yaml", "--json", timeout=60)
    manifest = json.loads(out.stdout)
    assert manifest["counts"] == {"scored": 3}, out.stderr
    assert manifest["score"]["mean"] == pytest.approx(2 / 3)  # the third sum is wrong (8)


def test_a_module_in_the_working_directory_follows_os_chdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two projects in one process, each run from its own directory (``os.chdir``, as a
    notebook or a test suite does), the spec given relative to it: each runs its own
    ``app.py``. Before, the working directory went on ``sys.path`` as ``"."``, which
    Python binds to the directory it was first searched from (``sys.path_importer_cache``),
    so the second project ran the first's function (rows 'a', 'a')."""
    for name in ("a", "b"):
        d = tmp_path / name
        d.mkdir()
        (d / "data.jsonl").write_text('{"id": "1", "q": "x"}\n')
        (d / "cwd_app.py").write_text(f"def answer(request):\n    return {name!r}\n")
        (d / "s.yaml").write_text(
            "name: t\ndataset: {path: data.jsonl}\nprompt: '{{ q }}'\ntarget: 'b'\n"
            "model: {provider: python, name: app, function: 'cwd_app:answer'}\n"
            "scorer: {type: exact}\n"
        )
    answers = []
    try:
        for name in ("a", "b"):
            monkeypatch.chdir(tmp_path / name)
            spec = gradetrail.load_spec("s.yaml")
            result = gradetrail.run_eval(spec, results_root=tmp_path / "r", use_cache=False)
            answers += [row["response"] for row in _rows(result)]
    finally:
        sys.modules.pop("cwd_app", None)
    assert answers == ["a", "b"]
