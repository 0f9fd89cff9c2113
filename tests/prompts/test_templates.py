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
    out = _run(tmp_path, table, "echo = {{ q }}")
    assert out.code == 0, out.err
    manifest = json.loads(out.out)
    rows = (Path(manifest["run_dir"]) / "results.jsonl").read_text().splitlines()
    assert [json.loads(r)["target"] for r in rows] == ["18", "3", "0.5"]
    assert manifest["score"]["mean"] == 1.0


def _run(
    tmp_path: Path,
    table: pa.Table,
    prompt: str,
    *,
    module: str = "float_app",
    app: str = APP,
    scorer: str = "exact",
):
    """``gradetrail run --json`` of a spec over ``table`` (written as Parquet), answered
    by ``app`` (saved as ``module``.py) and scored by ``scorer``."""
    pq.write_table(table, tmp_path / "data.parquet")
    (tmp_path / f"{module}.py").write_text(app)
    spec = {
        "name": "parquet",
        "dataset": {"path": "data.parquet"},
        "prompt": prompt,
        "target": "{{ a }}",
        "model": {"provider": "python", "name": "app", "function": f"{module}:answer"},
        "scorer": {"type": scorer},
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    return run_cli(
        "run", str(tmp_path / "spec.yaml"), "--no-cache", "--json",
        "--results-root", str(tmp_path / "results"),
    )  # fmt: skip


def test_a_parquet_column_of_unannotated_text_shows_as_text(tmp_path: Path) -> None:
    """Text stored as plain bytes (Parquet BYTE_ARRAY without the string annotation, as
    older Hive and Impala write) reads as bytes: the prompt was ``b'What is 2+2?' =
    b'4'`` and the target ``b'4'``, every answer scored 0. Bytes holding UTF-8 now show
    as their text, in the prompt and the target."""
    table = pa.table(
        {"q": pa.array([b"What is 2+2?", "caf\u00e9 = 3".encode()]), "a": pa.array([b"4", b"3"])}
    )
    out = _run(tmp_path, table, "{{ q }} = {{ a }}")
    assert out.code == 0, out.err
    manifest = json.loads(out.out)
    rows = [json.loads(r) for r in (Path(manifest["run_dir"]) / "results.jsonl").open()]
    assert [(r["prompt"], r["target"]) for r in rows] == [
        ("What is 2+2? = 4", "4"),
        ("caf\u00e9 = 3 = 3", "3"),
    ]
    assert manifest["score"]["mean"] == 1.0


def test_binary_data_in_a_prompt_is_refused(tmp_path: Path) -> None:
    """Bytes that are not UTF-8 (an image) are not shown as ``b'\\x89PNG...'``: one line
    naming the sample, exit 2, before any call."""
    table = pa.table({"q": pa.array([b"\x89PNG\r\n\x1a\n"]), "a": ["4"]})
    out = _run(tmp_path, table, "Look: {{ q }} = {{ a }}")
    assert out.code == 2 and len(out.err_lines) == 1, out.err
    assert "prompt: sample '1' (line 1): TypeError: the template shows 8 bytes of binary" in out.err
    assert not (tmp_path / "results").exists()


def test_a_float_answer_index_scores_with_the_choice_scorer(tmp_path: Path) -> None:
    """An answer index stored as a float (1.0: pandas, with a gap in the column) rendered
    the target "1.0", which the choice scorer cannot read as an index: the row was a
    judge_error, left out of the mean. It is now the index 1, scored."""
    table = pa.table({"q": ["x", "y"], "a": [1.0, 2.0], "choices": [["a", "b", "c"]] * 2})
    letter_app = "def answer(request):\n    return 'B'\n"
    prompt = "{{ q }}\n{{ choices | lettered }}"
    out = _run(tmp_path, table, prompt, module="letter_app", app=letter_app, scorer="choice")
    assert out.code == 0, out.err
    manifest = json.loads(out.out)
    assert manifest["counts"] == {"scored": 2}
    assert manifest["score"]["mean"] == 0.5  # B is choice 1: right for x, wrong for y


class PngImageFile:
    """Stands for a decoded image (a Hugging Face Image column gives PIL images), whose
    text is Python's default repr: ``<...PngImageFile object at 0x7f...>``."""


def test_a_value_without_text_of_its_own_is_refused() -> None:
    """An image or audio object showed its default repr, a memory address that changed
    every run (a new request key each time); shown alone or inside a list, it is now
    refused, naming its type. Values with a text of their own (a date) keep it."""
    import datetime

    for source in ("{{ img }}", "Look: {{ img }}", "{{ [img] }}", "{{ {'a': img} }}"):
        with pytest.raises(
            TypeError,
            match="shows a tests.prompts.test_templates.PngImageFile value, which has no text",
        ):
            compile_template(source, "p").render({"img": PngImageFile()})
    day = datetime.date(2024, 5, 1)
    assert (
        compile_template("{{ d }} {{ [d] }}", "p").render({"d": day}) == '2024-05-01 ["2024-05-01"]'
    )


def test_a_nan_target_is_a_missing_value() -> None:
    """A NaN is never the text 'nan' in a target (nor a prompt)."""
    from gradetrail.prompts.templates import MissingValueShown

    for target in (True, False):
        with pytest.raises(MissingValueShown, match="a is NaN"):
            compile_template("{{ a }}", "t", target=target).render({"a": float("nan")})
        with pytest.raises(MissingValueShown, match="a is null"):
            compile_template("{{ a | trim }}", "t", target=target).render({"a": None})


def test_truncate_and_wordwrap_filters_work() -> None:
    """The width-checking wrapper dropped Jinja2's pass_environment, so ``truncate`` and
    ``wordwrap`` failed on every row ('str' object has no attribute 'policies')."""
    text = compile_template("{{ q | truncate(9) }}|{{ q | wordwrap(5) }}", "p").render(
        {"q": "hello world and more"}
    )
    assert text == "hello...|hello\nworld\nand\nmore"
