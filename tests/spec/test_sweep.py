"""The sweep file: axes into cells, their overrides, the baseline, and one-line refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gradetrail.errors import SpecError
from gradetrail.spec.sweep import load_sweep, models_sweep


def _write(tmp_path: Path, **raw) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"name": "s", "spec": "eval.yaml", **raw}, sort_keys=False))
    return path


def test_cells_are_the_product_of_the_axes_first_axis_slowest(tmp_path: Path) -> None:
    """Two models x two labelled prompts: four cells named label/label, each with its
    overrides as dotted.key=JSON (so a value keeps its type and its newlines)."""
    sweep = load_sweep(
        _write(
            tmp_path,
            axes={
                "model.name": ["a", "b"],
                "prompt": {"plain": {}, "terse": {"prompt": "Q: {{ q }}\nA:", "run.epochs": 2}},
            },
            baseline="a/plain",
        )
    )
    cells = sweep.cells()
    assert [c.name for c in cells] == ["a/plain", "a/terse", "b/plain", "b/terse"]
    assert cells[3].overrides == (
        'model.name="b"',
        'prompt="Q: {{ q }}\\nA:"',
        "run.epochs=2",
    )
    assert sweep.baseline_cell().name == "a/plain"
    assert sweep.spec_path == tmp_path / "eval.yaml"
    assert sweep.gate.correction == "holm" and sweep.gate.margin is None


def test_baseline_by_a_label_only_one_cell_has(tmp_path: Path) -> None:
    """A label names a cell when one cell has it; a label several cells share is refused
    naming them."""
    one = load_sweep(_write(tmp_path, axes={"model.name": ["a", "b"]}, baseline="b"))
    assert one.baseline_cell().labels == ("b",)
    path = _write(tmp_path, axes={"model.name": ["a", "b"], "run.epochs": [1, 2]}, baseline="a")
    with pytest.raises(SpecError, match=r"baseline 'a' names 2 cells \(a/1, a/2\); name one"):
        load_sweep(path)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"axes": {"model.name": "abc"}}, "axis 'model.name' must be a list of values"),
        ({"axes": {"model.name": [{"x": 1}]}}, "a list axis takes plain values"),
        ({"axes": {"model.name": ["a", "a"]}}, "repeats a value"),
        ({"axes": {"m": {"x": {}}}, "gate": {"margin": 1.5}}, "gate.margin"),
        ({"axes": {"a": list(range(40)), "b": list(range(40))}}, "1600 cells is over the limit"),
        ({"axes": {"a": [1]}, "slices": {"must_not_regress": ["x"]}}, "slices.field"),
    ],
)
def test_bad_sweeps_are_refused_in_one_line(tmp_path: Path, raw: dict, expected: str) -> None:
    """Each mistake: a SpecError naming the file and the field, one line."""
    with pytest.raises(SpecError) as info:
        load_sweep(_write(tmp_path, **raw))
    assert expected in str(info.value) and str(tmp_path) in str(info.value)
    assert "\n" not in str(info.value)


def test_not_a_mapping_and_bad_yaml(tmp_path: Path) -> None:
    """A list or broken YAML is one line naming the file."""
    path = tmp_path / "sweep.yaml"
    path.write_text("- a\n")
    with pytest.raises(SpecError, match="a sweep must be a mapping"):
        load_sweep(path)
    path.write_text("name: [\n")
    with pytest.raises(SpecError, match="line 2: invalid YAML"):
        load_sweep(path)


def test_models_sweep(tmp_path: Path) -> None:
    """--models a,b: named after the spec, the first the baseline; none is refused."""
    from paths import GSM8K_SPEC

    sweep = models_sweep(GSM8K_SPEC, ["175b_finetuning", " 6b_finetuning "])
    assert sweep.name == "gsm8k" and [c.name for c in sweep.cells()] == [
        "175b_finetuning",
        "6b_finetuning",
    ]
    assert sweep.baseline_cell().name == "175b_finetuning"
    with pytest.raises(SpecError, match="name at least one model"):
        models_sweep(GSM8K_SPEC, [" "])
