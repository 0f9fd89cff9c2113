"""Dataset formats beyond JSONL: JSON arrays, CSV/TSV, Parquet; field renaming; the same
ids for the same data in every format; one-line errors naming file, format, row, column."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gradetrail.datasets import load_samples
from gradetrail.errors import DatasetError, SpecError
from gradetrail.spec import parse_spec

ROWS = [{"question": f"q{i}", "answer": str(i * 2), "n": i} for i in range(1, 8)]


def _csv(path: Path, rows: list[dict], delimiter: str = ",") -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, list(rows[0]), delimiter=delimiter)
        writer.writeheader()
        writer.writerows(rows)
    return path


def _each_format(tmp_path: Path, rows: list[dict]) -> dict[str, Path]:
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "d.json").write_text(json.dumps(rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    return {
        "jsonl": tmp_path / "d.jsonl",
        "json": tmp_path / "d.json",
        "csv": _csv(tmp_path / "d.csv", rows),
        "tsv": _csv(tmp_path / "d.tsv", rows, "\t"),
        "parquet": tmp_path / "d.parquet",
    }


def test_every_format_gives_the_same_ids_before_shuffle_and_limit(tmp_path: Path) -> None:
    """Without an id field, the 1-based position is the id in every format; shuffle and
    limit pick the same samples with the same ids whatever the format."""
    paths = _each_format(tmp_path, ROWS)
    for fmt, path in paths.items():
        samples = load_samples(path)
        assert samples.ids == [str(i) for i in range(1, 8)], fmt
        assert samples.info == {"format": fmt}
        picked = load_samples(path, shuffle_seed=5, limit=3)
        assert [(s.id, s.row["question"]) for s in picked] == [
            (s.id, s.row["question"]) for s in load_samples(paths["jsonl"], shuffle_seed=5, limit=3)
        ], fmt


def test_csv_values_stay_strings_unless_typed(tmp_path: Path) -> None:
    """CSV cells are strings; types: converts declared columns (an empty cell is null)."""
    path = tmp_path / "d.csv"
    path.write_text('id,a,b,ok,meta\nx,1,2.5,yes,"{""k"": [1]}"\ny,,3,0,null\n')
    rows = [s.row for s in load_samples(path)]
    assert rows[0] == {"id": "x", "a": "1", "b": "2.5", "ok": "yes", "meta": '{"k": [1]}'}
    typed = load_samples(path, types={"a": "int", "b": "float", "ok": "bool", "meta": "json"})
    assert [s.id for s in typed] == ["x", "y"]
    assert typed[0].row == {"id": "x", "a": 1, "b": 2.5, "ok": True, "meta": {"k": [1]}}
    assert typed[1].row == {"id": "y", "a": None, "b": 3.0, "ok": False, "meta": None}


@pytest.mark.parametrize(("kind", "cell"), [("int", "1_000"), ("float", "1_000.5")])
def test_a_typed_cell_with_an_underscore_is_not_a_number(
    tmp_path: Path, kind: str, cell: str
) -> None:
    """Python reads '1_000' and '1_000.5' as numbers; a spreadsheet's number never holds
    an underscore. An int column refused it, a float column read '1_000.5' as 1000.5:
    both now refuse it, naming the cell."""
    path = tmp_path / "d.csv"
    path.write_text(f"q,a\nx,{cell}\n")
    article = "an" if kind == "int" else "a"
    with pytest.raises(DatasetError) as err:
        load_samples(path, types={"a": kind})
    assert str(err.value) == (
        f"{path}:2: CSV row 1, column 'a': {cell!r} is not {article} {kind} "
        f"(dataset.types.a); fix the value or the declared type"
    )


@pytest.mark.parametrize(
    ("kind", "cell"),
    [("int", "\u0665"), ("int", "1\u0665"), ("float", "\uff12.5"), ("int", "\u096b")],
)
def test_a_typed_cell_with_digits_other_than_ascii_is_not_a_number(
    tmp_path: Path, kind: str, cell: str
) -> None:
    """Python's int() reads any script's digits: the Arabic-Indic five was 5, '1' then
    that five 15, a full-width 2.5 a float. A declared number column now takes ASCII
    digits only (as JSON and Parquet write them), naming the cell and why."""
    path = tmp_path / "d.csv"
    path.write_text(f"q,a\nx,{cell}\n", encoding="utf-8")
    article = "an" if kind == "int" else "a"
    with pytest.raises(DatasetError) as err:
        load_samples(path, types={"a": kind})
    assert str(err.value) == (
        f"{path}:2: CSV row 1, column 'a': {cell!r} is not {article} {kind} "
        "(dataset.types.a): its digits are not the ASCII 0-9 a number is written with; fix "
        "the value or the declared type"
    )
    assert load_samples(path, types={"a": "str"})[0].row["a"] == cell  # text stays text


def test_csv_quoted_newlines_blank_lines_and_bom(tmp_path: Path) -> None:
    """A quoted value may span lines; blank lines are skipped and not counted as rows; a
    UTF-8 byte-order mark is not part of the first column's name; errors name the line
    the record starts on."""
    path = tmp_path / "d.csv"
    path.write_bytes('\ufeffq,a\n"two\nlines",1\n\n"x",2\n"y",3,extra\n'.encode())
    with pytest.raises(DatasetError) as err:
        load_samples(path)
    assert str(err.value).startswith(f"{path}:6: CSV row 3 has 3 values but the header has 2")
    path.write_bytes('\ufeffq,a\n"two\nlines",1\n\n"x",2\n'.encode())
    samples = load_samples(path)
    assert samples.ids == ["1", "2"]
    assert samples[0].row == {"q": "two\nlines", "a": "1"} and samples[1].line == 5


@pytest.mark.parametrize(
    ("name", "text", "sep"),
    [
        ("d.csv", "q;a\nx;1\n", ";"),  # Excel's CSV where the decimal mark is a comma
        ("d.csv", "q|a\nx|1\n", "|"),
        ("d.tsv", "q,a\nx,1\n", ","),  # a CSV saved as .tsv
        # quoted: the csv module refused it as bad quoting ("',' expected after '\"'")
        ("d.csv", '"question";"answer"\n"1,5 + 1";"2,5"\n', ";"),
        ("d.tsv", '"q","a"\n"x","1"\n', ","),
    ],
)
def test_a_header_split_by_another_separator_is_named(
    tmp_path: Path, name: str, text: str, sep: str
) -> None:
    """A header of one column whose name holds another separator (``q;a``) means the file
    is split by that separator, which the reader does not split on: every row was one
    value, and the run was refused with "template uses a, q but the first row has only
    q;a". It is now refused where the file is read, saying what to do."""
    path = tmp_path / name
    path.write_text(text)
    fmt = name.rsplit(".", 1)[1].upper()
    delimiter = "a comma" if fmt == "CSV" else "a tab"
    with pytest.raises(DatasetError) as err:
        load_samples(path)
    assert str(err.value) == (
        f"{path}:1: {fmt} header is one column, {text.split(chr(10))[0]!r}: the file separates "
        f"its values with {sep!r}, and {fmt} values are separated by {delimiter}; save it "
        "with that separator"
    )
    path.write_text("question\nx\n")  # one column without a separator is a dataset
    assert load_samples(path)[0].row == {"question": "x"}


@pytest.mark.parametrize(("fmt", "sep"), [("csv", ","), ("tsv", "\t")])
def test_a_value_that_opens_with_a_quote_it_does_not_close_says_how_to_quote(
    tmp_path: Path, fmt: str, sep: str
) -> None:
    """A TSV (or CSV) value written as text, '"Hello" she said', opens a quoted value
    that ends early: the refusal named only the csv module's complaint ("'\t' expected
    after '"'"); it now says how to write such a value."""
    path = tmp_path / f"d.{fmt}"
    path.write_text(f'q{sep}a\nx{sep}1\n"Hello" she said{sep}2\n')
    with pytest.raises(DatasetError) as err:
        load_samples(path)
    name = fmt.upper()
    assert str(err.value) == (
        f"{path}:3: malformed {name} ('{sep}' expected after '\"'); a value holding a quote "
        'must be quoted whole, its own quotes doubled ("say ""hi"" twice")'
    )


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
def test_csv_value_longer_than_the_csv_modules_default_limit(tmp_path: Path, fmt: str) -> None:
    """A long document in one cell (a long-context passage: 300,000 characters, past the
    ``csv`` module's default field limit of 131,072) is read whole, as JSONL and Parquet
    read it, not refused as malformed."""
    passage = "word " * 60_000
    path = _csv(tmp_path / f"d.{fmt}", [{"q": passage, "a": "1"}, {"q": "x", "a": "2"}],
                "\t" if fmt == "tsv" else ",")  # fmt: skip
    samples = load_samples(path)
    assert samples.ids == ["1", "2"]
    assert samples[0].row == {"q": passage, "a": "1"} and len(samples[0].row["q"]) == 300_000


@pytest.mark.parametrize(
    ("text", "options", "message"),
    [
        ("a,b\n1\n", {}, r"d.csv:2: CSV row 1 has 1 values but the header has 2 columns"),
        ("a,a\n1,2\n", {}, r"d.csv:1: CSV header names column 'a' twice"),
        ("a,\n1,2\n", {}, r"d.csv:1: CSV header column 2 has no name"),
        ("a,b\n1,x\n", {"types": {"b": "int"}}, r"d.csv:2: CSV row 1, column 'b': 'x' is not an"),
        ("a,b\n1,2\n", {"types": {"c": "int"}}, r"d.csv: CSV has no column 'c' \(dataset.types\)"),
        ('a,b\n"1,2\n', {}, r"d.csv:\d+: malformed CSV"),
        ("", {}, r"d.csv: the dataset has no rows"),
    ],
)
def test_csv_errors_name_file_format_row_and_column(
    tmp_path: Path, text: str, options: dict, message: str
) -> None:
    """Each unreadable CSV is one line naming the file, the line, the row or column."""
    path = tmp_path / "d.csv"
    path.write_text(text)
    with pytest.raises(DatasetError, match=message) as err:
        load_samples(path, **options)
    assert "\n" not in str(err.value)


def test_tsv_and_explicit_format(tmp_path: Path) -> None:
    """TSV splits on tabs (commas are data); dataset.format reads a file whatever its
    extension."""
    path = tmp_path / "data.txt"
    path.write_text("q\ta\nx, y\t1\n")
    samples = load_samples(path, format="tsv")
    assert samples[0].row == {"q": "x, y", "a": "1"} and samples.info == {"format": "tsv"}


def test_json_array_errors(tmp_path: Path) -> None:
    """A .json dataset is one array of objects; anything else says so."""
    path = tmp_path / "d.json"
    path.write_text('{"a": 1}')
    with pytest.raises(DatasetError, match=r"d.json: a JSON dataset must be an array"):
        load_samples(path)
    path.write_text('[{"a": 1}, 3]')
    with pytest.raises(DatasetError, match=r"d.json: JSON item 2 is a int"):
        load_samples(path)
    path.write_text('[{"a": 1},\n{"a": ]')
    with pytest.raises(DatasetError, match=r"d.json:2: not valid JSON"):
        load_samples(path)


def test_parquet_keeps_types_and_reads_many_batches(tmp_path: Path) -> None:
    """Parquet values keep their types (ints, lists, structs); ids run on across record
    batches; an id column is used when present."""
    n = 10_000  # more than one record batch
    table = pa.table(
        {
            "uid": [f"u{i}" for i in range(n)],
            "x": list(range(n)),
            "tags": [[i, i + 1] for i in range(n)],
            "meta": [{"k": str(i)} for i in range(n)],
        }
    )
    pq.write_table(table, tmp_path / "d.parquet", row_group_size=3000)
    samples = load_samples(tmp_path / "d.parquet", id_field="uid")
    assert len(samples) == n and samples.ids[4095:4098] == ["u4095", "u4096", "u4097"]
    assert samples[9999].row == {
        "uid": "u9999",
        "x": 9999,
        "tags": [9999, 10000],
        "meta": {"k": "9999"},
    }
    assert load_samples(tmp_path / "d.parquet")[9999].id == "10000"


def test_a_parquet_column_name_used_twice_is_refused_as_in_csv(tmp_path: Path) -> None:
    """pyarrow writes two columns named 'a' (answers 2 and 3); the row read back held only
    the second, so the first column's values were never seen and the target was 3. The
    file is refused, naming the column, as a CSV header naming a column twice is."""
    table = pa.Table.from_arrays(
        [pa.array(["1+1"]), pa.array([2]), pa.array([3])], names=["q", "a", "a"]
    )
    pq.write_table(table, tmp_path / "d.parquet")
    with pytest.raises(DatasetError) as err:
        load_samples(tmp_path / "d.parquet")
    assert str(err.value) == (
        f"{tmp_path / 'd.parquet'}: Parquet has two columns named 'a'; name each column once"
    )


def test_parquet_errors(tmp_path: Path) -> None:
    """A file that is not Parquet, and a duplicate id, are one line naming the row."""
    path = tmp_path / "d.parquet"
    path.write_text("question,answer\nq,1\n")
    with pytest.raises(DatasetError, match=r"d.parquet: not a Parquet file \(Parquet magic"):
        load_samples(path)
    pq.write_table(pa.table({"id": [1, 2, 1]}), path)
    with pytest.raises(DatasetError, match=r"d.parquet: row 3: duplicate sample id '1'"):
        load_samples(path)


def test_fields_rename_columns_for_every_format(tmp_path: Path) -> None:
    """fields: {template name: column} renames; id_field and cluster_field name the
    renamed row; other columns keep their names."""
    rows = [{"qid": f"k{i}", "problem": f"p{i}", "solution": str(i), "g": i % 2} for i in range(4)]
    for fmt, path in _each_format(tmp_path, rows).items():
        samples = load_samples(
            path,
            fields={"question": "problem", "answer": "solution", "id": "qid"},
            cluster_field="g",
        )
        assert samples.ids == ["k0", "k1", "k2", "k3"], fmt
        assert samples[1].row["question"] == "p1" and "problem" not in samples[1].row
        assert samples[1].cluster == "1" and samples[1].row["g"] in (1, "1")


def test_fields_errors(tmp_path: Path) -> None:
    """A renamed column the row lacks, or a new name that collides, names row and column."""
    paths = _each_format(tmp_path, ROWS)
    with pytest.raises(DatasetError, match=r"d.csv:2: CSV row 1 has no column 'problem' \(dataset"):
        load_samples(paths["csv"], fields={"q": "problem"})
    with pytest.raises(DatasetError, match=r"d.parquet: Parquet row 1 has no column 'problem'"):
        load_samples(paths["parquet"], fields={"q": "problem"})
    with pytest.raises(DatasetError, match=r"already has a column 'question'"):
        load_samples(paths["jsonl"], fields={"question": "answer"})
    swapped = load_samples(paths["json"], fields={"question": "answer", "answer": "question"})
    assert swapped[0].row["question"] == "2" and swapped[0].row["answer"] == "q1"


@pytest.mark.parametrize(
    ("dataset", "message"),
    [
        ({"path": "d.txt"}, "cannot tell the format of 'd.txt'"),
        (
            {"path": "d.jsonl.gz"},
            r"'d.jsonl.gz' is compressed \(.gz\), which gradetrail does not read; decompress it",
        ),
        ({"path": "d.jsonl", "hf": {"path": "x/y"}}, "either dataset.path"),
        ({}, "either dataset.path"),
        ({"path": "d.parquet", "types": {"a": "int"}}, "types applies to CSV and TSV"),
        ({"path": "d.csv", "types": {"a": "date"}}, "dataset.types.a"),
        ({"hf": {"path": "x/y"}, "format": "csv"}, "format applies to dataset.path"),
    ],
)
def test_dataset_spec_errors(dataset: dict, message: str) -> None:
    """The dataset section refuses ambiguous or unreadable sources before any file is read."""
    raw = {
        "name": "t",
        "dataset": dataset,
        "prompt": "x",
        "model": {"provider": "python", "name": "m", "function": "a:b"},
        "scorer": {"type": "exact"},
    }
    with pytest.raises(SpecError, match=message):
        parse_spec(raw, source="s.yaml")


def test_gsm8k_scores_the_same_in_csv_and_parquet(gsm8k_copy: Path, tmp_path: Path, cli) -> None:
    """The GSM8K example converted to CSV and Parquet scores exactly 0.5625 for
    175b_verification, with the JSONL run's sample ids."""
    from gradetrail import load_spec, read_results, run_eval

    data = gsm8k_copy.parent / "data" / "gsm8k"
    rows = [json.loads(line) for line in (data / "test.jsonl").read_text().splitlines()]
    _csv(data / "test.csv", rows)
    pq.write_table(pa.Table.from_pylist(rows), data / "test.parquet")
    ids = None
    for name in ("test.jsonl", "test.csv", "test.parquet"):
        spec = load_spec(gsm8k_copy, [f"dataset.path=data/gsm8k/{name}"])
        result = run_eval(spec, results_root=tmp_path / "results")
        assert result.manifest.score.mean == pytest.approx(742 / 1319)
        assert round(result.manifest.score.mean, 4) == 0.5625
        run_ids = [r["sample_id"] for r in read_results(result.run_dir)]
        assert run_ids == (ids or run_ids) and len(run_ids) == 1319
        ids = run_ids


def test_csv_error_is_one_line_with_exit_2(tmp_path: Path, cli) -> None:
    """A ragged CSV row stops the run before any call: one error line, exit 2."""
    (tmp_path / "d.csv").write_text("q,a\nx,1\ny,2,3\n")
    (tmp_path / "s.yaml").write_text(
        "name: t\ndataset: {path: d.csv}\nprompt: '{{ q }}'\ntarget: '{{ a }}'\n"
        "model: {provider: python, name: m, function: 'x:y'}\nscorer: {type: exact}\n"
    )
    out = cli("run", str(tmp_path / "s.yaml"))
    assert out.exit_code == 2
    assert out.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'd.csv'}:3: CSV row 2 has 3 values but the header has 2 columns; "
        "quote values that hold a comma"
    ]
    assert not (tmp_path / "results").exists()


def test_a_csv_header_with_spaces_after_its_commas_is_named_plainly(tmp_path: Path, cli) -> None:
    """``q, a`` (a space after the comma, as hand-written CSV often has) names the columns
    'q' and ' a': the refusal used to read "template uses a but the first row has only
    a, q", as if 'a' were there. It now shows the name as it is and says what to fix."""
    (tmp_path / "d.csv").write_text("q, a\nx, 1\n")
    (tmp_path / "spaced_app.py").write_text("def answer(request):\n    return 'x'\n")
    (tmp_path / "s.yaml").write_text(
        "name: t\ndataset: {path: d.csv}\nprompt: '{{ q }}'\ntarget: '{{ a }}'\n"
        "model: {provider: python, name: m, function: 'spaced_app:answer'}\n"
        "scorer: {type: exact}\n"
    )
    out = cli("run", str(tmp_path / "s.yaml"))
    assert out.exit_code == 2
    assert out.stderr.strip().splitlines() == [
        f"error: {tmp_path / 's.yaml'}: target: template uses a but the first row has only "
        "' a', q; the dataset's column ' a' has spaces around its name: remove them, or fix "
        "the template"
    ]
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    ("prompt", "uses"),
    [("{{ question-text }}", "question, text"), ("{{ question_text }}", "question_text")],
)
def test_a_column_no_template_can_name_is_given_its_rename(
    tmp_path: Path, cli, prompt: str, uses: str
) -> None:
    """A column named ``question-text`` cannot be read by a template (``{{ question-text
    }}`` reads question minus text); the refusal said "did you mean question ->
    question-text?", a name no template can write. It now gives the ``dataset.fields``
    rename that works."""
    (tmp_path / "d.csv").write_text("question-text,a\nx,1\n")
    (tmp_path / "dash_app.py").write_text("def answer(request):\n    return 'x'\n")
    (tmp_path / "s.yaml").write_text(
        f"name: t\ndataset: {{path: d.csv}}\nprompt: '{prompt}'\ntarget: '{{{{ a }}}}'\n"
        "model: {provider: python, name: m, function: 'dash_app:answer'}\n"
        "scorer: {type: exact}\n"
    )
    out = cli("run", str(tmp_path / "s.yaml"))
    assert out.exit_code == 2
    assert out.stderr.strip().splitlines() == [
        f"error: {tmp_path / 's.yaml'}: prompt: template uses {uses} but the first row has "
        "only a, question-text; a template cannot name the column 'question-text'; rename "
        "it for templates with dataset.fields: {question_text: 'question-text'}, and use "
        "{{ question_text }}"
    ]
    renamed = (
        (tmp_path / "s.yaml")
        .read_text()
        .replace("{path: d.csv}", "{path: d.csv, fields: {question_text: question-text}}")
    )
    (tmp_path / "s.yaml").write_text(renamed.replace(prompt, "{{ question_text }}"))
    assert cli("run", str(tmp_path / "s.yaml")).exit_code == 0


@pytest.mark.parametrize(("fmt", "module"), [("jsonl", "gzip"), ("csv", "bz2"), ("json", "lzma")])
def test_a_compressed_file_is_named_so(tmp_path: Path, fmt: str, module: str) -> None:
    """A compressed dataset (``d.jsonl.gz`` with ``dataset.format: jsonl``, or one renamed
    to ``.csv``) is refused as compressed, with the fix, not as text that is not UTF-8 (the
    JSONL reader said "not valid JSON ('utf-8' codec can't decode byte 0x8b ...)")."""
    import importlib

    text = _each_format(tmp_path, ROWS)[fmt].read_bytes()
    path = tmp_path / f"packed.{fmt}"
    path.write_bytes(importlib.import_module(module).compress(text))
    kind = {"gzip": "gzip", "bz2": "bzip2", "lzma": "xz"}[module]
    with pytest.raises(DatasetError, match=rf"packed.{fmt} is {kind}-compressed; decompress it"):
        load_samples(path)
    with pytest.raises(DatasetError, match=rf"is {kind}-compressed"):
        load_samples(path, format=fmt)


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("d.csv", {}, r"d.csv:2002 \(byte 0xe9 at column 4; likely Windows-1252 or Latin-1\): "),
        ("d.tsv", {}, r"d.tsv:2002 \(byte 0xe9 at column 4; .*\): TSV file is not UTF-8 text"),
        ("d.json", {}, r"d.json:2002 \(byte 0xe9 at column 11; .*\): JSON file is not UTF-8"),
        ("d.jsonl", {}, r"d.jsonl:2002: JSONL file is not UTF-8 text \(byte 0xe9 at column 11;"),
    ],
)
def test_a_file_not_utf8_names_the_line_of_its_first_bad_byte(
    tmp_path: Path, name: str, options: dict, message: str
) -> None:
    """A Windows-1252 'café' on line 2,002 (Excel's plain CSV export writes such bytes):
    the CSV error named line 1,843 (where the decoder's 8 KiB buffer began) and the JSON
    one no line; each now names line 2,002, the byte and its column."""
    sep = "\t" if name.endswith(".tsv") else ","
    if name.endswith(".jsonl"):
        lines = [b'{"q": "question %d", "a": "%d"}' % (i, i) for i in range(2001)]
        data = b"\n".join([*lines, b'{"q": "caf\xe9", "a": "1"}']) + b"\n"
    elif name.endswith(".json"):
        lines = [b'{"q": "question %d", "a": "%d"},' % (i, i) for i in range(2000)]
        data = b"\n".join([b"[", *lines, b'{"q": "caf\xe9", "a": "1"}]']) + b"\n"
    else:
        lines = [b"question %d%s%d" % (i, sep.encode(), i) for i in range(2000)]
        data = b"\n".join([b"q" + sep.encode() + b"a", *lines, b"caf\xe9" + sep.encode() + b"1"])
    path = tmp_path / name
    path.write_bytes(data + b"\n")
    with pytest.raises(DatasetError, match=message) as err:
        load_samples(path, **options)
    assert "\n" not in str(err.value)


def test_an_excel_unicode_text_export_is_named_utf16(tmp_path: Path) -> None:
    """Excel's "Unicode Text" export (UTF-16, tabs) is named as UTF-16 on line 1."""
    path = tmp_path / "d.tsv"
    path.write_bytes("q\ta\r\ncafé\t1\r\n".encode("utf-16"))
    with pytest.raises(DatasetError, match=r"d.tsv:1: TSV file is UTF-16 text; save it as UTF-8"):
        load_samples(path)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"q": "a"}\n\x00\x00\x00\x00\n', r"d.jsonl:2: the line holds NUL bytes"),  # crash
        ('{"q": "a"}\n'.encode("utf-16-le"), r"d.jsonl:1: the line holds NUL bytes \(UTF-16"),
    ],
    ids=["nul-padding", "utf16-without-bom"],
)
def test_a_jsonl_line_of_nul_bytes_says_so(tmp_path: Path, data: bytes, message: str) -> None:
    """A line starting with a NUL byte was read by ``json.loads``' encoding guess as
    UTF-16 and refused as a value going on past the end of its line (advice to use a
    .json file); it now says the line holds NUL bytes and what leaves them."""
    path = tmp_path / "d.jsonl"
    path.write_bytes(data)
    with pytest.raises(DatasetError, match=message) as err:
        load_samples(path)
    assert "past the end of its line" not in str(err.value)


def test_a_jsonl_file_of_a_byte_order_mark_and_blank_lines_has_no_rows(tmp_path: Path) -> None:
    """A UTF-8 byte-order mark before blank lines is no row: an empty dataset (as without
    the mark), not 'not valid JSON'; rows after it keep their line numbers as ids."""
    path = tmp_path / "d.jsonl"
    path.write_bytes(b"\xef\xbb\xbf\n")
    with pytest.raises(DatasetError, match=r"d.jsonl: the dataset has no rows"):
        load_samples(path)
    path.write_bytes(b'\xef\xbb\xbf\r\n{"q": "a"}\r\n')
    assert [(s.id, s.row) for s in load_samples(path)] == [("2", {"q": "a"})]


def test_a_key_written_twice_in_a_row_is_refused(tmp_path: Path) -> None:
    """JSON readers keep a repeated key's last value and drop the other silently (a row
    ``{"answer": "4", ..., "answer": "5"}`` was scored against 5). A JSONL line or a JSON
    item naming a key twice, at any depth, is now refused naming the line (or item), the
    key and the value kept; colons inside text (``3:00``, an escaped ``\\u003a``) are not
    taken for keys."""
    path = tmp_path / "d.jsonl"
    path.write_text(
        '{"q": "at 3:00", "a": "x\\u003ay", "m": {"k": "a:b"}}\n'
        '{"q": "2+2", "answer": "4", "answer": "5"}\n'
    )
    with pytest.raises(DatasetError) as err:
        load_samples(path)
    assert str(err.value) == (
        f"{path}:2: an object names the key 'answer' twice (JSON readers keep the last "
        'value, "5", and drop the other silently); keep one'
    )
    path.write_text('{"q": "x", "m": {"k": 1, "k": 2}}\n')
    with pytest.raises(DatasetError, match=r"d.jsonl:1: an object names the key 'k' twice"):
        load_samples(path)
    path.write_text('{"q": "a:b", "a": "x\\u003ay"}\n')
    assert load_samples(path)[0].row == {"q": "a:b", "a": "x:y"}
    array = tmp_path / "d.json"
    array.write_text('[{"q": "1"}, {"q": "2", "x": [{"a": 1, "a": 2}]}]')
    with pytest.raises(DatasetError) as err:
        load_samples(array)
    assert str(err.value).startswith(f"{array}: JSON item 2: an object names the key 'a' twice")
