"""The eval spec: pydantic models of the YAML file, loading, overrides and validation.

A spec is loaded in three steps, each of which can fail with a one-line
:class:`~gradetrail.errors.SpecError` (exit code 2) naming the file, the field and the fix:

1. YAML parsing, then ``--set dotted.key=value`` overrides applied to the raw mapping;
2. pydantic validation (unknown keys get a "did you mean");
3. :func:`check_against_row`: every template and pattern is rendered against the
   dataset's first row, so a missing field or a bad regex stops the run before any
   model call.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gradetrail.errors import SpecError

__all__ = [
    "DatasetSpec",
    "EvalSpec",
    "ExactScorerSpec",
    "ModelSpec",
    "NumericScorerSpec",
    "RegexScorerSpec",
    "ReplaySource",
    "RunSettings",
    "SamplingParams",
    "ScorerSpec",
    "apply_overrides",
    "load_spec",
    "spec_json_schema",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


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


class SamplingParams(_Strict):
    """Sampling parameters sent with every request; all enter the cache key."""

    temperature: float | None = Field(None, ge=0, description="Sampling temperature.")
    max_tokens: int | None = Field(None, ge=1, description="Maximum output tokens.")
    top_p: float | None = Field(None, gt=0, le=1, description="Nucleus sampling mass.")
    stop: list[str] | None = Field(None, description="Stop sequences.")
    seed: int | None = Field(None, description="Sampling seed, where the provider supports it.")
    extra: dict[str, Any] = Field(
        default_factory=dict,
        description="Further provider-specific request fields, passed through verbatim.",
    )


class ReplaySource(_Strict):
    """Recorded completions for the ``replay`` provider."""

    path: str = Field(description="JSONL file of recordings; relative to the spec file.")
    id_field: str = Field(
        "id",
        description="Field holding the sample id; rows without it get their 1-based line number "
        "(the same rule as datasets).",
    )
    response_field: str = Field(
        "{model}",
        description="Dotted path to the completion text in a recording row; '{model}' is "
        "replaced by model.name (e.g. '{model}.solution').",
    )


ProviderName = Literal["replay", "python", "anthropic", "openai", "openai_compatible"]


class ModelSpec(_Strict):
    """The model (or application) under evaluation."""

    provider: ProviderName = Field(description="Which provider serves the requests.")
    name: str = Field(description="Model name as the provider knows it.")
    base_url: str | None = Field(None, description="API endpoint; required for openai_compatible.")
    params: SamplingParams = Field(default_factory=SamplingParams)
    recordings: ReplaySource | None = Field(None, description="Required for provider 'replay'.")
    function: str | None = Field(
        None,
        description="'module:function' for provider 'python'; called with the rendered request.",
    )
    api_key_env: str | None = Field(
        None, description="Environment variable holding the API key (default per provider)."
    )

    @model_validator(mode="after")
    def _provider_fields(self) -> ModelSpec:
        if self.provider == "replay" and self.recordings is None:
            raise ValueError("provider 'replay' needs model.recordings.path")
        if self.provider == "python" and not self.function:
            raise ValueError("provider 'python' needs model.function as 'module:function'")
        if self.function and ":" not in self.function:
            raise ValueError(f"model.function {self.function!r} must be 'module:function'")
        if self.provider == "openai_compatible" and not self.base_url:
            raise ValueError("provider 'openai_compatible' needs model.base_url")
        return self


class ExactScorerSpec(_Strict):
    """Whole-string equality of response and target after normalization; never substring."""

    type: Literal["exact"]
    strip: bool = Field(True, description="Strip leading and trailing whitespace.")
    case_fold: bool = Field(False, description="Compare case-insensitively (str.casefold).")
    collapse_whitespace: bool = Field(False, description="Collapse runs of whitespace to one.")
    nfkc: bool = Field(False, description="Apply Unicode NFKC normalization.")


class RegexScorerSpec(_Strict):
    """A per-sample regular expression; values rendered into it are regex-escaped."""

    type: Literal["regex"]
    pattern: str = Field(description="Jinja2 template of a Python regex over the row's fields.")
    match: Literal["search", "fullmatch"] = Field(
        "search", description="re.search anywhere, or the whole (stripped) response."
    )
    ignore_case: bool = Field(False, description="Compile with re.IGNORECASE.")


class NumericScorerSpec(_Strict):
    """Extract a number from the response and compare it numerically with the target."""

    type: Literal["numeric"]
    marker: str | None = Field(
        None,
        description="Read the first number after the last occurrence of this marker "
        "(e.g. 'Answer:' or '####'); without it, or when absent, the last number.",
    )
    abs_tol: float = Field(0.0, ge=0, description="Absolute tolerance.")
    rel_tol: float = Field(0.0, ge=0, description="Relative tolerance.")


ScorerSpec = Annotated[
    ExactScorerSpec | RegexScorerSpec | NumericScorerSpec, Field(discriminator="type")
]


class RunSettings(_Strict):
    """How the run executes. Only ``epochs`` enters the identity hash."""

    concurrency: int = Field(16, ge=1, description="Requests in flight at most.")
    max_retries: int = Field(5, ge=0, description="Retries of a transient error per request.")
    timeout_s: float = Field(120.0, gt=0, description="Per-attempt timeout, seconds.")
    sample_timeout_s: float | None = Field(
        None, gt=0, description="Wall-clock ceiling over all attempts of one request, seconds."
    )
    epochs: int = Field(1, ge=1, description="Times every sample is run.")


#: run settings that do not change any number, so they stay out of the identity hash
EXECUTION_ONLY = ("concurrency", "max_retries", "timeout_s", "sample_timeout_s")

_NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class EvalSpec(_Strict):
    """One eval: a dataset, a prompt template, a model and a scorer."""

    name: str = Field(pattern=_NAME_RE, description="Eval name; names the results directory.")
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


# --------------------------------------------------------------------------- loading


def load_spec(path: str | Path, overrides: list[str] | None = None) -> EvalSpec:
    """Load, override and validate a spec file.

    Args:
        path: the YAML file.
        overrides: ``dotted.key=value`` strings; each value is parsed as YAML
            (so ``run.concurrency=8`` is an int and ``model.params.stop=["A:"]`` a list).

    Returns:
        The validated, frozen :class:`EvalSpec`, its relative paths anchored at the
        spec file's directory.

    Raises:
        SpecError: unreadable file, invalid YAML, a bad override or a field error; the
            message is one line naming the file, the field and the fix.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{path}: spec file not found") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read spec file ({exc.strerror})") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise SpecError(f"{path}:{where}: {problem}; fix the YAML syntax") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: a spec must be a YAML mapping with name, dataset, prompt, ...")
    raw = apply_overrides(raw, overrides or [], source=str(path))
    spec = parse_spec(raw, source=str(path))
    spec._base_dir = path.resolve().parent
    return spec


def parse_spec(raw: dict[str, Any], source: str = "<spec>") -> EvalSpec:
    """Validate a raw mapping as an :class:`EvalSpec`.

    Raises:
        SpecError: one line a problem (all of them, newline-separated).
    """
    try:
        spec = EvalSpec.model_validate(raw)
    except ValidationError as exc:
        lines = [_format_error(source, err) for err in exc.errors()]
        raise SpecError("\n".join(dict.fromkeys(lines))) from None
    spec._source = source
    return spec


def apply_overrides(raw: dict[str, Any], overrides: list[str], source: str) -> dict[str, Any]:
    """Apply ``dotted.key=value`` overrides to a raw spec mapping (a new dict is returned).

    Raises:
        SpecError: an override without ``=`` or one that descends into a non-mapping.
    """
    out = _deep_copy(raw)
    for item in overrides:
        key, sep, value_text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SpecError(f"--set {item!r}: expected dotted.key=value, e.g. model.name=gpt-4o")
        try:
            value = yaml.safe_load(value_text) if value_text.strip() else ""
        except yaml.YAMLError:
            value = value_text
        node = out
        parts = key.split(".")
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                where = ".".join(parts[: depth + 1])
                raise SpecError(f"{source}: --set {key}: {where} is not a mapping")
            node = child
        node[parts[-1]] = value
    return out


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value


# --------------------------------------------------------------------------- errors


def _format_error(source: str, err: Any) -> str:
    loc = tuple(err["loc"])
    field_path, model = _walk(loc)
    where = ".".join(field_path) or "(top level)"
    kind = err["type"]
    if kind == "extra_forbidden":
        key = str(loc[-1])
        allowed = sorted(model.model_fields) if model else []
        close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'?" if close else f"allowed: {', '.join(allowed)}"
        return f"{source}: {where}: unknown key; {hint}"
    if kind == "missing":
        return f"{source}: {where}: required field is missing; add it"
    if kind == "union_tag_invalid":
        expected = err.get("ctx", {}).get("expected_tags", "")
        return f"{source}: {where}.type: unknown type; use one of {expected}"
    if kind == "union_tag_not_found":
        return f"{source}: {where}: missing 'type'; add type: exact, regex, numeric, ..."
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if kind == "literal_error":
        msg = msg.replace("Input should be", "use")
    elif kind == "string_pattern_mismatch" and field_path == ["name"]:
        msg = "use letters, digits, '.', '_' or '-' (it names the results directory)"
    got = err.get("input")
    shown = f" (got {got!r})" if isinstance(got, str | int | float | bool) else ""
    return f"{source}: {where}: {msg}{shown}"


def _walk(loc: tuple[Any, ...]) -> tuple[list[str], type[BaseModel] | None]:
    """Turn a pydantic error location into a user-facing dotted path, and find the model
    class that holds its last key (for "did you mean")."""
    model: type[BaseModel] | None = EvalSpec
    path: list[str] = []
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(part, int):
            path.append(f"[{part}]")
            continue
        if model is None:
            path.append(str(part))
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            candidates = _union_members_by_tag(path)
            if str(part) in candidates:  # discriminated-union tag; not a user key
                model = candidates[str(part)]
                continue
            path.append(str(part))
            if last:
                break
            model = None
            continue
        path.append(str(part))
        if not last:
            model = _model_of(field.annotation)
    return path, model


def _union_members_by_tag(path: list[str]) -> dict[str, type[BaseModel]]:
    if path and path[-1] == "scorer":
        return _scorer_classes()
    return {}


def _scorer_classes() -> dict[str, type[BaseModel]]:
    import typing

    members = typing.get_args(typing.get_args(ScorerSpec)[0])
    return {m.model_fields["type"].annotation.__args__[0]: m for m in members}


def _model_of(annotation: Any) -> type[BaseModel] | None:
    import typing

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def regex_compile(pattern: str, flags: int, where: str) -> re.Pattern[str]:
    """Compile a regex, turning ``re.error`` into a one-line SpecError naming ``where``."""
    try:
        return re.compile(pattern, flags)
    except re.error as exc:
        raise SpecError(f"{where}: invalid regex {pattern!r}: {exc}; fix the pattern") from None
