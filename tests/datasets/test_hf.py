"""Hugging Face datasets through the real ``datasets`` library, on local files only: the
Hub is switched off (HF_HUB_OFFLINE), so no test touches the internet."""

from __future__ import annotations

import json
from pathlib import Path

import datasets  # conftest has switched the Hub off and given it a private HF_HOME
import pytest

from gradetrail.datasets import load_samples
from gradetrail.errors import DatasetError

datasets.disable_progress_bars()

ROWS = [{"question": f"q{i}", "answer": str(i)} for i in range(1, 6)]


def _hf(tmp_path: Path, **hf: object) -> dict:
    return {"hf": hf}


def _load(tmp_path: Path, **hf: object):
    return load_samples(_spec(hf), base_dir=tmp_path)


def _spec(hf: dict, **dataset: object):
    from gradetrail.spec import DatasetSpec

    return DatasetSpec.model_validate({"hf": hf, **dataset})


def test_gsm8k_saved_to_disk_scores_the_same_as_jsonl(gsm8k_copy: Path, tmp_path: Path) -> None:
    """The GSM8K example as a save_to_disk DatasetDict scores exactly 0.5625 for
    175b_verification with the JSONL run's sample ids; the dataset hash comes from the
    arrow files and fingerprint, and the manifest names split and fingerprint."""
    from gradetrail import load_spec, read_results, run_eval

    data = gsm8k_copy.parent / "data" / "gsm8k"
    rows = [json.loads(line) for line in (data / "test.jsonl").read_text().splitlines()]
    datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)}).save_to_disk(data / "hf")
    jsonl = run_eval(load_spec(gsm8k_copy), results_root=tmp_path / "r")
    spec = load_spec(
        gsm8k_copy, ["dataset.path=null", "dataset.hf={path: data/gsm8k/hf, split: test}"]
    )
    result = run_eval(spec, results_root=tmp_path / "r")
    assert round(result.manifest.score.mean, 4) == 0.5625
    assert result.manifest.score.mean == jsonl.manifest.score.mean
    ids = [r["sample_id"] for r in read_results(result.run_dir)]
    assert ids == [r["sample_id"] for r in read_results(jsonl.run_dir)]
    info = result.manifest.dataset
    assert info["format"] == "hf" and info["kind"] == "disk" and info["split"] == "test"
    assert info["rows"] == 1319 and info["fingerprint"]
    again = run_eval(spec, results_root=tmp_path / "r")
    assert again.run_dir == result.run_dir and again.manifest.cache_hits == 1319


def test_disk_identity_follows_the_data(tmp_path: Path) -> None:
    """The same data saved twice hashes the same; a changed row changes the hash."""
    datasets.Dataset.from_list(ROWS).save_to_disk(tmp_path / "a")
    datasets.Dataset.from_list(ROWS).save_to_disk(tmp_path / "b")
    changed = [*ROWS[:-1], {"question": "other", "answer": "5"}]
    datasets.Dataset.from_list(changed).save_to_disk(tmp_path / "c")
    hashes = [_load(tmp_path, path=name).content_hash for name in ("a", "b", "c")]
    assert hashes[0] == hashes[1] != hashes[2]


def test_splits_of_a_dataset_dict(tmp_path: Path) -> None:
    """A DatasetDict needs a split when it has several; a missing split names the ones
    there are; ids are 1-based row numbers in the split; a Dataset saved alone needs none."""
    ds = datasets.Dataset.from_list(ROWS)
    datasets.DatasetDict({"train": ds, "test": ds.select(range(2))}).save_to_disk(tmp_path / "dd")
    assert _load(tmp_path, path="dd", split="test").ids == ["1", "2"]
    with pytest.raises(DatasetError, match=r"hf dd: the dataset has splits train, test; name"):
        _load(tmp_path, path="dd")
    with pytest.raises(DatasetError, match=r"split 'tset' does not exist; splits: train, test"):
        _load(tmp_path, path="dd", split="tset")
    ds.save_to_disk(tmp_path / "one")
    samples = _load(tmp_path, path="one")
    assert samples.ids == ["1", "2", "3", "4", "5"] and samples[4].row == ROWS[4]
    with pytest.raises(DatasetError, match=r"dataset.hf.revision does not apply to a save_to_disk"):
        _load(tmp_path, path="one", revision="abc1234")


def test_local_data_files_through_a_builder(tmp_path: Path) -> None:
    """hf.path csv/json with data_files (relative to the spec) loads through the datasets
    builder; the hash follows the files' bytes; fields and ids apply as for any format."""
    (tmp_path / "d.jsonl").write_text(
        "".join(json.dumps({"qid": f"k{i}", **r}) + "\n" for i, r in enumerate(ROWS))
    )
    (tmp_path / "d.csv").write_text(
        "question,answer\n" + "".join(f"{r['question']},{r['answer']}\n" for r in ROWS)
    )
    from_json = load_samples(
        _spec({"path": "json", "data_files": "d.jsonl"}, id_field="qid", fields={"q": "question"}),
        base_dir=tmp_path,
    )
    assert from_json.ids == ["k0", "k1", "k2", "k3", "k4"] and from_json[0].row["q"] == "q1"
    assert from_json.info["kind"] == "files" and from_json.info["split"] == "train"
    from_csv = _load(tmp_path, path="csv", data_files={"test": ["d.csv"]}, split="test")
    # the datasets csv builder infers column types (pandas), unlike dataset.path CSVs
    assert [s.row["answer"] for s in from_csv] == [1, 2, 3, 4, 5]
    before = from_csv.content_hash
    (tmp_path / "d.csv").write_text("question,answer\nx,9\n")
    assert (
        _load(tmp_path, path="csv", data_files={"test": ["d.csv"]}, split="test").content_hash
        != before
    )
    with pytest.raises(
        DatasetError, match=r"hf csv \[tset\]: split 'tset' does not exist; splits: test"
    ):
        _load(tmp_path, path="csv", data_files={"test": ["d.csv"]}, split="tset")
    with pytest.raises(DatasetError, match=r"revision applies to Hub datasets"):
        _load(tmp_path, path="csv", data_files="d.csv", revision="main")


def test_hub_without_network_suggests_load_from_disk(tmp_path: Path, cli) -> None:
    """A Hub dataset with no network is one line, exit 2, saying so and what to do."""
    (tmp_path / "s.yaml").write_text(
        "name: t\ndataset: {hf: {path: openai/gsm8k, name: main, split: test}}\n"
        "prompt: '{{ question }}'\nmodel: {provider: python, name: m, function: 'x:y'}\n"
        "scorer: {type: exact}\n"
    )
    out = cli("run", str(tmp_path / "s.yaml"))
    assert out.exit_code == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "error: hf openai/gsm8k [main/test]: cannot reach"
    )
    assert "save_to_disk" in lines[0] and "load_from_disk" in lines[0]


def test_hub_identity_is_the_resolved_revision_and_unpinned_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli
) -> None:
    """A Hub dataset enters the identity through the commit SHA its revision resolved to
    (the builder's hash) and its fingerprint, not its name: an unpinned revision warns
    with the SHA to pin, a pinned one does not, and another commit is another identity.
    The Hub itself is out of reach in tests, so the builder for "org/name" is the real
    parquet builder over a local file with the hash the Hub would have given it."""
    import datasets as hf

    real = hf.load_dataset_builder
    (tmp_path / "data").mkdir()
    datasets.Dataset.from_list(ROWS).to_parquet(tmp_path / "data" / "test.parquet")
    commits = {"main": "a" * 40, None: "a" * 40, "b" * 40: "b" * 40}

    def hub_builder(path, name=None, revision=None, data_files=None, **kw):
        assert path == "org/name" and data_files is None
        builder = real("parquet", data_files={"test": str(tmp_path / "data" / "test.parquet")})
        builder.hash = commits[revision]
        return builder

    monkeypatch.setattr(hf, "load_dataset_builder", hub_builder)
    unpinned = _load(tmp_path, path="org/name", split="test")
    assert unpinned.ids == ["1", "2", "3", "4", "5"]
    assert unpinned.info["kind"] == "hub" and unpinned.info["revision"] == "a" * 40
    assert unpinned.warnings == [
        f"dataset.hf: org/name revision is not pinned (the default branch); it resolved to "
        f"{'a' * 40}: pin it with dataset.hf.revision: {'a' * 40}"
    ]
    branch = _load(tmp_path, path="org/name", split="test", revision="main")
    assert "not pinned (main)" in branch.warnings[0]
    assert branch.content_hash == unpinned.content_hash
    pinned = _load(tmp_path, path="org/name", split="test", revision="b" * 40)
    assert pinned.warnings == [] and pinned.content_hash != unpinned.content_hash

    (tmp_path / "s.yaml").write_text(
        "name: t\ndataset: {hf: {path: org/name, split: test}}\nprompt: '{{ question }}'\n"
        "target: '{{ answer }}'\nmodel: {provider: python, name: m, function: 'echo_hf:answer'}\n"
        "scorer: {type: exact}\n"
    )
    (tmp_path / "echo_hf.py").write_text("def answer(request):\n    return request.prompt[1:]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = cli("run", str(tmp_path / "s.yaml"))
    assert out.exit_code == 0, out.stderr
    assert "warning: dataset.hf: org/name revision is not pinned" in out.stderr
    manifest = json.loads(next((tmp_path / "results").glob("t-*/manifest.json")).read_text())
    assert manifest["dataset"]["revision"] == "a" * 40
    assert manifest["counts"] == {"scored": 5}
