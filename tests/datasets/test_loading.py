"""Dataset loading: stable ids, shuffle, limit, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gradetrail.datasets import iter_jsonl, load_samples
from gradetrail.errors import DatasetError


def _write(path: Path, rows: list[dict], blank_after: int | None = None) -> Path:
    lines = [json.dumps(r) for r in rows]
    if blank_after is not None:
        lines.insert(blank_after, "")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_ids_default_to_line_numbers(tmp_path: Path) -> None:
    """Without an id field, the 1-based line number is the id (blank lines still count)."""
    path = _write(tmp_path / "d.jsonl", [{"q": "a"}, {"q": "b"}, {"q": "c"}], blank_after=1)
    assert [s.id for s in load_samples(path)] == ["1", "3", "4"]


def test_id_field_is_used_when_present(tmp_path: Path) -> None:
    """The id field's value, as a string, is the id."""
    path = _write(tmp_path / "d.jsonl", [{"uid": 7}, {"uid": "x"}])
    assert [s.id for s in load_samples(path, id_field="uid")] == ["7", "x"]


@pytest.mark.parametrize(
    ("rows", "options", "ids"),
    [
        ([{"q": "a"}, {"q": "b"}], {}, ["1", "2"]),  # the default id, absent: positions
        ([{"id": "x", "q": "a"}, {"q": "b"}], {}, ["x", "2"]),
        ([{"uid": "u1"}, {"q": "b"}], {"id_field": "uid"}, ["u1", "2"]),  # named, in row 1
        ([{"id": 5}, {"id": 6}], {"id_field": "id"}, ["5", "6"]),  # the default, named
        ([{"q": "a"}, {"q": "b"}], {"id_field": "id"}, ["1", "2"]),  # ...and absent
        ([{"key": "k1"}], {"id_field": "uid", "fields": {"uid": "key"}}, ["k1"]),  # renamed
    ],
)
def test_an_id_field_present_in_the_first_row_or_the_default_absent_loads(
    tmp_path: Path, rows: list[dict], options: dict, ids: list[str]
) -> None:
    """What must not change: the default ``id`` may be absent (positions), also when a
    spec names it (as one dumped with its defaults does), and another id field the first
    row has gives the ids (a later row without it, its position)."""
    path = _write(tmp_path / "d.jsonl", rows)
    assert [s.id for s in load_samples(path, **options)] == ids


@pytest.mark.parametrize(
    ("rows", "options", "message"),
    [
        ([{"id": "a", "q": "x"}], {"id_field": "nope"}, "no id field 'nope' (it has id, q)"),
        ([{"q": "x"}, {"qid": "b"}], {"id_field": "qid"}, "no id field 'qid' (it has q)"),
        ([{"uid": "u"}], {"id_field": "uid", "fields": {"k": "uid"}}, "(it has k)"),
        ([{}], {"id_field": "uid"}, "no id field 'uid' (it has (none))"),
    ],
)
def test_a_named_id_field_the_first_row_lacks_is_refused(
    tmp_path: Path, rows: list[dict], options: dict, message: str
) -> None:
    """A misspelled ``dataset.id_field`` would number every row by position: refused,
    naming the row, the field and the fields the row has."""
    path = _write(tmp_path / "d.jsonl", rows)
    with pytest.raises(DatasetError, match=r"d\.jsonl:1: the first row has no id field") as e:
        load_samples(path, **options)
    assert message in str(e.value) and "fix dataset.id_field" in str(e.value)


def test_a_named_id_field_is_checked_in_every_format(tmp_path: Path) -> None:
    """CSV reads through the same assigner: a typo there is refused too."""
    (tmp_path / "d.csv").write_text("id,q\na,x\n")
    assert [s.id for s in load_samples(tmp_path / "d.csv")] == ["a"]
    with pytest.raises(DatasetError, match=r"no id field 'ID' \(it has id, q\)"):
        load_samples(tmp_path / "d.csv", id_field="ID")


def test_replay_recordings_follow_the_same_id_rule(tmp_path: Path) -> None:
    """iter_jsonl (replay recordings): the default absent gives positions; a named field
    present gives its values; a named field the first row lacks is refused, naming the
    setting (``model.recordings.id_field``)."""
    path = _write(tmp_path / "r.jsonl", [{"qid": "a", "m": "x"}, {"m": "y"}])
    assert [i for i, _, _ in iter_jsonl(path, "id")] == ["1", "2"]
    named = "model.recordings.id_field"
    assert [i for i, _, _ in iter_jsonl(path, "qid", named)] == ["a", "2"]
    with pytest.raises(DatasetError, match=r"no id field 'uid' \(it has m, qid\); fix model\.rec"):
        list(iter_jsonl(path, "uid", named))


def test_ids_do_not_depend_on_seed_or_limit(tmp_path: Path) -> None:
    """Shuffle and limit reorder and cut samples but never change their ids."""
    rows = [{"q": str(i)} for i in range(50)]
    path = _write(tmp_path / "d.jsonl", rows)
    by_id = {s.id: s.row for s in load_samples(path)}
    shuffled = load_samples(path, shuffle_seed=3, limit=10)
    assert len(shuffled) == 10
    assert [s.index for s in shuffled] == list(range(10))
    assert [s.id for s in shuffled] != [str(i) for i in range(1, 11)]
    for s in shuffled:
        assert by_id[s.id] == s.row
    assert [s.id for s in load_samples(path, shuffle_seed=3, limit=10)] == [s.id for s in shuffled]


def test_duplicate_ids_are_an_error(tmp_path: Path) -> None:
    """Two rows with one id name the line and the id."""
    path = _write(tmp_path / "d.jsonl", [{"id": 1}, {"id": 1}])
    with pytest.raises(DatasetError, match=r"d.jsonl:2: duplicate sample id '1'"):
        load_samples(path)


def test_non_object_line_is_an_error(tmp_path: Path) -> None:
    """Each line must be a JSON object."""
    path = tmp_path / "d.jsonl"
    path.write_text('{"a": 1}\n[1, 2]\n')
    with pytest.raises(DatasetError, match=r"d.jsonl:2: each line must be a JSON object"):
        load_samples(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[\n  {"q": "a"},\n  {"q": "b"}\n]\n',
            "d.jsonl:1: not valid JSON (Expecting value: line 2 column 1 (char 2)); the value "
            "goes on past the end of its line, but JSONL holds one whole object a line (a JSON "
            "array, or objects over several lines, belong in a .json file)",
        ),
        (
            '{\n  "q": "a"\n}\n',
            "d.jsonl:1: not valid JSON (Expecting property name enclosed in double quotes: line "
            "2 column 1 (char 2)); the value goes on past the end of its line, but JSONL holds "
            "one whole object a line (a JSON array, or objects over several lines, belong in a "
            ".json file)",
        ),
        (
            '[{"q": "a"}, {"q": "b"}]\n',
            "d.jsonl:1: each line must be a JSON object, and this one is an array (a JSON array "
            "of objects belongs in a .json file)",
        ),
    ],
)
def test_a_json_file_saved_as_jsonl_says_so(tmp_path: Path, text: str, message: str) -> None:
    """JSON written to a .jsonl file (an array, or a pretty-printed object) was refused
    with only the parser's words about line 1; the line now says what JSONL is and where
    such a file belongs."""
    path = tmp_path / "d.jsonl"
    path.write_text(text)
    with pytest.raises(DatasetError) as err:
        load_samples(path)
    assert str(err.value) == f"{tmp_path}/{message}"


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
def test_a_utf16_jsonl_file_is_named_so(tmp_path: Path, encoding: str) -> None:
    """JSONL written as UTF-16 (PowerShell's Out-File) was refused with "not valid JSON
    ('utf-16-le' codec can't decode byte 0x0a in position 50: truncated data)", which says
    neither what is wrong nor what to do; it now says, as a CSV's refusal does."""
    path = tmp_path / "d.jsonl"
    bom = "\ufeff" if encoding == "utf-16-be" else ""
    path.write_text(bom + '{"q": "a"}\n{"q": "b"}\n', encoding=encoding)
    with pytest.raises(DatasetError) as err:
        load_samples(path)
    assert str(err.value) == f"{path}:1: JSONL file is UTF-16 text; save it as UTF-8"


#: lines whose values a JSON reader may read differently from ``json.loads``: floats at
#: and past the edges of the range, 17+ significant digits, big integers, repeated keys,
#: escapes (a lone surrogate's too), NaN and Infinity, CRLF, non-ASCII, a BOM
_EDGE_LINES = [
    b'{"a": 1e400, "b": -1e400, "c": -0.0, "d": -0, "e": 123456789012345678901234567890}',
    b'{"a": 5e-324, "b": 2.4703282292062328e-324, "c": 1e-400, "d": 1.7976931348623157e308}',
    b'{"a": 0.1, "b": 3.141592653589793238462643383279, "c": 9007199254740993.0, "e": 1E5}',
    b'{"a": 1, "b": -12345678901234567890123}\r',  # a key written twice: refused (test_formats)
    b'{"s": "\\ud83d\\ude00 \\u00e9 \xc3\xa9", "t": "\\ud800", "u": "\\/\\b\\f\\t"}',
    b'{"x": NaN, "y": Infinity, "z": -Infinity, "n": [1, {"b": null, "c": true}]}',
    b'\xef\xbb\xbf{"bom": 1}',
]


def test_jsonl_rows_are_read_as_json_loads_reads_them(tmp_path: Path) -> None:
    """Every row holds what ``json.loads`` makes of its line, value for value and type for
    type (rows are read by a faster parser, which must not change a value)."""
    path = tmp_path / "d.jsonl"
    path.write_bytes(b"\n".join(_EDGE_LINES) + b"\n")
    rows = [s.row for s in load_samples(path)]
    expected = [json.loads(line) for line in _EDGE_LINES]
    assert repr(rows) == repr(expected)  # repr: NaN is not equal to itself
    for row, want in zip(rows, expected, strict=True):
        assert [type(v) for v in row.values()] == [type(v) for v in want.values()]
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"a": 1}\n{"s": "\xff"}\n')
    with pytest.raises(
        DatasetError, match=r"bad.jsonl:2: JSONL file is not UTF-8 text \(byte 0xff"
    ):
        load_samples(bad)
    bad.write_bytes(b'{"n": ' + b"9" * 5000 + b"}\n")  # past Python's int-string limit
    with pytest.raises(DatasetError, match=r"bad.jsonl:1: not valid JSON \(Exceeds the limit"):
        load_samples(bad)


def test_empty_dataset_is_an_error(tmp_path: Path) -> None:
    """A dataset with no rows cannot run."""
    path = tmp_path / "d.jsonl"
    path.write_text("\n")
    with pytest.raises(DatasetError, match="no rows"):
        load_samples(path)


def test_cluster_field(tmp_path: Path) -> None:
    """cluster_field reads each row's cluster; a row without it is an error."""
    path = _write(tmp_path / "d.jsonl", [{"p": 1}, {"p": 1}, {"p": 2}])
    assert [s.cluster for s in load_samples(path, cluster_field="p")] == ["1", "1", "2"]
    with pytest.raises(DatasetError, match="no cluster field 'passage'"):
        load_samples(path, cluster_field="passage")


def test_an_explicit_id_equal_to_a_position_is_a_duplicate(tmp_path: Path) -> None:
    """A row without an id takes its line number, which may collide with an explicit id."""
    path = _write(tmp_path / "d.jsonl", [{"id": "2"}, {"q": "b"}])
    with pytest.raises(DatasetError, match=r"d.jsonl:2: duplicate sample id '2' \(the row's"):
        load_samples(path)


def test_samples_decode_rows_on_access_and_keep_run_order(tmp_path: Path) -> None:
    """Samples is a sequence in run order: indexing, negative indexing, slices, len."""
    path = _write(tmp_path / "d.jsonl", [{"q": str(i), "n": [i]} for i in range(5)])
    samples = load_samples(path, limit=3)
    assert len(samples) == 3 and samples.ids == ["1", "2", "3"]
    assert samples[-1].row == {"q": "2", "n": [2]} and samples[-1].index == 2
    assert [s.id for s in samples[1:]] == ["2", "3"]
    with pytest.raises(IndexError):
        samples[3]


def test_rows_with_many_key_layouts_round_trip(tmp_path: Path, monkeypatch) -> None:
    """Rows keep their own keys, in order, whatever their layouts (past the packer's
    layout table too)."""
    from gradetrail.datasets.samples import Packer

    monkeypatch.setattr(Packer, "MAX_LAYOUTS", 2)
    rows = [{"a": 1}, {"b": [2], "a": None}, {"c": {"d": 3}}, {"a": 4}, {"z": 5, "y": 6}]
    path = _write(tmp_path / "d.jsonl", rows)
    loaded = [s.row for s in load_samples(path)]
    assert loaded == rows and [list(r) for r in loaded] == [list(r) for r in rows]


def test_duplicate_found_after_many_rows_names_the_second(tmp_path: Path) -> None:
    """Ids are checked once the source is read: the earliest second occurrence is named."""
    rows = [{"id": f"k{i}"} for i in range(5000)] + [{"id": "k7"}, {"id": "k3"}]
    path = _write(tmp_path / "d.jsonl", rows)
    with pytest.raises(DatasetError, match=r"d.jsonl:5001: duplicate sample id 'k7' in field"):
        load_samples(path)


def test_a_whole_number_float_id_is_the_integers_id(tmp_path: Path) -> None:
    """pandas writes an integer id column with one missing value as floats (7.0 in JSON
    and Parquet), and the ids were "7.0", "8.0": the same rows in CSV had ids "7", "8",
    so a split file or baseline from one did not match the other. A whole-number float
    id is now the integer's id, and NaN (a missing id, as Python's ``json`` writes it) is
    no id, as null is: the row's position."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text('{"id": 7.0, "q": "a"}\n{"id": 8.0, "q": "b"}\n{"id": NaN, "q": "c"}\n')
    assert load_samples(jsonl).ids == ["7", "8", "3"]
    table = pa.table({"id": pa.array([7.0, 8.0, None, 2.5]), "q": ["a", "b", "c", "d"]})
    pq.write_table(table, tmp_path / "d.parquet")
    assert load_samples(tmp_path / "d.parquet").ids == ["7", "8", "3", "2.5"]
    csv = tmp_path / "d.csv"
    csv.write_text("id,q\n7,a\n8,b\n")
    assert load_samples(csv).ids == ["7", "8"]
    jsonl.write_text('{"id": 7.0, "q": "a"}\n{"id": 7, "q": "b"}\n')  # one id, twice
    with pytest.raises(DatasetError, match=r"d.jsonl:2: duplicate sample id '7' in field 'id'"):
        load_samples(jsonl)


@pytest.mark.parametrize(("value", "kind"), [("null", "null"), ("NaN", "NaN"), ('" "', "empty")])
def test_a_null_cluster_is_refused(tmp_path: Path, value: str, kind: str) -> None:
    """A row whose cluster value is null, NaN or blank became the cluster "None", "nan"
    or " ", one group of every such row (unrelated samples counted as dependent); it is
    now refused, naming the row."""
    path = tmp_path / "d.jsonl"
    path.write_text(f'{{"p": 1}}\n{{"p": {value}}}\n{{"p": 2}}\n')
    with pytest.raises(DatasetError, match=rf"d.jsonl:2: the row's cluster field 'p' is {kind};"):
        load_samples(path, cluster_field="p")
    csv = tmp_path / "d.csv"
    csv.write_text("q,p\na,1\nb,\n")  # a CSV's empty cell
    with pytest.raises(DatasetError, match=r"d.csv:3: the row's cluster field 'p' is empty;"):
        load_samples(csv, cluster_field="p")


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("d.csv", "id,q\n1,a\n,b\n", r"d.csv:3: the id field 'id' is empty; give the row an id"),
        ("d.jsonl", '{"id": " ", "q": "a"}\n', r"d.jsonl:1: the id field 'id' is blank;"),
    ],
)
def test_an_empty_id_is_refused(tmp_path: Path, name: str, text: str, message: str) -> None:
    """An empty id (a CSV's empty cell) was the sample id '' (or ' '): a row no command
    can name, and a second such row was refused as a duplicate of the first. It is now
    refused where it is, naming the row."""
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(DatasetError, match=message):
        load_samples(path)
