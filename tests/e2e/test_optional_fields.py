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


@pytest.mark.parametrize(
    ("prompt", "refusal"),
    [
        ("What is {{ q }}? {{ [a, hint] }}", "template uses hint but the first row has only"),
        ("What is {{ q }}? {{ {'a': a, 'hint': hint} }}", "template uses hint but the first row"),
        ("What is {{ q }}? {{ [hint] | pprint }}", "template uses hint but the first row has"),
        ("What is {{ q }}? {{ '%r' % hint }}", "template uses hint but the first row has only"),
    ],
)
def test_a_missing_field_shown_inside_a_list_or_dict_is_refused(
    tmp_path: Path, prompt: str, refusal: str
) -> None:
    """A list, dict or ``%r`` shows its items by their repr, and Jinja2's StrictUndefined
    has a harmless one: ``{{ [a, hint] }}`` on a row without ``hint`` sent the prompt
    "What is 1+1? [2, Undefined]" and the first-row check took the field for guarded.
    Shown this way a missing field is refused like any other, exit 2, before any call."""
    spec = _spec(tmp_path, prompt)
    out = run_cli("run", str(spec), "--no-cache", "--results-root", str(tmp_path / "r"))
    assert out.code == 2, out.out
    assert refusal in out.err and len(out.err.strip().splitlines()) == 1, out.err
    assert not (tmp_path / "r").exists()


def test_a_missing_field_in_a_later_row_shown_inside_a_list_names_the_sample(
    tmp_path: Path,
) -> None:
    """The first row has the field, the second lacks it: the run stops naming the sample."""
    rows = [ROWS[1], {**ROWS[0], "id": "q3"}]
    spec = write_eval(tmp_path, rows, name="optional", prompt="{{ q }} {{ [a, hint] }}")
    out = run_cli("run", str(spec), "--no-cache", "--results-root", str(tmp_path / "r"))
    assert out.code == 2, out.out
    assert "sample 'q3' (line 2): 'hint' is undefined" in out.err, out.err
    assert not (tmp_path / "r").exists()


def test_a_missing_field_inside_tojson_is_refused_as_missing(tmp_path: Path) -> None:
    """``{{ [a, hint] | tojson }}`` on rows without ``hint`` passed the first-row check
    (the render failed, but not as an undefined name) and then stopped on the first row
    with "TypeError: Object of type StrictUndefined is not JSON serializable", naming no
    field. It is refused as the missing field it is."""
    spec = _spec(tmp_path, "What is {{ q }}? {{ [a, hint] | tojson }}")
    out = run_cli("run", str(spec), "--no-cache", "--results-root", str(tmp_path / "r"))
    assert out.code == 2, out.out
    assert "template uses hint but the first row has only a, id, q" in out.err, out.err
    assert not (tmp_path / "r").exists()
    spec = _spec(tmp_path, "What is {{ q }}? {{ [hint | default('-')] | tojson }} = {{ a }}")
    out = run_cli("run", str(spec), "--no-cache", "--results-root", str(tmp_path / "r"))
    assert out.code == 0, out.err
    (run_dir,) = (tmp_path / "r").iterdir()
    prompts = [r["prompt"] for r in gradetrail.read_results(run_dir)]
    assert prompts == ['What is 1+1? ["-"] = 2', 'What is 2+2? ["double it"] = 4']
