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

import copy
import difflib
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from gradetrail.errors import SpecError
from gradetrail.reducers import ReducerName

__all__ = [
    "DatasetSpec",
    "EvalSpec",
    "ExactScorerSpec",
    "GradeParse",
    "JsonParse",
    "JudgeScorerSpec",
    "ModelSpec",
    "NumericParse",
    "NumericScorerSpec",
    "PairwiseParse",
    "PairwiseScorerSpec",
    "PriceSpec",
    "RegexScorerSpec",
    "ReplaySource",
    "RunSettings",
    "SamplingParams",
    "ScorerSpec",
    "apply_overrides",
    "label_text",
    "load_spec",
    "spec_json_schema",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


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


class PriceSpec(_Strict):
    """Prices in USD per million tokens (MTok), overriding the bundled price table."""

    input_per_mtok: float = Field(ge=0, description="Input tokens not read from a prompt cache.")
    output_per_mtok: float = Field(ge=0, description="Output tokens.")
    cached_input_per_mtok: float | None = Field(
        None, ge=0, description="Input tokens read from the prompt cache (default: input price)."
    )
    cache_write_per_mtok: float | None = Field(
        None,
        ge=0,
        description="Input tokens written to the prompt cache (Anthropic "
        "cache_creation_input_tokens; default: input price).",
    )


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
        None,
        description="Environment variable holding the API key (default ANTHROPIC_API_KEY or "
        "OPENAI_API_KEY; openai_compatible has no default, so a key meant for OpenAI is never "
        "sent to another server).",
    )
    api_key_required: bool = Field(
        True,
        description="openai_compatible only: false sends a placeholder key when no api_key_env "
        "is named or the variable is unset (local vLLM / llama.cpp servers check none).",
    )
    price: PriceSpec | None = Field(
        None, description="USD per million tokens, overriding the bundled price table."
    )
    require_served_model: bool = Field(
        False,
        description="Make a response served by another model than model.name a provider_error "
        "(the alias-to-dated-snapshot form, 'foo' served as 'foo-20250101', is accepted).",
    )

    @model_validator(mode="after")
    def _provider_fields(self) -> ModelSpec:
        http = self.provider in ("anthropic", "openai", "openai_compatible")
        if not self.api_key_required and self.provider != "openai_compatible":
            raise ValueError(
                f"api_key_required: false applies only to openai_compatible; the {self.provider} "
                "provider always needs a key"
            )
        if self.provider == "openai_compatible" and self.api_key_required and not self.api_key_env:
            raise ValueError(
                "provider 'openai_compatible' needs model.api_key_env naming the variable that "
                "holds the key, or model.api_key_required: false for a server that checks none"
            )
        if not http and (self.price is not None or self.require_served_model):
            raise ValueError(
                f"price and require_served_model apply to HTTP providers, not {self.provider!r}"
            )
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


_DEFAULT_GRADES = {"C": 1.0, "P": 0.5, "I": 0.0}


def _check_grades(grades: dict[str, float]) -> None:
    folded = [g.casefold() for g in grades]
    if len(set(folded)) != len(folded):
        raise ValueError("grades differ only in case; they are read case-insensitively")
    for grade, score in grades.items():
        if not grade.strip():
            raise ValueError("an empty grade cannot be read; name each grade")
        if not 0.0 <= score <= 1.0:
            raise ValueError(f"grade {grade!r} maps to {score}; use a score in [0, 1]")


def _check_pattern(pattern: str | None) -> None:
    if pattern is None:
        return
    try:
        groups = re.compile(pattern).groups
    except re.error as exc:
        raise ValueError(f"invalid regex {pattern!r}: {exc}; fix the pattern") from None
    if groups != 1:
        raise ValueError(f"pattern {pattern!r} has {groups} groups; capture the verdict in one")


class GradeParse(_Strict):
    """Read a grade: the last whole-token ``MARKER: GRADE`` in the judge reply, matched
    case-insensitively (``GRADE: C`` but not ``UPGRADE: C`` or ``GRADE: Correct``)."""

    kind: Literal["grade"] = "grade"
    marker: str = Field("GRADE", min_length=1, description="The word before the colon.")
    grades: dict[str, float] = Field(
        default_factory=lambda: dict(_DEFAULT_GRADES),
        description="Grade -> score in [0, 1]; default C (correct) 1, P (partial) 0.5, "
        "I (incorrect) 0.",
    )
    pattern: str | None = Field(
        None,
        description="A Python regex with one group capturing the grade, instead of "
        "'MARKER: GRADE'; matched case-insensitively, last match wins.",
    )

    @model_validator(mode="after")
    def _valid(self) -> GradeParse:
        _check_grades(self.grades)
        _check_pattern(self.pattern)
        return self


class NumericParse(_Strict):
    """Read a number on a scale and normalize it to [0, 1]: the last ``MARKER: 7`` or
    ``MARKER: 7/10`` in the reply, else a reply that is only ``7/10`` (or ``7``), else
    the last ``N/MAX`` fraction whose denominator is ``max``."""

    kind: Literal["numeric"]
    marker: str = Field("SCORE", min_length=1, description="The word before the colon.")
    min: float = Field(0.0, description="The lowest score on the judge's scale.")
    max: float = Field(10.0, description="The highest score on the judge's scale.")

    @model_validator(mode="after")
    def _valid(self) -> NumericParse:
        if self.max <= self.min:
            raise ValueError(f"max {self.max:g} must exceed min {self.min:g}")
        return self


class JsonParse(_Strict):
    """Read a JSON object from the reply (the last fenced code block that parses, else
    the whole reply, else the last ``{...}`` object that parses) and take one field: a
    number (normalized from ``min``..``max``), a boolean (true 1, false 0) or a grade."""

    kind: Literal["json"]
    field: str = Field("score", min_length=1, description="Dotted path to the verdict.")
    min: float = Field(0.0, description="The lowest numeric score.")
    max: float = Field(1.0, description="The highest numeric score.")
    grades: dict[str, float] = Field(
        default_factory=lambda: dict(_DEFAULT_GRADES),
        description="String verdict -> score in [0, 1] (case-insensitive).",
    )

    @model_validator(mode="after")
    def _valid(self) -> JsonParse:
        if self.max <= self.min:
            raise ValueError(f"max {self.max:g} must exceed min {self.min:g}")
        _check_grades(self.grades)
        return self


def _parse_kind(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("kind", "grade"))
    return getattr(value, "kind", "grade")


ParseSpec = Annotated[
    Annotated[GradeParse, Tag("grade")]
    | Annotated[NumericParse, Tag("numeric")]
    | Annotated[JsonParse, Tag("json")],
    Discriminator(_parse_kind),
]


class _JudgeBase(_Strict):
    file: str = Field(
        description="The judge file: a Jinja2 template of the judge prompt, relative to the "
        "spec file. Its content hash enters the run's identity hash."
    )
    model: ModelSpec = Field(description="The judge model, with its own params.")
    samples: int = Field(
        1, ge=1, le=64, description="Ask the judge this many times (distinct cache entries)."
    )
    reduce: Literal["mean", "majority"] = Field(
        "mean",
        description="How the verdicts of one sample become its score: mean, or majority "
        "(the most frequent verdict; a tie goes to the lowest tied score).",
    )


class JudgeScorerSpec(_JudgeBase):
    """An LLM judge grades each response. The judge file sees the row's fields and
    ``prompt``, ``system``, ``response``, ``target``."""

    type: Literal["judge"]
    parse: ParseSpec = Field(
        default_factory=GradeParse, description="How a verdict is read from the judge reply."
    )


_DEFAULT_VERDICTS: dict[str, Literal["first", "second", "tie"]] = {
    "A": "first",
    "B": "second",
    "TIE": "tie",
}


class PairwiseParse(_Strict):
    """Read a pairwise verdict: the last whole-token ``MARKER: LABEL`` in the reply,
    matched case-insensitively."""

    marker: str = Field("WINNER", min_length=1, description="The word before the colon.")
    verdicts: dict[str, Literal["first", "second", "tie"]] = Field(
        default_factory=lambda: dict(_DEFAULT_VERDICTS),
        description="Label -> first (response_a wins), second (response_b wins) or tie.",
    )
    pattern: str | None = Field(
        None, description="A Python regex with one group capturing the label, instead."
    )

    @model_validator(mode="after")
    def _valid(self) -> PairwiseParse:
        _check_grades(dict.fromkeys(self.verdicts, 0.0))
        missing = {"first", "second"} - set(self.verdicts.values())
        if missing:
            raise ValueError(f"verdicts name no label for {', '.join(sorted(missing))}")
        _check_pattern(self.pattern)
        return self


class PairwiseScorerSpec(_JudgeBase):
    """An LLM judge compares each response with a baseline run's response to the same
    sample, in both orders; win 1, tie 0.5, loss 0, the two orders averaged. The judge
    file sees the row's fields and ``prompt``, ``system``, ``target``, ``response_a``,
    ``response_b``."""

    type: Literal["pairwise"]
    baseline: str = Field(
        description="The baseline's run directory (holding results.jsonl), relative to the "
        "spec file. Rows are joined on sample id (same epoch, else the baseline's epoch 1)."
    )
    parse: PairwiseParse = Field(
        default_factory=PairwiseParse, description="How a verdict is read from the reply."
    )


ScorerSpec = Annotated[
    ExactScorerSpec | RegexScorerSpec | NumericScorerSpec | JudgeScorerSpec | PairwiseScorerSpec,
    Field(discriminator="type"),
]


class RunSettings(_Strict):
    """How the run executes. ``epochs``, ``reducer`` and ``pass_k`` decide the numbers and
    enter the identity hash; the rest are execution-only."""

    concurrency: int = Field(16, ge=1, description="Requests in flight at most.")
    max_retries: int = Field(5, ge=0, description="Retries of a transient error per request.")
    timeout_s: float = Field(120.0, gt=0, description="Per-attempt timeout, seconds.")
    sample_timeout_s: float | None = Field(
        None, gt=0, description="Wall-clock ceiling over all attempts of one request, seconds."
    )
    requests_per_minute: float | None = Field(
        None, gt=0, description="Cap on requests started per minute (all attempts count)."
    )
    tokens_per_minute: float | None = Field(
        None,
        gt=0,
        description="Cap on tokens per minute: each request reserves its estimated prompt "
        "tokens (characters / 4) plus max_tokens, corrected to the reported usage.",
    )
    adaptive_concurrency: bool = Field(
        True,
        description="On 429s, lower the requests in flight (x0.75); add one back per window of "
        "successes, up to concurrency (AIMD), so a run settles at the provider's real limit.",
    )
    fail_fast: int = Field(
        5,
        ge=0,
        description="Stop the run when the first N completed samples all fail with the same "
        "permanent error and none succeeded (0: never).",
    )
    epochs: int = Field(1, ge=1, description="Times every sample is run.")
    reducer: ReducerName = Field(
        "mean",
        description="How a sample's epoch scores become its one score: mean, max, majority "
        "(ties go to the lowest score) or pass_at_k (unbiased estimator, Chen et al. 2021).",
    )
    pass_k: int | None = Field(
        None, ge=1, description="The k of reducer pass_at_k (default 1); at most run.epochs."
    )

    @model_validator(mode="after")
    def _reducer_fields(self) -> RunSettings:
        if self.pass_k is not None and self.reducer != "pass_at_k":
            raise ValueError("pass_k applies only to reducer: pass_at_k; remove it or set that")
        if self.reducer == "pass_at_k" and (self.pass_k or 1) > self.epochs:
            raise ValueError(
                f"pass_k {self.pass_k} is more than epochs {self.epochs}; pass@k needs at "
                "least k epochs per sample, so raise run.epochs or lower run.pass_k"
            )
        return self


#: run settings that do not change any number, so they stay out of the identity hash
EXECUTION_ONLY = (
    "concurrency",
    "max_retries",
    "timeout_s",
    "sample_timeout_s",
    "requests_per_minute",
    "tokens_per_minute",
    "adaptive_concurrency",
    "fail_fast",
)

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
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not UTF-8 text; save the spec as UTF-8 YAML") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read spec file ({exc.strerror})") from None
    try:
        raw = yaml.load(text, Loader=_SpecLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise SpecError(f"{path}:{where}: {problem}; fix the YAML syntax") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: a spec must be a YAML mapping with name, dataset, prompt, ...")
    if _has_cycle(raw):
        raise SpecError(f"{path}: a YAML anchor refers to itself; remove the cycle")
    if _expanded_size(raw) > 1_000_000:
        raise SpecError(f"{path}: YAML aliases expand the spec past a million values")
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
    out = copy.deepcopy(raw)  # keeps shared YAML aliases shared: no exponential copy
    for item in overrides:
        key, sep, value_text = item.partition("=")
        key = key.strip()
        if not sep or not key or "" in key.split("."):
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


def _has_cycle(value: Any) -> bool:
    """True when a container holds itself (a YAML anchor used inside its own node).
    Depth-first with a finished set, so shared (aliased) nodes are walked once."""
    finished: set[int] = set()
    ancestors: set[int] = set()

    def visit(node: Any) -> bool:
        if not isinstance(node, dict | list) or id(node) in finished:
            return False
        if id(node) in ancestors:
            return True
        ancestors.add(id(node))
        children = node.values() if isinstance(node, dict) else node
        if any(visit(child) for child in children):
            return True
        ancestors.discard(id(node))
        finished.add(id(node))
        return False

    return visit(value)


def _expanded_size(value: Any) -> int:
    """Values in ``value`` once aliases are expanded (as hashing and JSON see it), counted
    with one visit per shared node. Call only on an acyclic value."""
    sizes: dict[int, int] = {}

    def size(node: Any) -> int:
        if not isinstance(node, dict | list):
            return 1
        if id(node) not in sizes:
            children = node.values() if isinstance(node, dict) else node
            sizes[id(node)] = 1 + sum(size(child) for child in children)
        return sizes[id(node)]

    return size(value)


class _SpecLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing what makes a spec ambiguous or explosive: a key given
    twice in one mapping (YAML keeps the last silently), and more than 100 aliases (a
    "billion laughs" document expands exponentially once copied or hashed)."""

    max_aliases = 100

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases = getattr(self, "_aliases", 0) + 1
            if self._aliases > self.max_aliases:
                mark = self.peek_event().start_mark
                raise yaml.constructor.ConstructorError(
                    None, None, f"more than {self.max_aliases} YAML aliases", mark
                )
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str | int | float | bool) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice in one mapping", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


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
        tag = "kind" if field_path and field_path[-1] == "parse" else "type"
        return f"{source}: {where}.{tag}: unknown {tag}; use one of {expected}"
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
    if path and path[-1] == "parse":
        return {"grade": GradeParse, "numeric": NumericParse, "json": JsonParse}
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
