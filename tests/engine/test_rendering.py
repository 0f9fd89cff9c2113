"""What a dataset row renders into: a null or NaN shown in a prompt, an empty target a
scorer compares against, lists and dicts shown as JSON. Whole runs through the CLI with
the python provider, whose app echoes the prompt it was sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from cli_support import run_cli

APP = "def answer(request):\n    return request.prompt\n"


def _run(tmp_path: Path, rows: list[dict[str, Any]], **spec: Any):
    (tmp_path / "echo_app.py").write_text(APP)
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    whole = {
        "name": "rows",
        "dataset": {"path": "data.jsonl"},
        "prompt": "{{ q }}",
        "target": "{{ a }}",
        "model": {"provider": "python", "name": "app", "function": "echo_app:answer"},
        "scorer": {"type": "exact"},
        **spec,
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(whole))
    return run_cli(
        "run", str(tmp_path / "spec.yaml"), "--no-cache", "--json",
        "--results-root", str(tmp_path / "results"),
    )  # fmt: skip


def _rows(out: Any) -> list[dict[str, Any]]:
    run_dir = Path(json.loads(out.out)["run_dir"])
    return [json.loads(line) for line in (run_dir / "results.jsonl").open()]


def test_a_null_shown_in_a_prompt_is_refused_counting_the_rows(tmp_path: Path) -> None:
    """``Context: {{ ctx }}`` on a null field sent the model "Context: None" (Jinja2's
    text of None), exit 0. Now one line names the first sample, how many rows are so and
    the fix, exit 2, before any call."""
    rows = [
        {"id": f"r{i}", "q": "2+2", "ctx": None if i % 3 == 0 else "m", "a": 4} for i in range(10)
    ]
    out = _run(tmp_path, rows, prompt="Context: {{ ctx }}\nQ: {{ q }}")
    assert out.code == 2 and len(out.err_lines) == 1, out.err
    assert (
        "prompt: sample 'r0' (line 1): ctx is null, which the template would show as the text "
        "'None' (4 of 10 rows are so; this is the first); show it through a default "
        "({{ ctx | default('') }}) or under a test ({% if ctx %}...{% endif %})"
    ) in out.err
    assert not (tmp_path / "results").exists()


def test_filters_and_joins_of_a_null_are_refused_too(tmp_path: Path) -> None:
    """A null passed through a text filter or ``~`` showed "None" as well; so did NaN."""
    for prompt in (
        "{{ ctx | trim }}",
        "{{ 'C: ' ~ ctx }}",
        "{{ ctx | upper }}",
        "{{ '%s' % ctx }}",
        "{{ '{}'.format(ctx) }}",
        "{{ [q, ctx] | join(', ') }}",
        "{{ q | replace('x', ctx) }}",
    ):
        out = _run(tmp_path, [{"id": "a", "q": "x", "ctx": None, "a": 1}], prompt=prompt)
        assert out.code == 2 and "ctx is null, which the template would show" in out.err, (
            prompt,
            out.err,
        )
    out = _run(tmp_path, [{"id": "a", "q": "x", "ctx": float("nan"), "a": 1}], prompt="{{ ctx }}")
    assert (
        out.code == 2 and "ctx is NaN, which the template would show as the text 'nan'" in out.err
    )


def test_templates_that_handle_a_null_render_it_as_they_say(tmp_path: Path) -> None:
    """``default`` (which in Jinja2 replaced only a missing field, so ``None |
    default('')`` showed "None"), ``{% if %}``, ``is none`` and ``tojson`` all work on a
    null field; a field holding text keeps its text."""
    prompt = (
        "[{{ ctx | default('') }}|{{ ctx | d('n/a') }}|{% if ctx %}has{% else %}none{% endif %}|"
        "{{ ctx is none }}|{{ ctx | tojson }}|{{ ctx or 'x' }}]"
    )
    rows = [{"id": "a", "q": "", "ctx": None, "a": 1}, {"id": "b", "q": "", "ctx": "m", "a": 1}]
    out = _run(tmp_path, rows, prompt=prompt, scorer={"type": "regex", "pattern": "."})
    assert out.code == 0, out.err
    assert [r["prompt"] for r in _rows(out)] == [
        "[|n/a|none|True|null|x]",
        '[m|m|has|False|"m"|m]',
    ]


def test_an_empty_target_is_refused_when_the_scorer_compares_it(tmp_path: Path) -> None:
    """An empty answer cell (``""``) was scored: exact gave 0 (mean 0.5 for 2 right
    answers), numeric a judge_error, exit 0. Now refused like a null target."""
    rows = [{"id": "a", "q": "4", "a": "4"}, {"id": "b", "q": "4", "a": ""}]
    for scorer in (
        {"type": "exact"},
        {"type": "numeric"},
        {"type": "regex", "pattern": "{{ target }}"},
    ):
        out = _run(tmp_path, rows, scorer=scorer)
        assert out.code == 2 and len(out.err_lines) == 1, (scorer, out.err)
        assert (
            "target: sample 'b' (line 2): the target is empty (a holds ''), and the scorer "
            "compares against it; fill in the target or drop the row"
        ) in out.err


def test_an_empty_target_is_kept_for_a_scorer_that_needs_none(tmp_path: Path) -> None:
    """A regex pattern that does not read the target scores such a row as before."""
    rows = [{"id": "a", "q": "4", "a": "4"}, {"id": "b", "q": "4", "a": " "}]
    out = _run(tmp_path, rows, scorer={"type": "regex", "pattern": "4"})
    assert out.code == 0, out.err
    assert [(r["target"], r["score"]) for r in _rows(out)] == [("4", 1.0), (" ", 1.0)]


def test_lists_and_dicts_show_as_json(tmp_path: Path) -> None:
    """A list or dict field showed Python's repr (``['a', 'b']``, ``{'ok': True}``);
    a prompt now shows JSON, non-ASCII as is, keys in the row's order; text and numbers
    are shown as before (their prompts keep their keys)."""
    rows = [
        {
            "id": "a",
            "q": "x",
            "l": ["a", "é", None, True],
            "d": {"z": 1, "ok": False},
            "n": 2.5,
            "a": 1,
        }
    ]
    out = _run(
        tmp_path,
        rows,
        prompt="{{ l }} {{ d }} {{ n }} {{ q }}",
        scorer={"type": "regex", "pattern": "."},
    )
    assert out.code == 0, out.err
    assert _rows(out)[0]["prompt"] == '["a", "é", null, true] {"z": 1, "ok": false} 2.5 x'


def test_a_judge_file_showing_a_null_is_refused_naming_it(tmp_path: Path) -> None:
    """A judge file reading ``{{ system }}`` in a spec without a system prompt showed the
    judge "System: None" for every row; now the run stops before any call, naming it."""
    (tmp_path / "judge.j2").write_text("System: {{ system }}\n{{ response }}\nScore: 1-10")
    judge = {"provider": "python", "name": "j", "function": "echo_app:answer"}
    out = _run(
        tmp_path,
        [{"id": "a", "q": "x", "a": 1}],
        scorer={"type": "judge", "file": "judge.j2", "model": judge},
    )
    assert out.code == 2 and len(out.err_lines) == 1, out.err
    assert "sample 'a': MissingValueShown: system is null, which the template would show" in out.err
