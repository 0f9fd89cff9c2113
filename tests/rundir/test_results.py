"""The run directory's result files: rows on disk as soon as they are appended, rewritten
in input order at the end, a torn last line isolated, samples.jsonl read back."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from gradetrail.errors import UsageError
from gradetrail.rundir.results import (
    ResultsWriter,
    Row,
    make_row,
    read_results,
    read_samples,
    row_json,
)


def _row(sample_id: str, epoch: int = 1) -> Row:
    return make_row(sample_id=sample_id, epoch=epoch, state="scored", score=1.0)


def test_appended_rows_are_on_disk_before_the_run_ends(tmp_path: Path) -> None:
    """Each append reaches the file at once (a kill -9 after it keeps the row)."""
    writer = ResultsWriter(tmp_path)
    writer.append((1, 1), _row("b"))
    writer.append((0, 2), _row("a", 2))
    on_disk = [json.loads(x)["sample_id"] for x in (tmp_path / "results.jsonl").open()]
    assert on_disk == ["b", "a"]
    writer.close()


def test_finalize_rewrites_in_input_order(tmp_path: Path) -> None:
    """finalize orders rows by (sample index, epoch) and leaves no temporary file."""
    writer = ResultsWriter(tmp_path)
    for order, sid in (((2, 1), "c"), ((0, 2), "a"), ((1, 1), "b"), ((0, 1), "a")):
        writer.append(order, _row(sid, order[1]))
    writer.finalize()
    assert [(r["sample_id"], r["epoch"]) for r in read_results(tmp_path)] == [
        ("a", 1),
        ("a", 2),
        ("b", 1),
        ("c", 1),
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.jsonl"]


@pytest.mark.parametrize("held", [False, True])
@pytest.mark.parametrize("in_order", [True, False])
def test_finalize_returns_the_sha256_of_the_file_it_leaves(
    tmp_path: Path, held: bool, in_order: bool
) -> None:
    """finalize's hash (the manifest's results_sha256) is the SHA-256 of results.jsonl as
    it stays on disk: rows appended in order (hashed as they are written, never read
    back), held back and written together, or rewritten into input order."""
    writer = ResultsWriter(tmp_path)
    orders = [(i, 1) for i in range(50)]
    for order in orders if in_order else reversed(orders):
        writer.append(order, _row(f"s{order[0]}"), hold=held)
    recorded = writer.finalize()
    on_disk = (tmp_path / "results.jsonl").read_bytes()
    assert recorded == hashlib.sha256(on_disk).hexdigest()
    assert on_disk == b"".join(row_json(_row(f"s{i}")) for i in range(50))


def test_rows_appended_in_order_are_kept_as_written(tmp_path: Path) -> None:
    """A warm run appends in input order: finalize keeps that very file (no copy), the
    same bytes a rewrite would give; a row appended again for the same (sample, epoch)
    still makes finalize rewrite, keeping the last."""
    writer = ResultsWriter(tmp_path)
    rows = [((0, 1), _row("a")), ((0, 2), _row("a", 2)), ((1, 1), _row("b"))]
    for order, row in rows:
        writer.append(order, row)
    inode = (tmp_path / "results.jsonl").stat().st_ino
    writer.finalize()
    assert (tmp_path / "results.jsonl").stat().st_ino == inode
    assert (tmp_path / "results.jsonl").read_bytes() == b"".join(row_json(r) for _, r in rows)
    writer = ResultsWriter(tmp_path)
    writer.append((0, 1), _row("a"))
    writer.append((0, 1), _row("a2"))
    writer.finalize()
    assert [r["sample_id"] for r in read_results(tmp_path)] == ["a2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.jsonl"]


def test_cache_hit_rows_are_written_in_batches(tmp_path: Path) -> None:
    """Rows appended with hold (cache hits) wait for the next row paid for, the batch
    size or finalize; every row ends on disk, in order."""
    writer = ResultsWriter(tmp_path)
    writer.append((0, 1), _row("a"), hold=True)
    writer.append((1, 1), _row("b"), hold=True)
    assert (tmp_path / "results.jsonl").read_bytes() == b""
    writer.append((2, 1), _row("c"))  # a call paid for: written through, with the two
    assert [r["sample_id"] for r in read_results(tmp_path)] == ["a", "b", "c"]
    big = _row("d" * 70_000)
    writer.append((3, 1), big, hold=True)  # over HOLD_BYTES: written at once
    assert len(read_results(tmp_path)) == 4
    writer.append((4, 1), _row("e"), hold=True)
    writer.finalize()
    assert [r["sample_id"][:1] for r in read_results(tmp_path)] == ["a", "b", "c", "d", "e"]


def test_a_torn_last_line_is_skipped_never_merged(tmp_path: Path) -> None:
    """A line cut by a crash (no newline) is not read, and the rows before it are."""
    good = [row_json(_row("a")).decode().strip(), row_json(_row("b")).decode().strip()]
    (tmp_path / "results.jsonl").write_text("\n".join(good) + '\n{"sample_id": "c", "sta')
    assert [r["sample_id"] for r in read_results(tmp_path)] == ["a", "b"]


def test_a_new_writer_starts_the_file_afresh(tmp_path: Path) -> None:
    """Opening a writer truncates: a re-run rebuilds results.jsonl (from the cache), so a
    torn line from a killed run cannot end up inside the new file."""
    (tmp_path / "results.jsonl").write_text('{"sample_id": "old"}\n{"sample_id": "to')
    writer = ResultsWriter(tmp_path)
    writer.append((0, 1), _row("new"))
    writer.finalize()
    assert (tmp_path / "results.jsonl").read_text() == row_json(_row("new")).decode()


def test_read_samples_names_the_fix_when_missing(tmp_path: Path) -> None:
    """A run directory without samples.jsonl is a UsageError saying to re-run."""
    with pytest.raises(UsageError, match="no samples.jsonl; re-run the spec to write it"):
        read_samples(tmp_path)


def _with_giant_line(path: Path, before: bytes, after: bytes, size: int) -> None:
    """``before``, one line of ``size`` zero bytes (a hole: no disk used) and ``after``."""
    with path.open("wb") as f:
        f.write(before)
        f.seek(len(before) + size)
        f.write(b"\n" + after)


def test_a_line_over_the_bound_is_skipped_without_being_held(tmp_path: Path) -> None:
    """A results.jsonl line of 300 MB (a planted or damaged file) was read whole into
    memory by every reader (peak 300 MB and more for the viewer's index, the diff, the
    gate, the export; a 10 GB line took the machine down); it is now skipped as one
    malformed line, read past in 1 MB pieces (peak under 8 MB), the rows around it and
    the offsets after it intact."""
    import tracemalloc

    from gradetrail.rundir.results import MAX_LINE_BYTES, iter_result_spans

    first, last = row_json(_row("a")), row_json(_row("b"))
    size = MAX_LINE_BYTES + (44 << 20)
    _with_giant_line(tmp_path / "results.jsonl", first, last, size)
    tracemalloc.start()
    try:
        spans = [(o, n, r and r["sample_id"]) for o, n, r in iter_result_spans(tmp_path)]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    giant = len(first)
    assert spans == [(0, giant, "a"), (giant, size + 1, None), (giant + size + 1, len(last), "b")]
    assert peak < 8 << 20
    assert [r["sample_id"] for r in read_results(tmp_path)] == ["a", "b"]


def test_a_giant_samples_line_and_manifest_are_bounded(tmp_path: Path) -> None:
    """samples.jsonl and manifest.json were read whole too: a samples line over the bound
    is skipped (the lines around it read), a manifest over 64 MB is one line saying so."""
    from gradetrail.rundir.results import MAX_LINE_BYTES, MAX_MANIFEST_BYTES, read_manifest

    _with_giant_line(
        tmp_path / "samples.jsonl", b'{"score": 1}\n', b'{"score": 0}\n', MAX_LINE_BYTES + 1
    )
    assert read_samples(tmp_path) == [{"score": 1}, {"score": 0}]
    with (tmp_path / "manifest.json").open("wb") as f:
        f.truncate(MAX_MANIFEST_BYTES + 1)
    with pytest.raises(UsageError, match=r"manifest.json: larger than 64 MB; not a gradetrail"):
        read_manifest(tmp_path)


def test_a_long_line_within_the_bound_is_read_whole(tmp_path: Path) -> None:
    """A row of 3 MB (over the 1 MB piece the reader measures in) is read back whole."""
    from gradetrail.rundir.results import iter_result_spans

    long = make_row(sample_id="long", epoch=1, state="scored", score=1.0, response="x" * (3 << 20))
    lines = [row_json(_row("a")), row_json(long), row_json(_row("b"))]
    (tmp_path / "results.jsonl").write_bytes(b"".join(lines))
    spans = list(iter_result_spans(tmp_path))
    assert [n for _, n, _ in spans] == [len(line) for line in lines]
    assert spans[1][2] is not None and spans[1][2]["response"] == "x" * (3 << 20)
