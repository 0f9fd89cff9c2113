"""A template may read a field only some rows have, under ``is defined`` or through
``default``: the first row's check lets it through, and each row renders as Jinja2 says;
a field read unguarded that the first row lacks is still refused before any call."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_support import run_cli, write_eval

import gradetrail

ROWS = [
    {"id": "q1", "q": "1+1", "a": 2},
    {"id": "q2", "q": "2+2", "a": 4, "hint": "double it"},
]


def _spec(tmp_path: Path, prompt: str) -> Path:
    return write_eval(tmp_path, ROWS, name="optional", prompt=prompt)


@pytest.mark.parametrize(
    ("prompt", "first", "second"),
    [
        (
            "What is {{ q }}?{% if hint is defined %} Hint: {{ hint }}.{% endif %} = {{ a }}",
            "What is 1+1? = 2",
            "What is 2+2? Hint: double it. = 4",
        ),
        (
            "What is {{ q }}? ({{ hint | default('no hint') }}) = {{ a }}",
            "What is 1+1? (no hint) = 2",
            "What is 2+2? (double it) = 4",
        ),
    ],
)
def test_a_field_only_some_rows_have_may_be_read_guarded(
    tmp_path: Path, prompt: str, first: str, second: str
) -> None:
    spec = _spec(tmp_path, prompt)
    out = run_cli("run", str(spec), "--no-cache", "--results-root", str(tmp_path / "r"))
    assert out.code == 0, out.err
    (run_dir,) = (tmp_path / "r").iterdir()
    rows = {r["sample_id"]: r for r in gradetrail.read_results(run_dir)}
    assert (rows["q1"]["prompt"], rows["q2"]["prompt"]) == (first, second)
    assert [rows[k]["score"] for k in ("q1", "q2")] == [1.0, 1.0]


def test_a_field_read_unguarded_that_the_first_row_lacks_is_refused(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "What is {{ q }}? {{ hint }} = {{ a }}")
    out = run_cli("run", str(spec), "--no-cache", "--results-root", str(tmp_path / "r"))
    assert out.code == 2
    assert "template uses hint but the first row has only a, id, q" in out.err
    assert not (tmp_path / "r").exists()
