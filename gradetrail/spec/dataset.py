"""The ``dataset:`` section: where the samples come from (a file of one of the formats, or
a Hugging Face dataset), field renaming, ids, shuffle, limit, labels."""

from __future__ import annotations

from pathlib import PurePath
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from gradetrail.spec.base import _Strict

DatasetFormat = Literal["jsonl", "json", "csv", "tsv", "parquet"]
ColumnType = Literal["str", "int", "float", "bool", "json"]

#: file extension -> format, when dataset.format is not given
EXTENSIONS: dict[str, DatasetFormat] = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".csv": "csv",
    ".tsv": "tsv",
    ".parquet": "parquet",
    ".pq": "parquet",
}
#: extensions of compressed files, which no format reads as they are
COMPRESSED_EXTENSIONS = (".gz", ".bz2", ".xz", ".zst", ".zip", ".lz4", ".7z")


class HFSpec(_Strict):
    """A Hugging Face dataset, read through the ``datasets`` library
    (``pip install 'gradetrail[hf]'``)."""

    path: str = Field(
        description="A Hub dataset ('openai/gsm8k'), a builder for local data files ('csv', "
        "'json', 'parquet' with data_files), or a directory written by save_to_disk "
        "(read with load_from_disk; relative to the spec file)."
    )
    name: str | None = Field(None, description="The configuration (subset), e.g. 'main'.")
    split: str | None = Field(
        None, description="The split, e.g. 'test'; required when the dataset has several."
    )
    revision: str | None = Field(
        None,
        description="The Hub commit to read; pin it with a commit SHA (a branch or tag moves, "
        "and an unpinned run warns with the SHA it read).",
    )
    data_files: str | list[str] | dict[str, str | list[str]] | None = Field(
        None, description="Local data files for a builder (relative to the spec file)."
    )


#: how far a hash split's fractions may sum from 1 (rounding in a YAML file)
FRACTION_TOLERANCE = 1e-6


class SplitSpec(_Strict):
    """``dataset.split``: named lists of sample ids, and the one this run uses.

    The lists come from a split file (JSON ``{"train": [ids], "test": [ids]}``, written
    by ``gradetrail split``) or from a deterministic hash split (each id's SHA-256 with
    ``seed`` placed in ``[0, 1)`` and cut by ``fractions``), and are checked against the
    dataset before any call (unknown ids, an id in two splits, an id twice). The split
    applies after ids are assigned and before ``shuffle_seed`` and ``limit``; the ids it
    selects enter the run's identity hash and its manifest.
    """

    name: str = Field(description="The split this run uses, e.g. 'train' or 'test'.")
    file: str | None = Field(
        None,
        description="A split file, relative to the spec file: a JSON object of split name "
        "-> list of sample ids (gradetrail split writes one). Give file, or seed and "
        "fractions.",
    )
    seed: int | None = Field(None, description="The hash split's seed (with fractions).")
    fractions: dict[str, float] | None = Field(
        None,
        description="The hash split: split name -> fraction of the ids, each in (0, 1], "
        "summing to 1, e.g. {train: 0.8, test: 0.2}. An id's split depends only on the "
        "id and the seed, so adding rows never moves another id.",
    )
    held_out: str | None = Field(
        None,
        description="The split a loop reports on and never tunes on, e.g. 'test': each "
        "run on it of another identity is a look, recorded in a ledger beside the split "
        "file (or the spec), <name>.looks.jsonl.",
    )
    max_looks: int | None = Field(
        None,
        ge=1,
        description="Runs of different identities the held-out split may have (the "
        "baseline and the best candidate: 2); one more is refused, exit 2. Each look at a "
        "held-out set spends its independence: a loop that keeps what scores best there "
        "tunes on it.",
    )

    @model_validator(mode="after")
    def _held_out(self) -> SplitSpec:
        if self.max_looks is not None and self.held_out is None:
            raise ValueError("dataset.split.max_looks needs dataset.split.held_out (e.g. test)")
        if self.fractions is not None and self.held_out not in (None, *self.fractions):
            raise ValueError(
                f"dataset.split.held_out {self.held_out!r} is not one of the fractions' splits "
                f"({', '.join(self.fractions)}); name one of them"
            )
        return self

    @model_validator(mode="after")
    def _one_source(self) -> SplitSpec:
        if (self.file is None) == (self.fractions is None):
            raise ValueError(
                "give dataset.split.file (a split file) or dataset.split.fractions with a "
                "seed, not both or none"
            )
        if self.file is not None and self.seed is not None:
            raise ValueError("dataset.split.seed applies to fractions; remove it or the file")
        if self.fractions is not None:
            if self.seed is None:
                raise ValueError("dataset.split.fractions needs a seed, e.g. seed: 0")
            for key, value in self.fractions.items():
                if not 0.0 < value <= 1.0:
                    raise ValueError(
                        f"dataset.split.fractions[{key!r}] is {value}; use a fraction in (0, 1]"
                    )
            total = sum(self.fractions.values())
            if abs(total - 1.0) > FRACTION_TOLERANCE:
                raise ValueError(f"dataset.split.fractions sum to {total:g}; make them sum to 1")
            if self.name not in self.fractions:
                raise ValueError(
                    f"dataset.split.name {self.name!r} is not one of the fractions' splits "
                    f"({', '.join(self.fractions)}); name one of them"
                )
        return self


class DatasetSpec(_Strict):
    """Where the samples come from."""

    path: str | None = Field(
        None,
        description="The dataset file, relative to the spec file: .jsonl, .json (an array of "
        "objects), .csv, .tsv or .parquet (the format is read from the extension, or "
        "dataset.format). Give path or hf.",
    )
    format: DatasetFormat | None = Field(
        None, description="The file's format, when its extension does not say it."
    )
    hf: HFSpec | None = Field(None, description="A Hugging Face dataset, instead of path.")
    fields: dict[str, str] = Field(
        default_factory=dict,
        description="Rename columns for the templates: {name in templates: column in the "
        "dataset}, e.g. {question: problem}. Other columns keep their names; id_field, "
        "cluster_field and label_field name the renamed row.",
    )
    types: dict[str, ColumnType] = Field(
        default_factory=dict,
        description="CSV/TSV only: the file's column -> str, int, float, bool (true/false, "
        "yes/no, 1/0) or json. Undeclared columns stay strings; an empty cell in a declared "
        "column is null.",
    )
    id_field: str = Field(
        "id",
        description="Row field holding the sample id; rows without it get their 1-based "
        "position in the source (for JSONL, the line number). Ids are assigned before "
        "shuffle_seed or limit apply. Only the default may be absent: a field named here "
        "that the first row lacks is refused.",
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
        "the spec's tools:); they replace the spec's tools for that sample (rows without the "
        "field use the spec's).",
    )
    label_map: dict[str, float] | None = Field(
        None,
        description="Label value -> score in [0, 1], keyed by the label's text (true, false, "
        "'correct', '3'). Default: true -> 1, false -> 0, numbers in [0, 1] as they are.",
    )
    split: SplitSpec | None = Field(
        None,
        description="Run one named split of the ids (from a split file, or a seeded hash "
        "split): tune on one, report on another. Applied before shuffle_seed and limit.",
    )

    @field_validator("label_map", mode="before")
    @classmethod
    def _label_keys_as_text(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {label_text(k): v for k, v in value.items()}
        return value

    def file_format(self) -> DatasetFormat | None:
        """The format of ``path``: ``format`` if given, else by extension (None when
        neither says)."""
        if self.format is not None or self.path is None:
            return self.format
        return EXTENSIONS.get(PurePath(self.path).suffix.lower())

    @model_validator(mode="after")
    def _source_fields(self) -> DatasetSpec:
        if (self.path is None) == (self.hf is None):
            raise ValueError("give either dataset.path (a file) or dataset.hf, not both or none")
        if self.hf is not None and self.format is not None:
            raise ValueError("format applies to dataset.path; a Hugging Face dataset has its own")
        if self.path is not None and self.file_format() is None:
            suffix = PurePath(self.path).suffix.lower()
            if suffix in COMPRESSED_EXTENSIONS:
                raise ValueError(
                    f"{self.path!r} is compressed ({suffix}), which gradetrail does not read; "
                    "decompress it and set dataset.path to the file it gives"
                )
            raise ValueError(
                f"cannot tell the format of {self.path!r} from its extension; set "
                "dataset.format: jsonl, json, csv, tsv or parquet"
            )
        if self.types and self.file_format() not in ("csv", "tsv"):
            raise ValueError(
                "types applies to CSV and TSV files only; other formats keep their own types"
            )
        names = list(self.fields)
        sources = list(self.fields.values())
        if len(set(sources)) != len(sources):
            raise ValueError("two fields rename the same column; rename each column once")
        for name in names:
            if not name:
                raise ValueError("an empty field name cannot be used in templates")
        return self

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
