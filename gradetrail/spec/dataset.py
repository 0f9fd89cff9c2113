"""The ``dataset:`` section: where the samples come from, ids, shuffle, limit, labels."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from gradetrail.spec.base import _Strict


class DatasetSpec(_Strict):
    """Where the samples come from."""

    path: str = Field(description="JSONL file, one JSON object a line; relative to the spec file.")
    id_field: str = Field(
        "id",
        description="Row field holding the sample id; rows without it get their 1-based line "
        "number. Ids are assigned before shuffle_seed or limit apply.",
    )
    shuffle_seed: int | None = Field(None, description="Shuffle the samples with this seed.")
    limit: int | None = Field(None, ge=1, description="Keep only the first N samples.")
    cluster_field: str | None = Field(
        None,
        description="Row field grouping samples that are not independent (e.g. several "
        "questions about one passage); enables clustered standard errors.",
    )
    label_field: str | None = Field(
        None,
        description="Dotted path to the row's human label (e.g. '{model}.is_correct'; "
        "'{model}' is replaced by model.name). When set, the summary and manifest report "
        "the scorer's agreement with it: accuracy, Cohen's kappa and confusion counts.",
    )
    messages_field: str | None = Field(
        None,
        description="Row field holding the whole conversation, OpenAI shape: [{role, "
        "content}] (assistant tool_calls and tool messages allowed).",
    )
    tools_field: str | None = Field(
        None,
        description="Row field holding this sample's tool definitions (the same shape as "
        "the spec's tools:); they replace the spec's tools for that sample.",
    )
    label_map: dict[str, float] | None = Field(
        None,
        description="Label value -> score in [0, 1], keyed by the label's text (true, false, "
        "'correct', '3'). Default: true -> 1, false -> 0, numbers in [0, 1] as they are.",
    )

    @field_validator("label_map", mode="before")
    @classmethod
    def _label_keys_as_text(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {label_text(k): v for k, v in value.items()}
        return value

    @model_validator(mode="after")
    def _label_fields(self) -> DatasetSpec:
        if self.label_map is not None and self.label_field is None:
            raise ValueError("label_map needs label_field; name the row field holding the label")
        for key, score in (self.label_map or {}).items():
            if not 0.0 <= score <= 1.0:
                raise ValueError(f"label_map[{key!r}] is {score}; map labels to scores in [0, 1]")
        return self


def label_text(value: Any) -> str:
    """The text a label value is looked up by in ``label_map``: JSON's spelling for
    booleans and null (``true``, ``false``, ``null``), ``3`` for ``3.0``, else ``str``."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
