"""Which run files the viewer reads (gradetrail.view.files), on real files and links."""

from __future__ import annotations

from pathlib import Path

from gradetrail.view.files import refusal, refusals


def test_links_inside_the_root_are_read_loops_and_dangling_ones_are_not(tmp_path: Path) -> None:
    """A link to a regular file inside the root is read; a link loop, a dangling link and
    a link out each get their own reason; absent files are no refusal."""
    root = tmp_path / "results"
    run = root / "run"
    run.mkdir(parents=True)
    (root / "shared.jsonl").write_text("{}\n")
    (run / "results.jsonl").symlink_to(root / "shared.jsonl")
    (run / "samples.jsonl").symlink_to(run / "samples.jsonl")
    (run / "log.jsonl").symlink_to(run / "gone.jsonl")
    (tmp_path / "elsewhere.json").write_text("{}")
    (run / "manifest.json").symlink_to(tmp_path / "elsewhere.json")
    assert refusal(root, run / "results.jsonl") is None
    assert refusals(root, run) == {
        "samples.jsonl": "samples.jsonl is a link that loops; not read",
        "manifest.json": "manifest.json links outside the results root; not read",
        "log.jsonl": "log.jsonl links to a file that does not exist; not read",
    }
