"""dataset.split over the bundled GSM8K test set (1,319 problems with the authors' recorded
solutions): hash splits and split files, refused splits, the split in the manifest and
identity, ``gradetrail split`` and the gate refusing runs on different splits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cli_support import run_cli
from paths import EXAMPLES

import gradetrail
from gradetrail.datasets import load_samples
from gradetrail.datasets.splits import check_splits, hash_split, ids_hash
from gradetrail.errors import DatasetError
from gradetrail.report.run import manifest_lines
from gradetrail.rundir.manifest import identity_body, identity_differences
from gradetrail.spec import DatasetSpec

GSM8K = EXAMPLES / "data" / "gsm8k"
N = 1319


def _dataset(**split: object) -> DatasetSpec:
    return DatasetSpec(path=str(GSM8K / "test.jsonl"), split=split or None)


def _spec(tmp_path: Path, split: dict | None, name: str = "gsm8k") -> Path:
    spec = yaml.safe_load((EXAMPLES / "gsm8k.yaml").read_text())
    spec["name"] = name
    spec["dataset"]["path"] = str(GSM8K / "test.jsonl")
    spec["model"]["recordings"]["path"] = str(GSM8K / "example_model_solutions.jsonl")
    if split is not None:
        spec["dataset"]["split"] = split
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_a_hash_split_partitions_every_id_and_is_stable() -> None:
    every = load_samples(_dataset()).ids
    train = load_samples(_dataset(name="train", seed=7, fractions={"train": 0.7, "test": 0.3}))
    test = load_samples(_dataset(name="test", seed=7, fractions={"train": 0.7, "test": 0.3}))
    assert len(train) + len(test) == N
    assert set(train.ids).isdisjoint(test.ids)
    assert set(train.ids) | set(test.ids) == set(every)
    assert (len(train), len(test)) == (904, 415)  # SHA-256 of (seed, id): fixed forever
    # dataset order is kept, and rows come with their ids
    assert test.ids == [i for i in every if i in set(test.ids)]
    assert (
        test[0].row["question"]
        == load_samples(_dataset())[every.index(test.ids[0])].row["question"]
    )
    # an id's split depends on the id and seed only: a subset of ids splits the same way
    half = hash_split(every[:600], 7, {"train": 0.7, "test": 0.3})
    assert half["test"] == [i for i in test.ids if i in set(every[:600])]
    info = test.info["split"]
    assert info == {
        "name": "test",
        "source": "hash",
        "ids": 415,
        "ids_sha256": ids_hash(test.ids),
        "splits": {"test": 415, "train": 904},
    }


def test_shuffle_and_limit_apply_within_the_split() -> None:
    fr = {"train": 0.5, "test": 0.5}
    test = load_samples(_dataset(name="test", seed=1, fractions=fr))
    limited = load_samples(
        DatasetSpec(
            path=str(GSM8K / "test.jsonl"),
            split={"name": "test", "seed": 1, "fractions": fr},
            shuffle_seed=3,
            limit=20,
        )
    )
    assert len(limited) == 20 and set(limited.ids) <= set(test.ids)
    assert [s.row for s in limited] == [test[test.ids.index(i)].row for i in limited.ids]


@pytest.mark.parametrize(
    ("splits", "message"),
    [
        ({"train": ["1", "2", "1"]}, "split 'train' lists 1 ids twice ('1')"),
        ({"train": ["1", "2"], "test": ["2", "3"]}, "splits 'train' and 'test' share 1 ids ('2')"),
        ({"train": ["1", "nope", "9999"]}, "2 split ids are not in the dataset ('nope', '9999')"),
    ],
)
def test_bad_split_files_are_one_line_errors(tmp_path: Path, splits: dict, message: str) -> None:
    (tmp_path / "s.json").write_text(json.dumps(splits))
    with pytest.raises(DatasetError) as err:
        load_samples(_dataset(name="train", file=str(tmp_path / "s.json")))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_check_splits_refuses_what_the_dataset_lacks() -> None:
    with pytest.raises(DatasetError, match="not in the dataset"):
        check_splits({"a": ["x"]}, ["y"], "here")


def test_a_split_run_records_it_and_the_gate_refuses_another_split(tmp_path: Path) -> None:
    out = run_cli(
        "split", str(_spec(tmp_path, None)), "-o", str(tmp_path / "s.json"), "--seed", "7"
    )
    assert out.code == 0, out.err
    assert "test 271, train 1048 ids (seed 7)" in out.out  # the default 0.8/0.2 fractions
    written = json.loads((tmp_path / "s.json").read_text())
    assert sorted(written) == ["test", "train"] and len(written["test"]) == 271

    def run(split: dict | None, name: str) -> dict:
        spec = gradetrail.load_spec(_spec(tmp_path, split, name))
        return gradetrail.run_eval(spec, results_root=tmp_path / "r", use_cache=False)

    test = run({"name": "test", "file": str(tmp_path / "s.json")}, "a")
    test_again = run({"name": "test", "file": str(tmp_path / "s.json")}, "b")
    train = run({"name": "train", "file": str(tmp_path / "s.json")}, "c")
    whole = run(None, "d")
    assert test.manifest.n_samples == 271 and train.manifest.n_samples == 1048
    assert test.manifest.dataset["split"]["ids_sha256"] == ids_hash(written["test"])
    assert test.manifest.file_hashes["split"] == ids_hash(written["test"])
    assert ("split", "test: 271 of 1319 ids (file)") in manifest_lines(test.manifest, "")
    # the split's ids enter the identity; the whole dataset keeps the hash it had
    assert len({test.manifest.identity_hash, train.manifest.identity_hash}) == 2
    changed = identity_differences(
        json.loads((test.run_dir / "manifest.json").read_text()),
        json.loads((train.run_dir / "manifest.json").read_text()),
    )
    assert 'spec dataset.split.name: "test" -> "train"' in changed
    assert any(line.startswith("split ids hash: ") for line in changed)
    assert "split" not in whole.manifest.file_hashes
    assert "split" not in identity_body(whole.manifest.spec)["dataset"]  # hashes as before
    assert "file" not in identity_body(test.manifest.spec)["dataset"]["split"]
    assert whole.manifest.score.mean == pytest.approx(742 / N)  # 175b_verification
    # the two splits' correct answers add up to the whole dataset's
    correct = [round(r.manifest.score.mean * r.manifest.n_samples) for r in (test, train)]
    assert sum(correct) == 742

    same = run_cli("gate", str(test.run_dir), str(test_again.run_dir))
    assert same.code == 0, same.err
    other = run_cli("gate", str(test.run_dir), str(train.run_dir), "--unpaired")
    assert other.code == 2
    assert "baseline ran on split 'test' (271 ids" in other.err
    assert "but candidate on split 'train' (1048 ids" in other.err
    assert "--allow-different-splits" in other.err
    mixed = run_cli("gate", str(whole.run_dir), str(test.run_dir), "--unpaired")
    assert mixed.code == 2 and "baseline ran on the whole dataset" in mixed.err
    allowed = run_cli(
        "gate", str(test.run_dir), str(train.run_dir), "--unpaired", "--allow-different-splits"
    )
    assert allowed.code in (0, 1), allowed.err


def test_split_spec_errors_say_what_to_fix(tmp_path: Path) -> None:
    bad = run_cli("run", str(_spec(tmp_path, {"name": "dev", "seed": 1, "fractions": {"a": 1.0}})))
    assert bad.code == 2
    assert "dataset.split.name 'dev' is not one of the fractions' splits (a)" in bad.err
    both = run_cli("run", str(_spec(tmp_path, {"name": "a", "file": "x.json", "seed": 1})))
    assert both.code == 2 and "dataset.split.seed applies to fractions" in both.err
    missing = run_cli("run", str(_spec(tmp_path, {"name": "a", "file": "nope.json"})), "--no-cache")
    assert missing.code == 2 and "dataset.split.file" in missing.err and "nope.json" in missing.err
    fractions = run_cli(
        "split", str(_spec(tmp_path, None)), "-o", "x.json", "--fractions", "a=1,a=0"
    )
    assert fractions.code == 2 and "each name once" in fractions.err


def test_split_refuses_a_split_that_gets_no_id(tmp_path: Path) -> None:
    """`--fractions a=1e-9,b=0.999999999` wrote a split file whose split a was empty (a
    run on it is refused: "selects no id"); now nothing is written, one line, exit 2."""
    out = tmp_path / "split.json"
    empty = run_cli(
        "split", str(_spec(tmp_path, None)), "-o", str(out), "--fractions", "a=1e-9,b=0.999999999"
    )
    assert empty.code == 2 and not out.exists()
    assert empty.err_lines == [
        f"error: --fractions: split 'a' gets none of the {N} ids (fraction 1e-09); raise its "
        "fraction or drop that split"
    ]


def test_a_split_file_of_an_id_holding_a_lone_surrogate_is_read_back(tmp_path: Path) -> None:
    """A dataset id "a\\ud800" (a JSON escape the dataset reader accepts): gradetrail split
    wrote its UTF-8-encoded surrogate, bytes that are no UTF-8, and the run on that split
    file was refused ("is not a JSON split file ... can't decode byte 0xed"). The id is
    now written as its JSON escape, and the run reads all three ids."""
    (tmp_path / "d.jsonl").write_text(
        '{"id": "a\\ud800", "q": "1"}\n{"id": "b", "q": "2"}\n{"id": "c", "q": "3"}\n'
    )
    spec = {
        "name": "lone",
        "dataset": {"path": "d.jsonl"},
        "prompt": "{{ q }}",
        "target": "{{ q }}",
        "model": {
            "provider": "replay",
            "name": "m",
            "recordings": {"path": "d.jsonl", "response_field": "q"},
        },
        "scorer": {"type": "exact"},
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    out = tmp_path / "split.json"
    assert (
        run_cli("split", str(tmp_path / "s.yaml"), "-o", str(out), "--fractions", "all=1").code == 0
    )
    assert out.read_bytes().decode("utf-8").splitlines()[2] == '  "a\\ud800",'
    spec["dataset"]["split"] = {"file": "split.json", "name": "all"}
    (tmp_path / "s2.yaml").write_text(yaml.safe_dump(spec))
    run = run_cli(
        "run", str(tmp_path / "s2.yaml"), "--results-root", str(tmp_path / "r"), "--no-cache"
    )
    assert run.code == 0, run.err
    assert "rows        3 (3 samples x 1 epoch): scored 3" in run.out


def _rows(tmp_path: Path, ids: list[str | None]) -> Path:
    path = tmp_path / "d.jsonl"
    rows = [{"q": f"q{i}"} | ({"id": k} if k is not None else {}) for i, k in enumerate(ids)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_split_of_rows_numbered_by_position_warns_that_their_ids_move(
    tmp_path: Path,
) -> None:
    """Rows without an id are numbered by line, so one row added at the top renumbers all
    the others: their hash split changes (held-out q0 and q5 land in train), and a
    split file's ids name other rows, with no error either way. Splitting such rows now
    warns (the run, and ``gradetrail split``); rows with ids do not."""
    split = {"name": "test", "seed": 3, "fractions": {"train": 0.5, "test": 0.5}}
    path = _rows(tmp_path, [None] * 8)
    before = [s.row["q"] for s in load_samples(path, split=split)]
    lines = path.read_text()
    path.write_text(json.dumps({"q": "new"}) + "\n" + lines)
    after = [s.row["q"] for s in load_samples(path, split=split)]
    assert before == ["q0", "q4", "q5", "q7"] and after == ["new", "q3", "q4", "q6", "q7"]
    warnings = load_samples(path, split=split).warnings
    assert warnings == [
        "dataset.split: no row has an 'id' field, so their ids are their positions (line "
        "numbers): a row added, removed or moved before them gives them other ids and other "
        "splits (held-out rows land in the one you tune on); give each row an id, or name "
        "one with dataset.id_field"
    ]
    partly = _rows(tmp_path, ["a", None, "c", "d"])
    assert (
        load_samples(partly, split=split)
        .warnings[0]
        .startswith("dataset.split: 1 of 4 rows have no 'id' field")
    )
    assert load_samples(partly).warnings == []  # no split: nothing to move between
    assert load_samples(_rows(tmp_path, list("abcd")), split=split).warnings == []


def test_gradetrail_split_warns_of_ids_that_are_positions(tmp_path: Path) -> None:
    """``gradetrail split`` over GSM8K (no id field) writes the file and warns once."""
    out = run_cli("split", str(_spec(tmp_path, None)), "-o", str(tmp_path / "s.json"))
    assert out.code == 0, out.err
    assert out.err_lines == [
        "warning: dataset.split: no row has an 'id' field, so their ids are their positions "
        "(line numbers): a row added, removed or moved before them gives them other ids and "
        "other splits (held-out rows land in the one you tune on); give each row an id, or "
        "name one with dataset.id_field"
    ]
