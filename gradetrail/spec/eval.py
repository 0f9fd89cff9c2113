"""The whole spec, :class:`EvalSpec`: name, dataset, templates, model, scorer, run; and its
JSON Schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from gradetrail.spec.base import _Strict
from gradetrail.spec.dataset import DatasetSpec
from gradetrail.spec.model import ModelSpec
from gradetrail.spec.run import RunSettings
from gradetrail.spec.scorer import ScorerSpec

_NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class EvalSpec(_Strict):
    """One eval: a dataset, a prompt template, a model and a scorer."""

    name: str = Field(
        pattern=_NAME_RE, max_length=100, description="Eval name; names the results directory."
    )
    description: str | None = Field(None, description="Free text.")
    dataset: DatasetSpec
    prompt: str = Field(description="Jinja2 template of the user message over the row's fields.")
    system: str | None = Field(None, description="Jinja2 template of the system prompt.")
    target: str | None = Field(
        None,
        description="Jinja2 template of the expected answer, e.g. "
        "\"{{ answer.split('####')[-1] | trim }}\".",
    )
    model: ModelSpec
    scorer: ScorerSpec
    run: RunSettings = Field(default_factory=RunSettings)

    #: directory the spec was loaded from; relative paths resolve against it
    _base_dir: Path = Path(".")
    #: the spec file, for error messages
    _source: str = "<spec>"

    @property
    def base_dir(self) -> Path:
        """Directory that relative paths in the spec are resolved against."""
        return self._base_dir

    @property
    def source(self) -> str:
        """The spec file's path as given (for error messages)."""
        return self._source

    def resolve(self, path: str) -> Path:
        """Resolve a spec-relative path."""
        p = Path(path).expanduser()
        return p if p.is_absolute() else self._base_dir / p


def spec_json_schema() -> dict[str, Any]:
    """The JSON Schema of a spec file (for editors); a JSON-ready dict."""
    schema = EvalSpec.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "gradetrail eval spec"
    return schema
