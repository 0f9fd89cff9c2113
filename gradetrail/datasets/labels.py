"""Human labels on dataset rows: where the spec says a row's label is, and reading it as
a score in [0, 1] (what a scorer's agreement is measured against, see
:mod:`gradetrail.stats.agreement`)."""

from __future__ import annotations

from typing import Any

from gradetrail.errors import DatasetError, SpecError
from gradetrail.spec import EvalSpec, label_text

__all__ = ["LabelReader", "label_field_of"]


def label_field_of(spec: EvalSpec) -> str | None:
    """The spec's ``dataset.label_field`` with ``{model}`` replaced by ``model.name``, or
    None when the spec names no label."""
    field = spec.dataset.label_field
    return None if field is None else field.replace("{model}", spec.model.name)


class LabelReader:
    """Reads each sample's human label as a score in [0, 1].

    Args:
        field: dotted path in the row; ``{model}`` is replaced by ``model_name``.
        model_name: the spec's ``model.name``.
        label_map: label text (see :func:`gradetrail.spec.label_text`) -> score, or None
            for the default: booleans 1/0, numbers in [0, 1] as they are.
        where: names the spec in errors.
    """

    def __init__(
        self, field: str, model_name: str, label_map: dict[str, float] | None, where: str
    ) -> None:
        self.field = field.replace("{model}", model_name)
        self.path = self.field.split(".")
        self.label_map = label_map
        self.where = where

    def _raw(self, row: dict[str, Any]) -> tuple[bool, Any]:
        value: Any = row
        for part in self.path:
            if not isinstance(value, dict) or part not in value:
                return False, None
            value = value[part]
        return True, value

    def check(self, row: dict[str, Any]) -> None:
        """The first row must carry the label, so a mistyped field stops the run.

        Raises:
            SpecError: naming the field and the row's keys.
        """
        present, _ = self._raw(row)
        if not present:
            have = ", ".join(sorted(row)) or "(none)"
            raise SpecError(
                f"{self.where}: dataset.label_field: the first row has no '{self.field}' "
                f"(it has {have}); fix the field path"
            )

    def read(self, row: dict[str, Any], sample_id: str) -> float | None:
        """The sample's label as a score, or None when the row has none (null, NaN or
        absent, unless ``label_map`` maps ``null``).

        Raises:
            DatasetError: a label the map (or the default rule) gives no score.
        """
        present, value = self._raw(row)
        if not present:
            return None
        if isinstance(value, float) and value != value:
            value = None  # NaN: a missing label as pandas and Python's json write it
        if self.label_map is not None:
            text = label_text(value)
            if text in self.label_map:
                return self.label_map[text]
            if value is None:
                return None
            known = ", ".join(self.label_map)
            raise DatasetError(
                f"{self.where}: sample {sample_id!r}: label {text!r} is not in "
                f"dataset.label_map ({known}); add it"
            )
        if value is None:
            return None
        if isinstance(value, bool):
            return float(value)
        if isinstance(value, int | float) and 0 <= value <= 1:
            return float(value)
        raise DatasetError(
            f"{self.where}: sample {sample_id!r}: label {value!r} has no score; map it with "
            "dataset.label_map"
        )
