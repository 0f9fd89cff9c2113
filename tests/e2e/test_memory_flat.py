"""Memory stays flat in the row count (issue 11): a run keeps no Python object per row.

Structural checks, not timings: how many bytes of Python allocations (tracemalloc) a run
retains per row as its rows go by, and how many objects the per-row state adds. The
bounds leave room for noise but sit far below a dict entry a row (the results writer's
spans and the tally's per-sample lists cost ~380 bytes a row before).
"""

from __future__ import annotations

import gc
import json
import random
import tempfile
import tracemalloc
from pathlib import Path

import pytest

import gradetrail
from gradetrail.datasets import load_samples
from gradetrail.datasets import samples as samples_module
from gradetrail.datasets.samples import Blob, Blocks
from gradetrail.errors import DatasetError
from gradetrail.rundir.results import ResultsWriter, Row, make_row
from gradetrail.rundir.summary import Tally

APP = '''
def answer(request):
    """'What is 7 + 7?' -> 'A: 14'."""
    a = int(request.prompt.split("What is ", 1)[1].split(" +", 1)[0])
    return f"A: {a + a}"
'''


def _eval_dir(tmp_path: Path, rows: int) -> Path:
    with (tmp_path / "data.jsonl").open("w") as f:
        for i in range(rows):
            f.write(json.dumps({"id": f"s{i}", "question": f"What is {i} + {i}?", "a": 2 * i}))
            f.write("\n")
    (tmp_path / "sum_app.py").write_text(APP)
    (tmp_path / "spec.yaml").write_text(
        "name: mem\ndataset: {path: data.jsonl}\nprompt: '{{ question }}'\n"
        "target: '{{ a }}'\nmodel: {provider: python, name: sum, function: 'sum_app:answer'}\n"
        "scorer: {type: numeric, marker: 'A:'}\nrun: {concurrency: 8}\n"
    )
    return tmp_path / "spec.yaml"


def test_a_warm_run_retains_no_python_object_per_row(tmp_path: Path) -> None:
    """Between its 500th and its last (4,000th) row, a warm run's Python allocations
    grow by a few bytes a row (the writer's and the tally's typed arrays: 25), not by a
    dict entry a row."""
    rows = 4_000
    spec_path = _eval_dir(tmp_path, rows)
    cache = tmp_path / "cache.sqlite"
    root = tmp_path / "results"
    cold = gradetrail.run_eval(gradetrail.load_spec(spec_path), results_root=root, cache_path=cache)
    assert cold.manifest.counts == {"scored": rows}
    seen: dict[int, int] = {}

    def on_row(row: Row, tally: Tally) -> None:
        if tally.rows in (500, rows):
            gc.collect()
            seen[tally.rows] = tracemalloc.get_traced_memory()[0]

    tracemalloc.start()
    try:
        warm = gradetrail.run_eval(
            gradetrail.load_spec(spec_path), results_root=root, cache_path=cache, on_row=on_row
        )
    finally:
        tracemalloc.stop()
    assert warm.manifest.cache_hits == rows and warm.manifest.score.mean == 1.0
    per_row = (seen[rows] - seen[500]) / (rows - 500)
    assert per_row < 64, f"{per_row:.0f} bytes retained a row"
    lines = (root / warm.run_dir.name / "results.jsonl").read_text().splitlines()
    assert [json.loads(x)["sample_id"] for x in lines] == [f"s{i}" for i in range(rows)]


def test_writer_and_tally_keep_per_row_state_in_arrays(tmp_path: Path) -> None:
    """20,000 rows over 3 epochs, arriving out of order, add a handful of objects to
    what the writer and the tally hold; the file still comes out in (sample, epoch)
    order, and the tally's summary counts every sample."""
    writer, tally = ResultsWriter(tmp_path, epochs=3), Tally(epochs=3)
    row = make_row(sample_id="s", state="scored", score=1.0)
    order = [(i, e) for e in (3, 1, 2) for i in range(20_000 // 3, -1, -1)][:20_000]
    gc.collect()
    before = len(gc.get_objects())
    for index, epoch in order:
        item = {**row, "sample_id": f"s{index}", "epoch": epoch}
        writer.append((index, epoch), item)
        tally.add(item, index)
        del item
    gc.collect()
    assert len(gc.get_objects()) - before < 50
    writer.finalize()
    got = [json.loads(x) for x in (tmp_path / "results.jsonl").open()]
    assert [(r["sample_id"], r["epoch"]) for r in got] == [(f"s{i}", e) for i, e in sorted(order)]
    assert tally.score_stats().n == 20_000 // 3 + 1


def test_with_the_sample_count_the_per_row_state_does_not_grow(tmp_path: Path) -> None:
    """Given the run's sample count (the runner gives it), the writer and the tally make
    their per-row arrays at once: 20,000 rows over 2 epochs then add no memory to them
    (without it they grow by ~25 bytes a row, ~1 MB here)."""
    samples, epochs = 10_000, 2
    writer = ResultsWriter(tmp_path, epochs=epochs, samples=samples)
    tally = Tally(epochs=epochs, samples=samples)
    row = make_row(sample_id="s", state="scored", score=1.0)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for epoch in (2, 1):
            for index in range(samples):
                writer.append((index, epoch), row, hold=True)
                tally.add(row, index)
        writer.flush()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 20_000, f"{grown} bytes grown over {samples * epochs} rows"
    assert tally.score_stats().n == samples
    writer.finalize()
    assert sum(1 for _ in (tmp_path / "results.jsonl").open()) == samples * epochs


def test_duplicate_ids_are_found_across_hash_buckets(tmp_path: Path) -> None:
    """Ids are checked for duplicates a hash bucket at a time (a bucket per 4,096 rows):
    a duplicate far from its first row, in a 20,000-row file, is still refused, naming
    the later line."""
    path = tmp_path / "d.jsonl"
    ids = [f"s{i}" for i in range(20_000)]
    ids[17_000] = "s3"
    path.write_text("".join(json.dumps({"id": x, "q": "?"}) + "\n" for x in ids))
    with pytest.raises(DatasetError) as caught:
        load_samples(path)
    assert str(caught.value) == (
        f"{path}:17001: duplicate sample id 's3' in field 'id'; ids must be unique"
    )
    ids[17_000] = "s17000"
    path.write_text("".join(json.dumps({"id": x, "q": "?"}) + "\n" for x in ids))
    assert load_samples(path).ids == ids


@pytest.mark.parametrize("compress_after", [0, 400_000, None])
def test_compressed_row_blocks_read_back_in_any_order(compress_after: int | None) -> None:
    """Blocks (the unshuffled dataset's rows) give back every item exactly, read in
    order, in a random order, across sealed blocks and the open last one; items of 0
    bytes and of more than a block's bytes included; every block compressed, the first
    ones kept as they are and the later compressed, or none compressed."""
    rng = random.Random(1)
    items = [rng.randbytes(rng.choice([0, 1, 40, 700])) for _ in range(3000)]
    items[100] = items[2500] = rng.randbytes(300_000)
    store = Blocks(compress_after)
    for item in items:
        store.append(item)
    order = list(range(len(items)))
    rng.shuffle(order)
    assert [store[i] for i in range(len(items))] == items
    assert [store[i] for i in order] == [items[i] for i in order]
    picked = store.select(order[:50])
    assert [picked[i] for i in range(50)] == [items[i] for i in order[:50]]


def test_row_blocks_are_compressed_only_past_their_bound() -> None:
    """A small dataset's rows are held as they are (compressing and reading them back
    would cost more than their memory); the blocks sealed past ``compress_after`` bytes
    are compressed, so a large dataset of like rows holds a fraction of its bytes."""
    row = b'{"question": "What is 2 + 2? Show the steps.", "answer": "2 + 2 = 4 #### 4"}'
    small, large = Blocks(), Blocks(compress_after=200_000)
    for store in (small, large):
        for i in range(20_000):
            store.append(row + str(i).encode())
    raw = sum(len(row) + len(str(i)) for i in range(20_000))
    assert small.nbytes == raw  # under COMPRESS_AFTER_BYTES: nothing compressed
    assert 200_000 < large.nbytes < raw // 2  # the blocks after the first 200 kB are
    assert [large[i] for i in (0, 2_999, 19_999)] == [row + b"0", row + b"2999", row + b"19999"]


def test_a_blob_past_its_bound_reads_back_from_its_file() -> None:
    """Items appended past ``spill_after`` bytes move to the blob's temporary file (the
    memory keeps only what came since): every item, empty and large ones included, reads
    back exactly, in order and in a random order, as bytes and as text."""
    rng = random.Random(2)
    items = [rng.choice(["", "é", "x" * 90, "\u2019" * 400]).encode() for _ in range(2000)]
    blob = Blob(spill_after=1000)
    for item in items:
        blob.append(item)
    assert blob.spilled > sum(map(len, items)) - 1000 and len(blob.data) < 1000
    order = list(range(len(items)))
    rng.shuffle(order)
    assert [blob[i] for i in order] == [items[i] for i in order]
    assert [blob.text(i) for i in range(len(items))] == [x.decode() for x in items]
    assert [blob.select(order[:30])[i] for i in range(30)] == [items[i] for i in order[:30]]


def test_a_blob_that_cannot_make_its_file_keeps_its_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No temporary directory to write in: the blob keeps every item in memory and reads
    them back as before (nothing is lost, nothing raised)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    blob = Blob(spill_after=100)
    for i in range(500):
        blob.append(f"item {i}".encode())
    assert blob.spilled == 0
    assert [blob.text(i) for i in range(500)] == [f"item {i}" for i in range(500)]


@pytest.mark.parametrize("shuffle", [None, 7])
def test_a_dataset_past_the_bound_loads_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shuffle: int | None
) -> None:
    """A dataset whose rows pass the spill bound (lowered here to 4 KB) loads into the
    same samples as one held in memory, shuffled or not, its rows on file."""
    path = tmp_path / "d.jsonl"
    rows = [{"id": f"s{i}", "q": f"What is {i} + {i}? " * (i % 7)} for i in range(3000)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    held = load_samples(path, shuffle_seed=shuffle)
    monkeypatch.setattr(samples_module, "SPILL_AFTER_BYTES", 4096)
    spilled = load_samples(path, shuffle_seed=shuffle)
    store = spilled._rows  # noqa: SLF001 - which store, and whether it spilled
    assert (store.spilled if isinstance(store, Blob) else store._sealed.spilled) > 0  # noqa: SLF001
    assert list(spilled) == list(held) and len(spilled) == 3000
