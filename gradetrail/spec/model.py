"""The ``model:`` section: provider, model name, sampling params, recordings, price."""

from __future__ import annotations

import re
from typing import Any, Literal
from urllib.parse import parse_qsl, urlsplit

from pydantic import Field, field_validator, model_validator

from gradetrail.spec.base import _Strict


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
        "openai/anthropic SDK's client; 'auto' (default) takes aiohttp when installed. Both "
        "send the same body and give the same rows; not part of the run's identity.",
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

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        check_base_url(value)
        return value

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
        if not http and (
            self.price is not None or self.require_served_model or self.http_client != "auto"
        ):
            raise ValueError(
                "price, require_served_model and http_client apply to HTTP providers, not "
                f"{self.provider!r}"
            )
        if self.provider == "replay" and self.recordings is None:
            raise ValueError("provider 'replay' needs model.recordings.path")
        if self.provider == "python" and not self.function:
            raise ValueError("provider 'python' needs model.function as 'module:function'")
        if self.function and ":" not in self.function:
            raise ValueError(f"model.function {self.function!r} must be 'module:function'")
        if self.tools_module is not None and self.provider == "replay":
            raise ValueError("tools_module needs a provider that answers tool results, not replay")
        if self.provider == "openai_compatible" and not self.base_url:
            raise ValueError("provider 'openai_compatible' needs model.base_url")
        return self
