"""Hugging Face datasets, through the ``datasets`` library (``pip install
'gradetrail[hf]'``), imported only when a spec names ``dataset.hf``.

``hf.path`` is one of:

- a directory written by ``save_to_disk`` (it holds ``state.json`` or
  ``dataset_dict.json``), read with ``load_from_disk``;
- a builder for local data files (``csv``, ``json``, ``parquet``... with
  ``hf.data_files``) or a local directory of data files, read with the builder
  ``load_dataset`` uses;
- a Hub dataset (``openai/gsm8k``), with ``name``, ``split`` and ``revision``.

Identity is honest: a Hub dataset enters the identity hash through the commit SHA its
revision resolved to and the data fingerprint, never its name; local data files through
their bytes' SHA-256; a ``save_to_disk`` directory through its arrow files' SHA-256 and
its fingerprint. A Hub dataset read without a pinned revision (a commit SHA) gets a
warning naming the SHA to pin. A row's position (its id without an id field) is its
1-based row number in the split.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradetrail.datasets.base import Row, file_sha256
from gradetrail.errors import DatasetError
from gradetrail.spec.dataset import HFSpec

__all__ = ["HFSource"]

BATCH_ROWS = 1024
_SHA = re.compile(r"^[0-9a-f]{7,40}$")


def _import_datasets(where: str) -> Any:
    try:
        import datasets
    except ImportError:
        raise DatasetError(
            f"{where}: dataset.hf needs the datasets library, which is not installed; "
            "pip install 'gradetrail[hf]'"
        ) from None
    return datasets


@contextlib.contextmanager
def _quiet(datasets: Any) -> Iterator[None]:
    """No progress bars or warnings from datasets / huggingface_hub on our stderr (errors
    become one line of ours); the caller's settings are restored after."""
    import huggingface_hub.utils as hub_utils

    bars_off = datasets.utils.is_progress_bar_enabled() is False
    level = datasets.utils.logging.get_verbosity()
    hub_level = hub_utils.logging.get_verbosity()
    datasets.disable_progress_bars()
    datasets.utils.logging.set_verbosity_error()
    hub_utils.logging.set_verbosity_error()
    try:
        yield
    finally:
        datasets.utils.logging.set_verbosity(level)
        hub_utils.logging.set_verbosity(hub_level)
        if not bars_off:
            datasets.enable_progress_bars()


@dataclass
class HFSource:
    """A Hugging Face dataset (see :class:`~gradetrail.datasets.base.Source`).

    Args:
        spec: the spec's ``dataset.hf`` section.
        base_dir: the directory relative paths resolve against.
    """

    spec: HFSpec
    base_dir: Path
    format: str = "hf"
    locator: str = "row"
    warnings: list[str] = field(default_factory=list)
    _dataset: Any = field(default=None, repr=False)
    _identity: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def where(self) -> str:
        parts = [p for p in (self.spec.name, self.split_name) if p]
        return f"hf {self.spec.path}" + (f" [{'/'.join(parts)}]" if parts else "")

    @property
    def split_name(self) -> str | None:
        return self._identity.get("split", self.spec.split)

    def rows(self) -> Iterator[Row]:
        """Yield each row of the split, a batch at a time (the data stays memory-mapped).

        Raises:
            DatasetError: see :meth:`load`.
        """
        ds = self.load()
        position = 0
        for batch in ds.iter(batch_size=BATCH_ROWS):
            columns = list(batch)
            for values in zip(*(batch[c] for c in columns), strict=True):
                position += 1
                yield Row(position, position, dict(zip(columns, values, strict=True)))

    def content_hash(self) -> str:
        """SHA-256 over the resolved revision and fingerprint (Hub), or the files' hashes."""
        from gradetrail._util.canonical import canonical_json

        self.load()
        return hashlib.sha256(canonical_json(self._identity).encode()).hexdigest()

    def info(self) -> dict[str, Any]:
        """Format, kind (hub, files, disk), split, resolved revision, fingerprint, rows."""
        self.load()
        info = {"format": "hf", **self._identity}
        info.pop("files", None)
        info["rows"] = len(self._dataset)
        info["fingerprint"] = getattr(self._dataset, "_fingerprint", None)
        return info

    # ------------------------------------------------------------------ loading

    def load(self) -> Any:
        """The split as a ``datasets.Dataset`` (loaded once).

        Raises:
            DatasetError: datasets not installed, no network for a Hub dataset, a dataset
                or split that does not exist, an unreadable local dataset.
        """
        if self._dataset is None:
            datasets = _import_datasets(self.where)
            with _quiet(datasets):
                local = self._local_path(self.spec.path)
                if local is not None and _saved_to_disk(local):
                    self._dataset = self._from_disk(datasets, local)
                else:
                    self._dataset = self._from_builder(datasets, local)
        return self._dataset

    def _local_path(self, text: str) -> Path | None:
        path = Path(text).expanduser()
        path = path if path.is_absolute() else self.base_dir / path
        return path if path.exists() else None

    def _from_disk(self, datasets: Any, local: Path) -> Any:
        for key in ("name", "revision", "data_files"):
            if getattr(self.spec, key) is not None:
                raise DatasetError(
                    f"{self.where}: dataset.hf.{key} does not apply to a save_to_disk "
                    "directory (read with load_from_disk); remove it"
                )
        try:
            loaded = datasets.load_from_disk(str(local))
        except Exception as exc:  # noqa: BLE001 - any failure of the library is one line
            raise DatasetError(
                f"{self.where}: cannot load_from_disk ({_first_line(exc)})"
            ) from None
        ds = self._pick_split(loaded)
        files = {Path(f["filename"]).name: file_sha256(Path(f["filename"])) for f in ds.cache_files}
        self._identity = {
            "kind": "disk",
            "split": self._identity.get("split"),
            "fingerprint": ds._fingerprint,
            "files": files,
        }
        return ds

    def _from_builder(self, datasets: Any, local: Path | None) -> Any:
        spec = self.spec
        hub = local is None and spec.path not in _packaged(datasets)
        if not hub and spec.revision is not None:
            raise DatasetError(
                f"{self.where}: dataset.hf.revision applies to Hub datasets, not local files; "
                "remove it"
            )
        try:
            builder = datasets.load_dataset_builder(
                str(local) if local is not None else spec.path,
                name=spec.name,
                revision=spec.revision,
                data_files=self._data_files(),
            )
            builder.download_and_prepare()
        except ConnectionError as exc:
            raise DatasetError(
                f"{self.where}: cannot reach the Hugging Face Hub ({_first_line(exc)}); "
                "without network, load the dataset where there is one, save_to_disk, and set "
                "dataset.hf.path to that directory (read with load_from_disk)"
            ) from None
        except Exception as exc:  # noqa: BLE001 - the library raises many kinds
            raise DatasetError(f"{self.where}: cannot load ({_first_line(exc)})") from None
        splits = list(builder.info.splits or {})
        split = self._split_of(splits)
        try:
            ds = builder.as_dataset(split=split)
        except Exception as exc:  # noqa: BLE001
            raise DatasetError(
                f"{self.where}: cannot read split {split!r} ({_first_line(exc)})"
            ) from None
        if hub:
            self._identity = {
                "kind": "hub",
                "revision": builder.hash,
                "name": builder.config.name,
                "split": split,
                "fingerprint": ds._fingerprint,
            }
            if spec.revision is None or not _SHA.match(spec.revision):
                self.warnings.append(
                    f"dataset.hf: {spec.path} revision is not pinned "
                    f"({spec.revision or 'the default branch'}); it resolved to {builder.hash}: "
                    f"pin it with dataset.hf.revision: {builder.hash}"
                )
        else:
            files = sorted(
                {str(f) for fs in (builder.config.data_files or {}).values() for f in fs}
            )
            self._identity = {
                "kind": "files",
                "builder": builder.name,
                "name": builder.config.name,
                "split": split,
                "files": {
                    Path(f).name + f"#{i}": file_sha256(Path(f)) for i, f in enumerate(files)
                },
            }
        return ds

    def _data_files(self) -> Any:
        """``hf.data_files`` with relative paths resolved against the spec's directory."""

        def resolve(text: str) -> str:
            path = Path(text).expanduser()
            return str(path if path.is_absolute() else self.base_dir / path)

        files = self.spec.data_files
        if files is None:
            return None
        if isinstance(files, str):
            return resolve(files)
        if isinstance(files, list):
            return [resolve(f) for f in files]
        return {
            k: resolve(v) if isinstance(v, str) else [resolve(f) for f in v]
            for k, v in files.items()
        }

    def _pick_split(self, loaded: Any) -> Any:
        """The Dataset of ``hf.split`` from a DatasetDict (a Dataset is its own split)."""
        if not hasattr(loaded, "keys"):  # a Dataset saved alone
            if self.spec.split is not None and str(loaded.split) != self.spec.split:
                raise DatasetError(
                    f"{self.where}: split {self.spec.split!r} does not exist; this directory "
                    f"holds one dataset (split {loaded.split}); remove dataset.hf.split"
                )
            self._identity["split"] = str(loaded.split) if loaded.split is not None else None
            return loaded
        split = self._split_of(list(loaded.keys()))
        self._identity["split"] = split
        return loaded[split]

    def _split_of(self, splits: list[str]) -> str:
        """``hf.split`` if the dataset has it, the only split when none is named."""
        split = self.spec.split
        if split is None:
            if len(splits) == 1:
                return splits[0]
            raise DatasetError(
                f"{self.where}: the dataset has splits {', '.join(splits) or '(none)'}; name one "
                "in dataset.hf.split"
            )
        base = re.split(r"[\[+]", split, maxsplit=1)[0]  # "test[:100]" slices "test"
        if splits and base not in splits:
            raise DatasetError(
                f"{self.where}: split {split!r} does not exist; splits: {', '.join(splits)}"
            )
        return split


def _saved_to_disk(path: Path) -> bool:
    return path.is_dir() and any(
        (path / name).is_file() for name in ("state.json", "dataset_dict.json")
    )


def _packaged(datasets: Any) -> set[str]:
    """The builders for local data files (csv, json, parquet, text, arrow...)."""
    from datasets.packaged_modules import _PACKAGED_DATASETS_MODULES

    return set(_PACKAGED_DATASETS_MODULES)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
