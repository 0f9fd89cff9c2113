"""The whole spec, :class:`EvalSpec`: name, dataset, templates, model, scorer, run; and its
JSON Schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field, ValidationInfo, field_validator, model_serializer, model_validator

from gradetrail.conversation.tools import normalize_tool_choice, normalize_tools
from gradetrail.spec.base import _Strict
from gradetrail.spec.ci import CiSpec
from gradetrail.spec.conversation import MessageTemplate, check_prompt, check_tools
from gradetrail.spec.dataset import DatasetSpec
from gradetrail.spec.model import ModelSpec, strict_schema_problem
from gradetrail.spec.run import RunSettings
from gradetrail.spec.scorer import ScorerSpec
from gradetrail.spec.scorers import NamedScorer, check_scorers

_NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class EvalSpec(_Strict):
    """One eval: a dataset, a prompt template, a model and a scorer."""

    name: str = Field(
        pattern=_NAME_RE, max_length=100, description="Eval name; names the results directory."
    )
    description: str | None = Field(None, description="Free text.")
    dataset: DatasetSpec
    prompt: str | list[MessageTemplate] | None = Field(
        None,
        validate_default=True,
        description="Jinja2 template of the user message over the row's fields, or a list of "
        "{role, content} message templates (system, user, assistant). Required unless "
        "dataset.messages_field gives the conversation (then these messages follow it).",
    )
    system: str | None = Field(None, description="Jinja2 template of the system prompt.")
    target: str | None = Field(
        None,
        description="Jinja2 template of the expected answer, e.g. "
        "\"{{ answer.split('####')[-1] | trim }}\".",
    )
    tools: list[dict[str, Any]] | None = Field(
        None,
        description="Tool definitions sent with every request, OpenAI function shape: "
        "{type: function, function: {name, description, parameters}}; parameters is a JSON "
        "Schema of an object.",
    )
    tool_choice: str | dict[str, Any] | None = Field(
        None,
        description="auto (the model decides), none, required (some tool) or {name: TOOL}.",
    )
    model: ModelSpec
    scorer: ScorerSpec = Field(
        None,  # type: ignore[assignment]  # with scorers:, the primary's (see _one_scorer)
        description="How a response is scored. With scorers:, leave it out (it reads as "
        "the primary metric's).",
    )
    scorers: list[NamedScorer] | None = Field(
        None,
        description="Several named scorers, each row recording every metric; one is primary "
        "(primary: true, default the first): the one gate, --min-score and the headline use.",
    )
    run: RunSettings = Field(default_factory=RunSettings)
    ci: CiSpec | None = Field(
        None, description="What a CI check requires (not part of the identity hash)."
    )
    harness: list[str] | None = Field(
        None,
        description="More files of the harness gradetrail approve records and "
        "run.require_approval checks (globs relative to the spec file, e.g. 'app/**/*.py'); "
        "the spec, the files and modules it names and the lockfile are in it already. Not "
        "part of the identity hash.",
    )

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompt_shape(cls, value: Any, info: ValidationInfo) -> Any:
        dataset = info.data.get("dataset")
        if value is None and dataset is not None and dataset.messages_field is None:
            raise ValueError("required field is missing; add it (or dataset.messages_field)")
        return check_prompt(value)

    @field_validator("tools")
    @classmethod
    def _tools_valid(cls, value: Any) -> Any:
        check_tools(value, None)
        return value

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _tool_choice_shape(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, str | dict):
            raise ValueError("use auto, none, required or {name: TOOL}")
        return value

    @field_validator("tool_choice")
    @classmethod
    def _tool_choice_valid(cls, value: Any, info: ValidationInfo) -> Any:
        if "tools" in info.data:  # else the tools error is the one to show
            check_tools(info.data["tools"], value)
        return value

    @model_validator(mode="after")
    def _one_scorer(self) -> EvalSpec:
        if self.scorers is None:
            if self.scorer is None:
                raise ValueError("scorer: required field is missing; add it (or scorers:)")
            return self
        primary = check_scorers(self.scorers)
        if self.scorer is not None and self.scorer != primary.scorer:
            raise ValueError(
                "give scorer: (one scorer) or scorers: (several), not both; move it into "
                "scorers: as an entry"
            )
        # every reader of spec.scorer reads the primary metric's section
        object.__setattr__(self, "scorer", primary.scorer)
        return self

    @property
    def primary_metric(self) -> str | None:
        """The primary metric's name with ``scorers:``, else None."""
        if self.scorers is None:
            return None
        return check_scorers(self.scorers).name

    @model_serializer(mode="wrap")
    def _without_absent_scorers(self, handler: Any) -> Any:
        # a spec with one scorer dumps as before: its spec and identity hashes are kept
        data = handler(self)
        if isinstance(data, dict) and data.get("scorers", 0) is None:
            data.pop("scorers")
        return data

    @field_validator("harness")
    @classmethod
    def _relative_globs(cls, value: list[str] | None) -> list[str] | None:
        for pattern in value or []:
            if not pattern or pattern.startswith(("/", "\\")):
                raise ValueError(
                    f"{pattern!r}: give a glob relative to the spec's directory "
                    "(e.g. 'app/**/*.py'), not an empty or absolute one"
                )
        return value

    @model_validator(mode="after")
    def _conversation_fields(self) -> EvalSpec:
        if (
            self.tool_choice is not None
            and self.tools is None
            and not (self.dataset.tools_field or self.model.tools_module)
        ):
            raise ValueError(
                "tool_choice needs tools (tools:, dataset.tools_field or model.tools_module)"
            )
        tools = self.tools or self.dataset.tools_field or self.model.tools_module
        if self.model.provider == "anthropic" and self.model.response_format and tools:
            raise ValueError(
                "model.response_format on anthropic forces an answer tool, so the requests "
                "cannot offer tools of their own (tools:, dataset.tools_field or "
                "model.tools_module); remove the tools or the response_format"
            )
        self._forced_tool_with_thinking()
        self._strict_tools_at_openai()
        return self

    def _strict_tools_at_openai(self) -> None:
        """A tool of ``tools:`` with ``strict: true``, sent to OpenAI itself (``openai``, or
        ``openai_responses`` without a base URL elsewhere), must have a strict schema
        (:func:`~gradetrail.spec.model.strict_schema_problem`): OpenAI refuses every
        request offering it ("Invalid schema for function ..."), as it does a strict
        ``response_format`` (checked the same way). A row's own tools
        (``dataset.tools_field``) are that row's.

        Raises:
            ValueError: naming the tool, the schema path and the two fixes.
        """
        model = self.model
        at_openai = model.provider == "openai" or (
            model.provider == "openai_responses"
            and (model.base_url is None or urlsplit(model.base_url).hostname == "api.openai.com")
        )
        if not at_openai or not self.tools:
            return
        for tool in normalize_tools(self.tools):
            problem = strict_schema_problem(tool["parameters"]) if tool.get("strict") else None
            if problem:
                raise ValueError(
                    f"tools: {tool['name']!r} is strict: true, but its parameters schema "
                    f"{problem}, which OpenAI's strict mode requires (every request would be "
                    "refused); fix the schema or remove strict"
                )

    def _forced_tool_with_thinking(self) -> None:
        """The Messages API refuses a forced tool (``tool_choice`` required or named, or
        the answer tool ``model.response_format`` forces) with thinking enabled
        (``model.reasoning.budget_tokens``): a 400 for every request, refused here
        instead. Adaptive thinking (``reasoning.effort``) takes forced tools.

        Raises:
            ValueError: one line naming both settings and the ways out.
        """
        reasoning = self.model.reasoning
        if self.model.provider != "anthropic" or reasoning is None:
            return
        if reasoning.budget_tokens is None:
            return
        choice = normalize_tool_choice(self.tool_choice, None)  # checked by its validator
        forced = (
            "model.response_format (its answer tool is forced)"
            if self.model.response_format is not None
            else f"tool_choice {self.tool_choice!r} (it forces a tool)"
            if choice is not None and choice not in ("auto", "none")
            else None
        )
        if forced:
            raise ValueError(
                f"{forced} with model.reasoning.budget_tokens: the Anthropic API refuses a "
                "forced tool with thinking enabled; use tool_choice auto or none, or "
                "model.reasoning.effort (adaptive thinking) instead of budget_tokens"
            )

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
