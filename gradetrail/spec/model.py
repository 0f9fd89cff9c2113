"""The ``model:`` section: provider, model name, sampling params, recordings, price."""

from __future__ import annotations

import re
from typing import Any, Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import ConfigDict, Field, field_validator, model_validator

from gradetrail.spec.base import _Strict
from gradetrail.spec.reasoning import ANTHROPIC_DEFAULT_MAX_TOKENS, ReasoningSpec, problems


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
    match_fields: list[str] = Field(
        [],
        description="Fields each recording shares with its sample's dataset row (e.g. "
        "[question]), checked equal for every sample before any call: recordings out of step "
        "with the dataset (a line added or removed where ids are line numbers) stop the run "
        "instead of answering other samples' questions. A check only: not in the identity.",
    )


ProviderName = Literal[
    "replay", "python", "anthropic", "openai", "openai_compatible", "openai_responses"
]
#: the providers that call an HTTP API
HTTP_PROVIDERS = ("anthropic", "openai", "openai_compatible", "openai_responses")
#: how an HTTP provider sends its requests (execution only: not in the identity or key)
HttpClientName = Literal["auto", "aiohttp", "sdk"]


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
    cache_write_1h_per_mtok: float | None = Field(
        None,
        ge=0,
        description="Input tokens written to the prompt cache with a one-hour TTL (Anthropic "
        "cache_creation.ephemeral_1h_input_tokens; default: twice the input price).",
    )
    server_tool_usd: dict[str, float] | None = Field(
        None,
        description="USD per use of a server-side tool, by the provider's usage name "
        "(e.g. {web_search_requests: 0.01}); default: the bundled fees.",
    )


class ResponseFormat(_Strict):
    """A JSON-schema answer: each provider sends the schema natively (Chat Completions
    ``response_format: {type: json_schema}``, Responses ``text.format``, Anthropic a forced
    tool whose input is the answer). The schema is checked with ``jsonschema`` when the spec
    loads and enters every request's cache key."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, serialize_by_alias=True, validate_by_alias=True
    )

    schema_: dict[str, Any] = Field(
        alias="schema",
        description="The answer's JSON Schema (an object schema; draft 2020-12 unless it "
        "names its own $schema).",
    )
    name: str = Field(
        "answer",
        pattern=r"^[A-Za-z0-9_-]{1,64}$",
        description="The schema's name as the APIs require it (letters, digits, _ and -).",
    )
    strict: bool = Field(
        True,
        description="Ask the API to follow the schema exactly (OpenAI strict mode, which needs "
        "every property required and additionalProperties: false).",
    )

    @field_validator("schema_")
    @classmethod
    def _valid_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        check_json_schema(value)
        return value


def check_json_schema(schema: Any) -> None:
    """Check that ``schema`` is a JSON Schema of an object answer, with the metaschema its
    ``$schema`` names (draft 2020-12 by default).

    Raises:
        ValueError: one line naming the schema path that is wrong and why.
    """
    import jsonschema

    if not isinstance(schema, dict):
        raise ValueError(f"the schema must be an object, not {type(schema).__name__}")
    validator = jsonschema.validators.validator_for(schema, jsonschema.Draft202012Validator)
    try:
        validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise ValueError(f"invalid JSON Schema at {where}: {exc.message}") from None
    if schema.get("type") not in ("object", None) and "properties" not in schema:
        raise ValueError(
            f"the schema's type is {schema.get('type')!r}; the APIs take an object schema "
            "(wrap the value in a property)"
        )


def strict_schema_problem(schema: Any, where: str = "") -> str | None:
    """What keeps ``schema`` from OpenAI's strict mode, the rules its APIs refuse a
    schema for with a 400 (every object schema with ``additionalProperties: false`` and
    every property in ``required``), checked in nested ``properties``, ``items``,
    ``anyOf`` / ``oneOf`` / ``allOf`` and ``$defs`` / ``definitions``; None when none.

    Returns:
        One phrase naming the schema path (``(root)``, ``properties/customer``...).
    """
    if not isinstance(schema, dict):
        return None
    here = where or "(root)"
    if schema.get("type") == "object" or "properties" in schema:
        if schema.get("additionalProperties") is not False:
            return f"at {here}: an object needs additionalProperties: false"
        missing = [
            k for k in schema.get("properties") or {} if k not in (schema.get("required") or ())
        ]
        if missing:
            return f"at {here}: every property must be in required (not {missing[0]!r})"
    children: list[tuple[str, Any]] = []
    for key in ("properties", "$defs", "definitions"):
        if isinstance(schema.get(key), dict):
            children += [(f"{key}/{name}", sub) for name, sub in schema[key].items()]
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list):
            children += [(f"{key}/{i}", sub) for i, sub in enumerate(schema[key])]
    if "items" in schema:
        children.append(("items", schema["items"]))
    for path, sub in children:
        problem = strict_schema_problem(sub, f"{where}/{path}" if where else path)
        if problem:
            return problem
    return None


#: ``${NAME}`` in a header value: the environment variable's value, read at run time
ENV_REFERENCE = re.compile(r"\$\{([^}]*)\}")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: headers the HTTP client sets itself
_RESERVED_HEADERS = {"content-type", "content-length", "host", "accept-encoding", "connection"}


def check_headers(headers: dict[str, str]) -> None:
    """Check ``model.headers``: names are HTTP tokens (not one the client sets itself),
    values hold no control characters and every ``${NAME}`` names a variable.

    Raises:
        ValueError: naming the header (never a value's secret) and the fix.
    """
    for name, value in headers.items():
        if not _HEADER_NAME.match(name):
            raise ValueError(f"header name {name!r} is not an HTTP token; use letters, digits, -")
        if name.lower() in _RESERVED_HEADERS:
            raise ValueError(f"header {name!r} is set by the HTTP client; remove it")
        if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
            raise ValueError(f"header {name!r}: its value holds control characters; remove them")
        for ref in ENV_REFERENCE.findall(value):
            if not _ENV_NAME.match(ref):
                raise ValueError(
                    f"header {name!r}: ${{{ref}}} is not an environment variable's name; "
                    "write ${NAME} with letters, digits and _"
                )
        if "${" in ENV_REFERENCE.sub("", value):
            raise ValueError(f"header {name!r}: unclosed ${{ in its value; write ${{NAME}}")


def check_base_url(value: str) -> None:
    """Refuse a ``base_url`` no HTTP client can send to (before any call, where it would
    otherwise be retried as a connection error until the retries run out): it must be
    ``http://`` or ``https://``, name a host, and hold no whitespace or control
    characters.

    Raises:
        ValueError: naming what is wrong and the shape to use.
    """
    shape = "use http://HOST[:PORT]/PATH or https://..."
    _refuse_credentials(value)
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ValueError(f"base_url {value!r} holds whitespace or control characters; {shape}")
    try:
        url = urlsplit(value)
        port = url.port
    except ValueError as exc:
        raise ValueError(f"base_url {value!r} is not a URL ({exc}); {shape}") from None
    if url.scheme.lower() not in ("http", "https"):
        scheme = f"scheme {url.scheme!r}" if url.scheme else "no scheme"
        raise ValueError(f"base_url {value!r} has {scheme}; {shape}")
    if not url.hostname:
        raise ValueError(f"base_url {value!r} names no host; {shape}")
    if port == 0:
        raise ValueError(f"base_url {value!r} has port 0; {shape}")


#: query parameter names that carry a credential (matched case-insensitively, in part)
_SECRET_PARAM = re.compile(r"key|token|secret|passw|pwd|sig|auth|credential|session", re.I)


def _refuse_credentials(value: str) -> None:
    """Refuse a ``base_url`` that holds a credential (``user:password@`` or a query
    parameter such as ``?api_key=``): the URL is written to results, the manifest and the
    log and printed by ``gradetrail runs``. The message never repeats the URL.

    Raises:
        ValueError: naming where the credential is and where keys belong.
    """
    fix = "remove it and put the key in the variable model.api_key_env names"
    try:
        url = urlsplit(value)
    except ValueError:
        return  # not a URL: the checks after this one say so
    if "@" in url.netloc:
        raise ValueError(f"base_url holds a user name or password (before '@'); {fix}")
    for name, _ in parse_qsl(url.query, keep_blank_values=True):
        if _SECRET_PARAM.search(name):
            raise ValueError(f"base_url's query holds a credential ({name!r}); {fix}")


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
    tools_module: str | None = Field(
        None,
        description="Python module (e.g. mypkg.tools) whose functions gradetrail executes when "
        "the model calls them (an agent loop, bounded by run.max_turns); its file's SHA-256 "
        "enters the cache key of every turn after a tool result.",
    )
    api_key_env: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
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
    http_client: HttpClientName = Field(
        "auto",
        description="HTTP providers: 'aiohttp' sends each request with a lean aiohttp client "
        "(a quarter of the SDK's CPU a request, no SDK import), 'sdk' through the official "
        "openai/anthropic SDK's client; 'auto' (default) takes aiohttp when installed, and "
        "for a plain http:// endpoint without a proxy asyncio's own streams with "
        "httptools' HTTP/1.1 parser (no aiohttp import). All send the same body and give the same "
        "rows; not part of the run's identity.",
    )
    api_version: str | None = Field(
        None,
        description="anthropic only: the Messages API version (anthropic-version header) both "
        "HTTP clients send (default 2023-06-01, whatever the installed SDK's own default); "
        "2026-10-21 refuses temperature, top_p and top_k. Part of the run's identity and "
        "every cache key when set.",
    )
    reasoning: ReasoningSpec | None = Field(
        None,
        description="Reasoning effort, thinking budget and whether to keep the reasoning text, "
        "mapped per provider and model family (what the API would refuse is refused before "
        "any call). Enters every cache key when set.",
    )
    pause_turn_continuations: int = Field(
        0,
        ge=0,
        le=20,
        description="anthropic only: times an answer the API paused (stop reason pause_turn, a "
        "server-tool loop such as web search) is sent back verbatim to be continued; the parts "
        "make one response, their tokens, searches and cost summed. 0 (default) records the "
        "paused answer, flagged truncated. Part of the cache key when set.",
    )
    stream: bool | None = Field(
        None,
        description="HTTP providers: true streams every answer (server-sent events; the "
        "attempt timeout then counts from the last byte received, and the time to the first "
        "token is recorded), false never; unset streams where the provider requires it "
        "(Anthropic max_tokens above 21,333). How answers are sent, not what: not part of "
        "the run's identity or the cache key.",
    )
    headers: dict[str, str] | None = Field(
        None,
        description="HTTP providers: extra request headers (e.g. Azure's api-key, a gateway's "
        "routing header). ${NAME} in a value is replaced by the environment variable NAME at "
        "run time; put secrets there: the spec (and so the manifest) holds only the text "
        "as written, and secret values are never logged, cached or shown in errors. A header "
        "named Authorization, api-key or x-api-key replaces the provider's own key header.",
    )
    query: dict[str, str] | None = Field(
        None,
        description="HTTP providers: query parameters added to every request's URL (Azure's "
        "api-version). Literal values only (they are part of the endpoint, and of the "
        "cache key).",
    )
    response_format: ResponseFormat | None = Field(
        None,
        description="Ask for a JSON answer that follows a JSON Schema, sent natively to the "
        "provider; score it with scorer type json.",
    )
    require_served_model: bool = Field(
        False,
        description="Make a response served by another model than model.name a provider_error "
        "(the alias-to-dated-snapshot form, 'foo' served as 'foo-20250101', is accepted).",
    )

    @field_validator("tools_module")
    @classmethod
    def _tools_module_name(cls, value: str | None) -> str | None:
        if value is not None and not all(part.isidentifier() for part in value.split(".")):
            raise ValueError("name a module by its dotted name, e.g. mypkg.tools (no path, no ':')")
        return value

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is not None:
            check_headers(value)
        return value

    @field_validator("query")
    @classmethod
    def _query(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for name, item in (value or {}).items():
            if "${" in item:
                raise ValueError(
                    f"query {name!r}: query values are literal (they are part of the URL and the "
                    "cache key); put secrets in model.headers"
                )
            if any(ch.isspace() or ord(ch) < 32 for ch in name + item):
                raise ValueError(f"query {name!r}: whitespace or control characters; remove them")
        return value

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        check_base_url(value)
        return value

    def _strict_at_openai(self, elsewhere: bool) -> None:
        """A strict ``response_format`` for OpenAI's own APIs (``openai``, or
        ``openai_responses`` at OpenAI) must be a strict schema
        (:func:`strict_schema_problem`): else every request is a 400.

        Raises:
            ValueError: naming the schema path and the two fixes.
        """
        fmt = self.response_format
        if fmt is None or not fmt.strict or self.provider not in ("openai", "openai_responses"):
            return
        problem = None if elsewhere else strict_schema_problem(fmt.schema_)
        if problem:
            raise ValueError(
                f"response_format.schema {problem}, which OpenAI's strict mode requires (every "
                "request would be refused); fix the schema or set response_format.strict: false"
            )

    @model_validator(mode="after")
    def _provider_fields(self) -> ModelSpec:
        http = self.provider in HTTP_PROVIDERS
        # a key for another server: openai_compatible, or openai_responses at another URL
        elsewhere = self.provider == "openai_compatible" or (
            self.provider == "openai_responses"
            and self.base_url is not None
            and urlsplit(self.base_url).hostname != "api.openai.com"
        )
        key_header = any(
            name.lower() in ("authorization", "api-key", "x-api-key") for name in self.headers or {}
        )
        if not self.api_key_required and not elsewhere:
            raise ValueError(
                f"api_key_required: false applies only to openai_compatible (or openai_responses "
                f"at another base_url); the {self.provider} provider always needs a key"
            )
        if self.provider == "openai_compatible" and not self.base_url:
            # before the key: a key check naming the URL would read "at None"
            raise ValueError(
                "provider 'openai_compatible' needs model.base_url, the server's URL "
                "(usually ending in /v1: http://localhost:8000/v1)"
            )
        if elsewhere and self.api_key_required and not self.api_key_env and not key_header:
            raise ValueError(
                f"provider {self.provider!r} at {self.base_url} needs model.api_key_env naming "
                "the variable that holds the key, a key header in model.headers, or "
                "model.api_key_required: false for a server that checks none"
            )
        if not http and (
            self.price is not None
            or self.require_served_model
            or self.http_client != "auto"
            or self.stream is not None
            or self.headers
            or self.query
        ):
            raise ValueError(
                "price, require_served_model, http_client, stream, headers and query apply to "
                f"HTTP providers, not {self.provider!r}"
            )
        if self.provider == "replay" and self.recordings is None:
            raise ValueError("provider 'replay' needs model.recordings.path")
        if self.provider == "python" and not self.function:
            raise ValueError("provider 'python' needs model.function as 'module:function'")
        if self.function and ":" not in self.function:
            raise ValueError(f"model.function {self.function!r} must be 'module:function'")
        if self.tools_module is not None and self.provider == "replay":
            raise ValueError("tools_module needs a provider that answers tool results, not replay")
        self._strict_at_openai(elsewhere)
        if self.pause_turn_continuations and self.provider != "anthropic":
            raise ValueError(
                "pause_turn_continuations applies to the anthropic provider only; remove it"
            )
        refused = problems(
            self.provider,
            self.name,
            self.params,
            self.reasoning,
            self.api_version,
            ANTHROPIC_DEFAULT_MAX_TOKENS,
        )
        if refused:
            raise ValueError("; ".join(refused))
        return self

    def unused_keys(self) -> list[str]:
        """One line for each key set here that the chosen provider never reads (a
        ``recordings`` left from a replay spec under ``openai_compatible``): it has no
        effect on the responses, yet enters the identity hash, so two runs of one model
        would not be comparable."""
        reads = {
            "recordings": self.provider == "replay",
            "function": self.provider == "python",
            "base_url": self.provider in HTTP_PROVIDERS,
            "api_key_env": self.provider in HTTP_PROVIDERS,
        }
        return [
            f"model.{key} has no effect with provider {self.provider!r} but enters the "
            f"run's identity hash: remove it (--set model.{key}=null)"
            for key, read in reads.items()
            if not read and getattr(self, key) is not None
        ]
