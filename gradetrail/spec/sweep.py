"""A sweep file: one base spec, the axes to vary, the baseline cell, the gate's settings
and the dataset's slices.

```yaml
name: gsm8k-migration
spec: gsm8k.yaml                 # the base eval spec, relative to this file
axes:
  model.name: [175b_verification, 175b_finetuning, 6b_verification]   # a key: its values
  prompt:                        # or labelled variants: label -> {dotted.key: value}
    plain: {}
    terse: {prompt: "Q: {{ question }}"}
baseline: 175b_verification/plain   # the cell every other cell is gated against
gate: {test: non-inferiority, margin: 0.02, confidence: 0.95, correction: holm}
slices: {field: level, must_not_regress: [hard]}
```

Each cell is the base spec with its labels' overrides applied (in axis order, as
``--set dotted.key=value`` would), so it is an ordinary run with its own identity hash and
run directory. A cell's name is its labels joined by ``/`` in axis order.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from gradetrail.errors import SpecError
from gradetrail.spec.base import _Strict
from gradetrail.spec.field_errors import format_errors
from gradetrail.spec.loading import not_this_kind

__all__ = ["SweepCell", "SweepGate", "SweepSlices", "SweepSpec", "load_sweep", "models_sweep"]

_NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
#: cells one sweep may hold (each is a whole run)
MAX_CELLS = 1000


class SweepGate(_Strict):
    """The paired comparison of every cell with the baseline (as ``gradetrail gate``)."""

    test: Literal["non-inferiority", "superiority", "equivalence"] = Field(
        "non-inferiority", description="The test each candidate cell takes."
    )
    margin: float | None = Field(
        None,
        ge=0,
        lt=1,
        allow_inf_nan=False,
        description="Margin on the score scale (default 0.02; superiority 0).",
    )
    confidence: float = Field(0.95, gt=0, lt=1, description="Two-sided confidence.")
    correction: Literal["holm", "bonferroni", "none"] = Field(
        "holm", description="Multiplicity correction over every comparison of the sweep."
    )
    method: Literal["auto", "tango", "t", "z"] = Field("auto", description="Paired interval.")
    errors: Literal["refuse", "as-fail", "exclude"] = Field(
        "refuse",
        description="Rows in an error state: refuse; as-fail (the candidate's score 0, the "
        "baseline's are left out); exclude (their samples from both runs).",
    )


class SweepSlices(_Strict):
    """Groups of samples named by a dataset field: a value names the sample's slice, a
    list of values (tags) puts it in each."""

    field: str = Field(min_length=1, description="The dataset field naming each row's slice.")
    must_not_regress: list[str] = Field(
        default_factory=list,
        description="Slices gated like the whole (in the same family): a cell that passes "
        "overall but fails one of these fails.",
    )


class SweepSpec(_Strict):
    """One sweep: see the module docstring."""

    name: str = Field(pattern=_NAME_RE, max_length=100, description="Names the sweep.")
    description: str | None = None
    spec: str = Field(min_length=1, description="The base eval spec, relative to this file.")
    axes: dict[str, Any] = Field(
        description="Axis name -> labelled variants (label -> {dotted.key: value}), or a "
        "dotted spec key -> the list of its values."
    )
    baseline: str | None = Field(
        None, description="The baseline cell's name (labels joined by /); default the first."
    )
    gate: SweepGate = Field(default_factory=SweepGate)
    slices: SweepSlices | None = None
    max_cost_usd: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="A hard ceiling on what the whole sweep spends, USD (every cell's "
        "calls, judges included, re-runs after a kill too): no call starts that could pass "
        "it. A cell's own run.max_cost_usd still holds within it.",
    )

    @field_validator("axes")
    @classmethod
    def _axes_shape(cls, axes: dict[str, Any]) -> dict[str, Any]:
        if not axes:
            raise ValueError("name at least one axis, e.g. model.name: [a, b]")
        for axis, variants in axes.items():
            if not isinstance(variants, list | dict) or (
                isinstance(variants, dict)
                and not all(
                    isinstance(v, dict) and all(isinstance(k, str) for k in v)
                    for v in variants.values()
                )
            ):
                raise ValueError(
                    f"axis {axis!r} must be a list of values (model.name: [a, b]) or labelled "
                    "variants (label: {dotted.key: value})"
                )
            if not variants:
                raise ValueError(f"axis {axis!r} has no values; give at least one")
            labels = [str(v) for v in variants] if isinstance(variants, list) else list(variants)
            if len(set(labels)) != len(labels):
                raise ValueError(f"axis {axis!r} repeats a value; give each once")
            for label in labels:
                if "/" in label or not label.strip():
                    raise ValueError(
                        f"axis {axis!r}: label {label!r} may not be empty or hold '/' "
                        "(it joins a cell's labels); rename it"
                    )
            if isinstance(variants, list):
                if any(isinstance(v, dict | list) for v in variants):
                    raise ValueError(
                        f"axis {axis!r}: a list axis takes plain values; give labelled "
                        "variants (label: {dotted.key: value}) for structured ones"
                    )
                if "" in axis.split("."):
                    raise ValueError(f"axis {axis!r} is not a dotted spec key")
        return axes

    @model_validator(mode="after")
    def _cells_bounded(self) -> SweepSpec:
        n = 1
        for variants in self.axes.values():
            n *= len(variants)
        if n > MAX_CELLS:
            raise ValueError(f"{n} cells is over the limit of {MAX_CELLS}; split the sweep")
        return self

    _source: str = "<sweep>"
    _base_dir: Path = Path(".")
    #: dotted.key=value overrides every cell gets after its axes' (``gradetrail run
    #: --models``' --label, --require-approval, --start-over-budget); not in the file
    _settings: tuple[str, ...] = ()

    @property
    def settings(self) -> tuple[str, ...]:
        """Overrides applied to the base spec of every cell (before its axes')."""
        return self._settings

    @property
    def source(self) -> str:
        """The sweep file as given (for error messages)."""
        return self._source

    @property
    def spec_path(self) -> Path:
        """The base spec's path, resolved against the sweep file's directory."""
        p = Path(self.spec).expanduser()
        return p if p.is_absolute() else self._base_dir / p

    def with_max_cost(self, usd: float) -> SweepSpec:
        """This sweep with ``max_cost_usd`` set to ``usd`` (``--max-cost``)."""
        copy = self.model_copy(update={"max_cost_usd": usd})
        copy._source, copy._base_dir, copy._settings = self._source, self._base_dir, self._settings
        return copy

    def cells(self) -> list[SweepCell]:
        """Every cell, the first axis varying slowest; labels in axis order."""
        per_axis: list[list[tuple[str, dict[str, Any]]]] = []
        for axis, variants in self.axes.items():
            if isinstance(variants, list):
                per_axis.append([(str(v), {axis: v}) for v in variants])
            else:
                per_axis.append([(label, dict(sets)) for label, sets in variants.items()])
        out = []
        for combo in itertools.product(*per_axis):
            sets: dict[str, Any] = {}
            for _, variant in combo:
                sets.update(variant)
            labels = tuple(label for label, _ in combo)
            overrides = self._settings + tuple(f"{k}={json.dumps(v)}" for k, v in sets.items())
            out.append(SweepCell("/".join(labels), labels, overrides))
        return out

    def baseline_cell(self) -> SweepCell:
        """The baseline cell (``baseline``, else the first).

        Raises:
            SpecError: ``baseline`` names no cell.
        """
        cells = self.cells()
        if self.baseline is None:
            return cells[0]
        return self.find(self.baseline, "baseline")

    def candidate_cell(self, name: str, what: str, baseline: str | None = None) -> SweepCell:
        """The cell ``name`` as the candidate that must pass, against ``baseline`` (a
        cell's name or label; default the sweep's).

        Raises:
            SpecError: no such cell, or it is the baseline (never gated: it can never pass).
        """
        base = self.find(baseline, "--baseline") if baseline else self.baseline_cell()
        cell = self.find(name, what)
        if cell == base:
            raise SpecError(
                f"{what} {name} is the baseline cell ({base.name}): it is not gated, so it "
                "can never pass; name a candidate cell, or another baseline"
            )
        return cell

    def find(self, name: str, what: str) -> SweepCell:
        """The cell called ``name``; a single label is enough when only one cell has it.

        Raises:
            SpecError: no cell, or several, answer to ``name``.
        """
        cells = self.cells()
        exact = [c for c in cells if c.name == name]
        matches = exact or [c for c in cells if name in c.labels]
        if len(matches) == 1:
            return matches[0]
        shown = ", ".join(c.name for c in (matches or cells)[:6])
        if matches:
            raise SpecError(
                f"{self.source}: {what} {name!r} names {len(matches)} cells "
                f"({shown}); name one as label/label"
            )
        raise SpecError(f"{self.source}: {what} {name!r} is not a cell; the cells are {shown}")


@dataclass(frozen=True)
class SweepCell:
    """One cell of a sweep.

    Attributes:
        name: its labels joined by ``/``.
        labels: one label per axis, in axis order.
        overrides: ``dotted.key=value`` strings (values as JSON) applied to the base spec.
    """

    name: str
    labels: tuple[str, ...]
    overrides: tuple[str, ...]


def load_sweep(path: str | Path) -> SweepSpec:
    """Read and validate a sweep file.

    Raises:
        SpecError: unreadable file, invalid YAML or a field error, one line each naming
            the file, the field and the fix.
    """
    path = Path(path)
    if (refusal := not_this_kind(path, None, "sweep")) is not None:
        raise SpecError(refusal)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(f"{path}: sweep file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{path}: cannot read the sweep file ({exc})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise SpecError(f"{path}:{where}: invalid YAML; fix the syntax") from None
    if (refusal := not_this_kind(path, raw, "sweep")) is not None:
        raise SpecError(refusal)
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: a sweep must be a mapping with name, spec and axes")
    try:
        sweep = SweepSpec.model_validate(raw)
    except ValidationError as exc:
        lines = format_errors(str(path), exc.errors(), SweepSpec)
        error = SpecError("\n".join(lines))
        error.problems = lines
        raise error from None
    sweep._source = str(path)
    sweep._base_dir = path.resolve().parent
    if sweep.baseline is not None:
        sweep.baseline_cell()  # names a cell, or a one-line error now
    return sweep


def models_sweep(
    spec_path: str | Path,
    models: list[str],
    baseline: str | None = None,
    *,
    settings: list[str] | None = None,
    max_cost_usd: float | None = None,
) -> SweepSpec:
    """The sweep of ``gradetrail run SPEC --models a,b,c``: one cell a model name, named
    after the spec, the first model (or ``baseline``) the baseline; ``settings``
    (``dotted.key=value``) applied to every cell, ``max_cost_usd`` the whole sweep's
    ceiling.

    Raises:
        SpecError: no model, a model named twice, the spec cannot be read, or a baseline
            that is not one of the models.
    """
    from gradetrail.spec.loading import load_spec

    path = Path(spec_path)
    names = [m.strip() for m in models if m.strip()]
    if not names:
        raise SpecError("--models: name at least one model, e.g. --models gpt-4o,gpt-4.1")
    name = load_spec(path, list(settings or ())).name
    raw: dict[str, Any] = {"name": name, "spec": str(path.resolve()), "axes": {"model.name": names}}
    if baseline is not None:
        raw["baseline"] = baseline
    if max_cost_usd is not None:
        raw["max_cost_usd"] = max_cost_usd
    try:
        sweep = SweepSpec.model_validate(raw)
    except ValidationError as exc:
        message = exc.errors()[0]["msg"].removeprefix("Value error, ")  # pydantic's wording
        raise SpecError(f"--models: {message}") from None
    sweep._source = f"{path} --models"
    sweep._base_dir = Path.cwd()
    sweep._settings = tuple(settings or ())
    sweep.baseline_cell()
    return sweep
