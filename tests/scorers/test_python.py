"""Issue 23: scorers the user writes (``scorer: {type: python, function: mod:name}``).

The bundled example's function (examples/grading/gsm8k.py, the GSM8K authors' own answer
check) reproduces all four label sets; sync and async functions, a number, a bool or a
Score with a detail; an exception, a value outside [0, 1] or a slow function is a scorer
error row naming the function, never a crash or a 0; the module's hash enters the
identity, and re-scoring with changed grading code makes no model call.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml
from loop_support import run_on_fake_time
from paths import EXAMPLES
from pydantic import ValidationError

import gradetrail
from gradetrail.datasets import Sample
from gradetrail.errors import SpecError
from gradetrail.scorers.base import Score, ScoreInput
from gradetrail.scorers.python import AsyncPythonScorer, make_python_scorer
from gradetrail.spec import PythonScorerSpec

#: the dataset authors' is_correct counts (examples/data/gsm8k/README.md)
AUTHOR_LABELS = {
    "6b_finetuning": 286,
    "6b_verification": 515,
    "175b_finetuning": 458,
    "175b_verification": 742,
}
SPEC = EXAMPLES / "gsm8k-python-scorer.yaml"
SOLUTIONS = EXAMPLES / "data/gsm8k/example_model_solutions.jsonl"


@pytest.mark.parametrize("model", sorted(AUTHOR_LABELS))
def test_the_example_python_scorer_reproduces_every_label(cli, model: str) -> None:
    """grading.gsm8k:correct agrees with the authors' is_correct on every problem."""
    out = cli("run", str(SPEC), "--set", f"model.name={model}", "--json")
    assert out.exit_code == 0, out.stderr
    manifest = json.loads(out.stdout)
    assert manifest["counts"] == {"scored": 1319}
    rows = gradetrail.read_results(manifest["run_dir"])
    labels = [json.loads(line)[model]["is_correct"] for line in SOLUTIONS.open()]
    assert [r["score"] == 1.0 for r in rows] == labels
    assert sum(labels) == AUTHOR_LABELS[model]
    assert rows[0]["scorer"]["function"] == "grading.gsm8k:correct"
    assert any(k.startswith("python_scorer:") for k in manifest["file_hashes"])


_counter = iter(range(10_000))


def scorer_from(tmp_path: Path, source: str, name: str = "score", timeout: float | None = 5.0):  # noqa: ANN201
    """A PythonScorer over a fresh module holding ``source``."""
    module = f"grading_{next(_counter)}"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
    spec = PythonScorerSpec(type="python", function=f"{module}:{name}")
    return make_python_scorer(spec, tmp_path, timeout)


def item(response: str = "A: 42", target: str = "42") -> ScoreInput:
    row = {"question": "q", "answer": target}
    return ScoreInput(
        Sample(0, "s1", row, 1), 1, "prompt", None, target, response,
        response_meta={"stop_reason": "stop", "output_tokens": 7},
    )  # fmt: skip


def test_a_sync_function_returning_a_number_a_bool_or_a_score(tmp_path: Path) -> None:
    """A float, a bool and a Score with a detail are each a verdict; the function sees
    the row, the prompt, the target, the response and its metadata."""
    number = scorer_from(tmp_path, "def score(s):\n    return 0.25\n")
    assert number.score(item()).value == 0.25
    flag = scorer_from(tmp_path, "def score(s):\n    return s.response.endswith(s.target)\n")
    assert flag.score(item()).value == 1.0 and flag.score(item("A: 41")).value == 0.0
    detailed = scorer_from(
        tmp_path,
        """
        from gradetrail import Score
        def score(s):
            return Score(0.5, {"tokens": s.metadata["output_tokens"], "q": s.row["question"],
                               "prompt": s.prompt, "id": s.id, "epoch": s.epoch})
        """,
    )
    s = detailed.score(item())
    assert s.value == 0.5 and s.error is None
    assert s.detail == {
        "tokens": 7, "q": "q", "prompt": "prompt", "id": "s1", "epoch": 1,
        "function": detailed.spec.function,
    }  # fmt: skip


def test_an_async_function_is_awaited(tmp_path: Path) -> None:
    """``async def`` scorers are awaited through ascore."""
    import asyncio

    scorer = scorer_from(
        tmp_path,
        "import asyncio\nasync def score(s):\n    await asyncio.sleep(0)\n    return 1\n",
    )
    assert isinstance(scorer, AsyncPythonScorer)
    assert asyncio.run(scorer.ascore(item())).value == 1.0


def test_a_slow_async_function_is_a_timeout_row(tmp_path: Path) -> None:
    """Past the run's scoring bound the await is cancelled: a scorer_timeout row, at
    exactly the bound on the fake-time loop (the function's own 5 s sleep is cut short)."""
    import asyncio

    scorer = scorer_from(
        tmp_path, "import asyncio\nasync def score(s):\n    await asyncio.sleep(5)\n", timeout=0.2
    )

    async def main() -> tuple[Score, float]:
        return await scorer.ascore(item()), asyncio.get_running_loop().time()

    s, ended_at = run_on_fake_time(main())
    assert ended_at == 0.2
    assert s.value is None and s.error["reason"] == "scorer_timeout"
    assert scorer.spec.function in s.error["message"]


@pytest.mark.parametrize(
    ("body", "reason", "says"),
    [
        ("raise KeyError('answer_key')", "python_scorer_failed", "raised KeyError"),
        ("return 1 / 0", "python_scorer_failed", "ZeroDivisionError"),
        ("return 1.5", "python_scorer_bad_value", "returned 1.5"),
        ("return -0.1", "python_scorer_bad_value", "returned -0.1"),
        ("return float('nan')", "python_scorer_bad_value", "returned nan"),
        ("return 'yes'", "python_scorer_bad_value", "returned 'yes'"),
        ("return None", "python_scorer_bad_value", "returned None"),
        ("raise SystemExit(0)", "python_scorer_failed", "raised SystemExit: 0"),
        ("raise GeneratorExit", "python_scorer_failed", "raised GeneratorExit"),
        (
            "raise type('Opaque', (Exception,), {'__str__': lambda self: 1 / 0})()",
            "python_scorer_failed",
            "raised Opaque (its message cannot be printed: ZeroDivisionError)",
        ),
    ],
)
def test_a_failing_function_is_a_scorer_error_naming_it(
    tmp_path: Path, body: str, reason: str, says: str
) -> None:
    """An exception or a value that is no score: no score (left out of the mean), the
    message names the function and what went wrong, never a 0."""
    scorer = scorer_from(tmp_path, f"def score(s):\n    {body}\n")
    s = scorer.score(item())
    assert s.value is None and s.error["kind"] == "scorer_error"
    assert s.error["reason"] == reason
    assert scorer.spec.function in s.error["message"] and says in s.error["message"]


@pytest.mark.parametrize(
    ("body", "value"),
    [
        ("import numpy; return numpy.bool_(True)", 1.0),
        ("import numpy; return numpy.float32(0.5)", 0.5),
        ("import numpy; return numpy.int64(0)", 0.0),
        ("import decimal; return decimal.Decimal('0.25')", 0.25),
        ("import fractions; return fractions.Fraction(3, 4)", 0.75),
    ],
)
def test_any_real_number_type_is_a_score(tmp_path: Path, body: str, value: float) -> None:
    """NumPy's bool and numbers, Decimal and Fraction are scores as their float is
    (before, numpy.bool_ and Decimal were scorer errors while numpy.float64 scored)."""
    scorer = scorer_from(tmp_path, f"def score(s):\n    {body}\n")
    s = scorer.score(item())
    assert (s.value, s.error) == (value, None)


def test_an_async_function_that_never_awaits_still_times_out(tmp_path: Path) -> None:
    """An ``async def`` that spins without awaiting runs off the caller's loop, so the
    scoring bound still cuts it: a scorer_timeout row, not its late 1.0."""
    import asyncio

    scorer = scorer_from(
        tmp_path,
        """
        import time
        async def score(s):
            end = time.monotonic() + 1.5
            while time.monotonic() < end:
                pass
            return 1.0
        """,
        timeout=0.3,
    )
    s = asyncio.run(scorer.ascore(item()))
    assert s.value is None and s.error["reason"] == "scorer_timeout"


async def _exits(tmp_path: Path, body: str) -> Score:
    scorer = scorer_from(tmp_path, f"async def score(s):\n    {body}\n")
    return await scorer.ascore(item())


@pytest.mark.parametrize(
    ("body", "says"),
    [("raise SystemExit(0)", "raised SystemExit: 0"), ("raise GeneratorExit", "GeneratorExit")],
)
def test_an_async_function_exiting_is_its_rows_error(tmp_path: Path, body: str, says: str) -> None:
    """``sys.exit(0)`` or GeneratorExit in an async scorer is that row's scorer error,
    never the end of the run (before: the process exited 0 with no summary)."""
    import asyncio

    s = asyncio.run(_exits(tmp_path, body))
    assert s.value is None and s.error["reason"] == "python_scorer_failed"
    assert says in s.error["message"]


def test_a_scorer_calling_sys_exit_leaves_the_run_complete(cli, tmp_path: Path) -> None:
    """A sync scorer calling ``sys.exit(0)`` on one row is that row's judge_error; the run
    completes and exits 0 for its other rows only because they scored (before: exit 0, no
    summary, no manifest score)."""
    spec = write_eval(
        tmp_path / "e",
        """
        import sys
        def score(s):
            if s.target == "2":
                sys.exit(0)
            return s.response.endswith(s.target)
        """,
    )
    out = cli("run", str(spec), "--json")
    manifest = json.loads(out.stdout)
    assert manifest["counts"] == {"scored": 3, "judge_error": 1}
    assert manifest["score"]["mean"] == 1.0


@pytest.mark.parametrize(
    ("function", "message"),
    [
        ("grading.score", "module:function"),
        ("grading:", "module:function"),
        ("my-pkg:score", "module:function"),
        ("grading:score:x", "module:function"),
    ],
)
def test_a_malformed_function_name_says_how_to_write_it(function: str, message: str) -> None:
    """One line naming the form, e.g. mypkg.grading:score."""
    with pytest.raises(ValidationError, match=message):
        PythonScorerSpec(type="python", function=function)


def test_a_missing_module_or_function_is_a_spec_error(tmp_path: Path) -> None:
    """Before any model call: the module cannot be imported, or lacks the function."""
    with pytest.raises(SpecError, match="cannot import 'no_such_grading_module'"):
        make_python_scorer(
            PythonScorerSpec(type="python", function="no_such_grading_module:score"),
            tmp_path,
            1.0,
        )
    with pytest.raises(SpecError, match="has no function 'grade'.*score"):
        scorer_from(tmp_path, "def score(s):\n    return 1\n", name="grade")


APP = """\
import pathlib
def answer(request):
    with pathlib.Path(__file__).with_name("calls.log").open("a") as log:  # calls run at once
        log.write("x")
    return "The answer is " + request.prompt.split()[-1]
"""


def write_eval(directory: Path, grading: str, scorer: dict | None = None) -> Path:
    """An eval of 4 rows answered by a python provider that logs each call, scored by
    ``grading_e2e.py`` (``grading``)."""
    directory.mkdir(parents=True, exist_ok=True)
    rows = [{"id": f"s{i}", "q": f"echo {i}", "a": str(i)} for i in range(4)]
    (directory / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    app = f"echo_app_{next(_counter)}"  # a fresh module: one imported before is cached
    (directory / f"{app}.py").write_text(APP)
    (directory / "grading_e2e.py").write_text(textwrap.dedent(grading))
    spec = {
        "name": "python-scorer",
        "dataset": {"path": "data.jsonl"},
        "prompt": "{{ q }}",
        "target": "{{ a }}",
        "model": {"provider": "python", "name": "app", "function": f"{app}:answer"},
        "scorer": scorer or {"type": "python", "function": "grading_e2e:score"},
        "run": {"score_timeout_s": 1.0},
    }
    path = directory / "eval.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_a_scorer_raising_on_some_rows_leaves_the_run_complete(cli, tmp_path: Path) -> None:
    """Rows the function raises on are judge_error rows naming it; the others score."""
    spec = write_eval(
        tmp_path / "e",
        """
        def score(s):
            if s.target == "2":
                raise ValueError("cannot grade two")
            return s.response.endswith(s.target)
        """,
    )
    out = cli("run", str(spec), "--json")
    manifest = json.loads(out.stdout)
    assert manifest["status"] == "complete"
    assert manifest["counts"] == {"scored": 3, "judge_error": 1}
    assert manifest["score"]["mean"] == 1.0
    bad = [r for r in gradetrail.read_results(manifest["run_dir"]) if r["state"] != "scored"]
    assert [r["sample_id"] for r in bad] == ["s2"]
    assert "grading_e2e:score raised ValueError: cannot grade two" in bad[0]["error"]["message"]


def test_a_slow_sync_function_is_stopped_by_the_scoring_bound(cli, tmp_path: Path) -> None:
    """A sync function runs under run.score_timeout_s: a scorer_timeout row, the run goes
    on."""
    spec = write_eval(
        tmp_path / "e",
        """
        import time
        def score(s):
            if s.target == "1":
                time.sleep(30)
            return 1.0
        """,
    )
    manifest = json.loads(cli("run", str(spec), "--json").stdout)
    assert manifest["counts"] == {"scored": 3, "judge_error": 1}
    slow = [r for r in gradetrail.read_results(manifest["run_dir"]) if r["sample_id"] == "s1"]
    assert slow[0]["error"]["reason"] == "scorer_timeout"


def test_changed_grading_code_is_another_run_and_makes_no_model_call(cli, tmp_path: Path) -> None:
    """The module's hash enters the identity: editing the scorer changes the identity
    hash; the re-score reads every response from the cache (no new provider call)."""
    directory = tmp_path / "e"
    spec = write_eval(directory, "def score(s):\n    return 1.0\n")
    first = json.loads(cli("run", str(spec), "--json").stdout)
    assert (directory / "calls.log").read_text() == "xxxx"
    (directory / "grading_e2e.py").write_text("def score(s):\n    return 0.0\n")
    second = json.loads(cli("run", str(spec), "--json").stdout)
    assert second["identity_hash"] != first["identity_hash"]
    assert second["cache_hits"] == 4 and second["score"]["mean"] == 0.0
    assert (directory / "calls.log").read_text() == "xxxx"  # no model call
    differences = [
        k for k in second["file_hashes"] if k.startswith("python_scorer:")
    ]  # fmt: skip
    assert second["file_hashes"][differences[0]] != first["file_hashes"][differences[0]]


def test_a_detail_json_cannot_hold_is_kept_as_text(tmp_path: Path) -> None:
    """A detail holding an object, NaN or a non-string key is kept as text (the row can
    be written), the score with it."""
    scorer = scorer_from(
        tmp_path,
        """
        from gradetrail import Score
        def score(s):
            return Score(0.5, {"nan": float("nan"), 7: {"inner": {1, 2} - {1}}})
        """,
    )
    s = scorer.score(item())
    assert s.value == 0.5
    assert s.detail == {"nan": "nan", "7": {"inner": [2]}, "function": scorer.spec.function}


def test_a_function_changing_the_row_changes_it_for_no_one_else(tmp_path: Path) -> None:
    """The row a function gets is its own copy: popping a field leaves it for the next
    scorer and the next epoch (before, a second metric reading it was a KeyError on every
    row, and the run still said every row scored)."""
    scorer = scorer_from(
        tmp_path,
        "def score(s):\n    return s.response.endswith(s.row.pop('answer'))\n",
    )
    shared = item()
    assert [scorer.score(shared).value for _ in range(2)] == [1.0, 1.0]
    assert shared.sample.row == {"question": "q", "answer": "42"}


@pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")
def test_a_plain_def_calling_asyncio_run_is_told_to_be_async(tmp_path: Path) -> None:
    """A plain def scorer is called on the run's event loop, where asyncio.run() raises:
    the row's error says to make it an async def."""
    import asyncio

    scorer = scorer_from(
        tmp_path, "import asyncio\ndef score(s):\n    return asyncio.run(asyncio.sleep(0, 1.0))\n"
    )

    async def on_a_loop() -> Score:
        return scorer.score(item())

    s = asyncio.run(on_a_loop())
    assert s.value is None and s.error["reason"] == "python_scorer_failed"
    assert "make it an async def and await instead of asyncio.run()" in s.error["message"]
