"""The ``replay`` provider: completions recorded elsewhere, matched to samples by id.

A recordings file is JSONL; each row's id follows the dataset rule (``id_field``, else
the 1-based line number) and ``response_field`` is a dotted path to the text, in which
``{model}`` stands for ``model.name`` (so one file can hold several models' outputs).
``match_fields`` names fields a recording shares with its sample's row (``question``):
every sample's are compared before any call, so recordings out of step with the dataset
(a line removed, where ids are line numbers) stop the run instead of answering other
samples' questions.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Sequence
from typing import Any

from gradetrail._util.files import not_a_file, path_fix
from gradetrail.datasets import Sample, file_sha256, iter_jsonl
from gradetrail.datasets.ids import DEFAULT_ID_FIELD
from gradetrail.errors import BadRequest, DatasetError, SpecError
from gradetrail.providers.base import Provider, Request, Response

__all__ = ["ReplayProvider"]


class ReplayProvider(Provider):
    """Serves recorded completions; a sample with no recording is a ``BadRequest``
    (a ``provider_error`` row naming the id), never a crash."""

    name = "replay"
    keyed_by_sample = True
    billed = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        assert self.model.recordings is not None  # the spec validator guarantees it
        self.source = self.model.recordings
        self.path = self.base_dir / self.source.path
        self.field_path = self.source.response_field.replace("{model}", self.model.name).split(".")
        self._texts: dict[str, str | None] | None = None
        #: sample id -> (line, the recording's match_fields values), read with the texts
        self._matched: dict[str, tuple[int, tuple[Any, ...]]] = {}
        self._hash: str | None = None

    def check_ready(self) -> None:
        """Check the recordings file exists and its first row has text at
        ``response_field`` (a wrong ``model.name`` would otherwise fail every sample).

        Raises:
            DatasetError: the file is missing, its first row is malformed or lacks an
                id_field the spec names.
            SpecError: the first recording has no text at ``response_field``.
        """
        problem = not_a_file(self.path)
        if problem is not None:
            raise DatasetError(
                f"model.recordings.path: {self.path} {problem}; "
                f"{path_fix(self.source.path, self.base_dir)}"
            )
        _, _, first = next(self._recordings(), (None, None, {}))
        value: Any = first
        for depth, part in enumerate(self.field_path):
            if not isinstance(value, dict) or part not in value:
                where = ".".join(self.field_path[:depth]) or "the row"
                have = ", ".join(sorted(value)) if isinstance(value, dict) else "no fields"
                raise SpecError(
                    f"model.recordings.response_field: the first recording has no "
                    f"'{'.'.join(self.field_path)}' ({where} has {have}); "
                    + self._fix(part if isinstance(value, dict) else None, value)
                )
            value = value[part]

    def _fix(self, part: str | None, found: Any) -> str:
        """What to fix when the first recording lacks ``part``: the model name it most
        likely misspells when ``part`` is what ``{model}`` became, else both settings."""
        template = self.source.response_field.split(".")
        at = self.field_path.index(part) if part is not None else len(template)
        if at < len(template) and template[at] == "{model}":
            close = difflib.get_close_matches(part or "", sorted(found), n=1, cutoff=0.6)
            if close:
                return f"did you mean model.name: {close[0]}?"
        return "check model.name and response_field"

    def warm_up(self) -> None:
        """Read every recording now, so a malformed line or a duplicate id stops the run
        before its directory exists (not in the middle of it).

        Raises:
            DatasetError: a line that is not a JSON object, or a duplicate id.
        """
        if self._texts is None:
            self._texts = self._load()

    def identity(self) -> dict[str, Any]:
        """The recordings file's content hash and the response field: a changed file or
        field misses the cache."""
        if self._hash is None:
            self._hash = file_sha256(self.path)
        return {"recordings_sha256": self._hash, "response_field": ".".join(self.field_path)}

    def _recordings(self) -> Iterator[tuple[str, int, dict[str, Any]]]:
        """The recordings' ``(sample id, line, row)``; an ``id_field`` other than the
        default ``id`` must be in the first row."""
        named = self.source.id_field != DEFAULT_ID_FIELD
        return iter_jsonl(
            self.path, self.source.id_field, "model.recordings.id_field" if named else None
        )

    def _load(self) -> dict[str, str | None]:
        texts: dict[str, str | None] = {}
        fields = self.source.match_fields
        for sample_id, line, row in self._recordings():
            value: Any = row
            for part in self.field_path:
                value = value.get(part) if isinstance(value, dict) else None
            texts[sample_id] = value if isinstance(value, str) else None
            if fields:
                self._matched[sample_id] = (line, tuple(row.get(f, _ABSENT) for f in fields))
        return texts

    def check_samples(self, samples: Sequence[Sample]) -> None:
        """Hold every sample's row against its recording on ``match_fields`` (nothing
        without them). A sample without a recording is left to its own row's
        ``missing_recording`` error.

        Raises:
            DatasetError: a recording whose field differs from its sample's, naming both
                and the recording's line.
        """
        fields = self.source.match_fields
        if not fields:
            return
        self.warm_up()
        matched = self._matched
        for sample in samples:
            found = matched.get(sample.id)
            if found is None:
                continue
            line, values = found
            for field, recorded in zip(fields, values, strict=True):
                want = sample.row.get(field, _ABSENT)
                if recorded != want or recorded is _ABSENT:
                    raise DatasetError(
                        f"model.recordings.match_fields: the recording for sample "
                        f"{sample.id!r} (line {line} of {self.source.path}) has {field} "
                        f"{_shown(recorded)} where the dataset's row has {_shown(want)}: the "
                        "recordings are out of step with the dataset (a line added or "
                        "removed?); give both files an id field, or line them up"
                    )

    async def complete(self, request: Request) -> Response:
        """Return the recording for ``request.sample_id``.

        Raises:
            BadRequest: no recording for the id, or no text at ``response_field``.
        """
        if self._texts is None:
            self._texts = self._load()
        if request.sample_id not in self._texts:
            raise BadRequest(
                f"no recording for sample id {request.sample_id!r} in {self.source.path}",
                error_type="missing_recording",
            )
        text = self._texts[request.sample_id]
        if text is None:
            field = ".".join(self.field_path)
            raise BadRequest(
                f"recording for sample id {request.sample_id!r} has no text at '{field}'",
                error_type="missing_recording",
            )
        return Response(text=text, served_model=self.model.name)


#: a field a row does not have
_ABSENT = object()


def _shown(value: Any) -> str:
    """A field's value in an error line: its repr cut to 60 characters, or ``no value``."""
    if value is _ABSENT:
        return "no value"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
