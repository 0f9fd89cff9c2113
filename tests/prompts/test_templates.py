"""Prompt and target templates: what a value renders to."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from cli_support import run_cli

from gradetrail.prompts.templates import compile_template, target_text

APP = """\
def answer(request):
    return request.prompt.rsplit("=", 1)[1].strip()
"""


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (18.0, "18"),
        (-3.0, "-3"),
        (0.0, "0"),
        (18.5, "18.5"),
        (1e15, "1000000000000000"),
        (1e16, "1e+16"),  # where str() writes an exponent: kept as it is
        (float("nan"), "nan"),
        (18, "18"),
        ("18.0", "18.0"),  # text is the dataset's own spelling
        (True, "True"),
    ],
)
def test_a_target_shows_a_whole_float_as_an_integer(value: object, text: str) -> None:
    """A whole-number float is written as that integer, everything else as ``str``."""
    assert target_text(value) == text
    assert compile_template("{{ a }}", "t", target=True).render({"a": value}) == text
    jinja = compile_template("{{ a if a is not none else 0 }}", "t", target=True)
    assert jinja.render({"a": value}) == text  # the Jinja2 path, not only the plain one


def test_a_prompt_keeps_the_value_as_python_shows_it() -> None:
    """Only targets change: a prompt shows the row's 18.0 as 18.0 (its text is keyed)."""
    assert compile_template("{{ a }}", "p").render({"a": 18.0}) == "18.0"


def test_whole_number_answers_from_a_float_column_score_as_numbers(tmp_path: Path) -> None:
    """A Parquet answer column of floats (pandas writes whole numbers so once a value in
    the column is missing) rendered targets "18.0", "3.0": the exact scorer gave a correct
    "18" zero (mean 0.33 for three right answers). Now each target is its integer, and
    the mean is 1.0."""
    table = pa.table({"id": ["a", "b", "c"], "q": ["18", "3", "0.5"], "a": [18.0, 3.0, 0.5]})
    pq.write_table(table, tmp_path / "data.parquet")
    (tmp_path / "float_app.py").write_text(APP)
    spec = {
        "name": "floats",
        "dataset": {"path": "data.parquet"},
        "prompt": "echo = {{ q }}",
        "target": "{{ a }}",
        "model": {"provider": "python", "name": "app", "function": "float_app:answer"},
        "scorer": {"type": "exact"},
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    out = run_cli(
        "run", str(tmp_path / "spec.yaml"), "--no-cache", "--json",
        "--results-root", str(tmp_path / "results"),
    )  # fmt: skip
    assert out.code == 0, out.err
    manifest = json.loads(out.out)
    rows = (Path(manifest["run_dir"]) / "results.jsonl").read_text().splitlines()
    assert [json.loads(r)["target"] for r in rows] == ["18", "3", "0.5"]
    assert manifest["score"]["mean"] == 1.0
