"""Provider recipes, tested: the bundled recipe specs (examples/recipes: Azure OpenAI's
deployment URL and v1 Responses API, Gemini's and Bedrock's OpenAI-compatible endpoints)
run unchanged but for their host against the local protocol server, which checks each
one's URL, query and key header; ``model.headers`` secrets never reach anything a run
writes; bad header values are one line, exit 2, before any call."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from paths import EXAMPLES
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

import gradetrail

RECIPES = EXAMPLES / "recipes"
SECRET = "az-SECRET-7f3c9a1b5e"
server = protocol_server_fixture(scope="module", name="server", models=["*"])
srv = fresh_protocol_server_fixture("server", name="srv")
CLIENTS = ["aiohttp", "sdk"]


def _at(url: str, srv: Any) -> str:
    """``url`` with the protocol server's scheme and host."""
    parts, local = urlsplit(url), urlsplit(srv.base_url)
    return urlunsplit((local.scheme, local.netloc, parts.path, parts.query, ""))


def _run(recipe: str, srv: Any, tmp_path: Path, client: str, *extra: str) -> gradetrail.RunResult:
    spec = gradetrail.load_spec(RECIPES / recipe)
    overrides = [
        f"model.base_url={_at(spec.model.base_url or '', srv)}",
        f"model.http_client={client}",
        "dataset.limit=3",
        "model.name=175b_verification",
        *extra,
    ]
    spec = gradetrail.load_spec(RECIPES / recipe, overrides)
    return gradetrail.run_eval(spec, results_root=tmp_path / "results", cache_path=tmp_path / "c")


def _written(tmp_path: Path) -> list[Path]:
    return [p for p in tmp_path.rglob("*") if p.is_file()]


def _assert_secret_nowhere(tmp_path: Path, secret: str) -> None:
    """No file the run wrote (rows, manifest, log, summary, the cache's database and its
    journal) holds the secret, in any encoding a writer might use."""
    files = _written(tmp_path)
    assert any(p.name == "c" for p in files) and any(p.name == "manifest.json" for p in files)
    for path in files:
        data = path.read_bytes()
        for form in (secret, secret.encode("utf-16-le").decode("latin-1")):
            assert form.encode("latin-1") not in data, path


@pytest.mark.parametrize("client", CLIENTS)
def test_azure_deployment_recipe(
    srv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client: str
) -> None:
    """Chat Completions at /openai/deployments/NAME/chat/completions?api-version=...,
    the key in api-key (the server refuses anything else); the rows score as through
    replay; the manifest keeps the header as written, the secret nowhere."""
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", SECRET)
    srv.configure(api_key=SECRET)
    result = _run("azure-openai.yaml", srv, tmp_path, client)
    assert result.manifest.counts == {"scored": 3}
    stats = srv.settled_stats(3)
    assert stats["paths"] == {"/openai/deployments/gpt-4.1-mini/chat/completions": 3}
    assert result.manifest.spec["model"]["headers"] == {"api-key": "${AZURE_OPENAI_API_KEY}"}
    _assert_secret_nowhere(tmp_path, SECRET)


def test_azure_without_api_version_is_azures_404_with_a_hint(
    srv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the query Azure answers 404 "Resource not found": recorded at once, the
    message naming the URL to check."""
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", SECRET)
    result = _run("azure-openai.yaml", srv, tmp_path, "aiohttp", "model.query=null")
    rows = gradetrail.read_results(result.run_dir)
    assert {r["state"] for r in rows} == {"provider_error"}
    message = rows[0]["error"]["message"]
    assert "Resource not found" in message and "check model.base_url" in message
    assert rows[0]["attempts"] == 1


@pytest.mark.parametrize("client", CLIENTS)
def test_azure_v1_responses_recipe(
    srv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client: str
) -> None:
    """The Responses API at Azure's /openai/v1, reasoning on, key in api-key."""
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", SECRET)
    srv.configure(api_key=SECRET)
    result = _run("azure-openai-responses.yaml", srv, tmp_path, client)
    assert result.manifest.counts == {"scored": 3}
    assert srv.settled_stats(3)["paths"] == {"/openai/v1/responses": 3}
    _assert_secret_nowhere(tmp_path, SECRET)


@pytest.mark.parametrize(
    ("recipe", "env", "path"),
    [
        ("gemini.yaml", "GEMINI_API_KEY", "/v1beta/openai/chat/completions"),
        ("bedrock.yaml", "AWS_BEARER_TOKEN_BEDROCK", "/v1/chat/completions"),
    ],
)
def test_bearer_key_recipes(
    srv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recipe: str, env: str, path: str
) -> None:
    """Gemini's and Bedrock's OpenAI-compatible endpoints: a bearer key from the recipe's
    variable (the server checks it), the recipe's path, its price applied."""
    monkeypatch.setenv(env, SECRET)
    srv.configure(api_key=SECRET)
    result = _run(recipe, srv, tmp_path, "sdk")
    assert result.manifest.counts == {"scored": 3}
    assert srv.settled_stats(3)["paths"] == {path: 3}
    assert result.manifest.cost_usd is not None and result.manifest.cost_usd > 0
    _assert_secret_nowhere(tmp_path, SECRET)


@pytest.mark.parametrize("client", CLIENTS)
def test_a_secret_echoed_in_an_error_is_redacted(
    srv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client: str
) -> None:
    """A server that echoes a header's secret in its error message: the row's message
    shows *** instead, and no file the run wrote holds the secret."""
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", SECRET)
    srv.configure(
        faults=[{"kind": "error", "status": 401, "message": f"key {SECRET} is not valid here"}]
    )
    result = _run("azure-openai.yaml", srv, tmp_path, client)
    rows = gradetrail.read_results(result.run_dir)
    assert {r["state"] for r in rows} == {"provider_error"}
    message = rows[0]["error"]["message"]
    assert "key *** is not valid here" in message and "model.headers" in message
    _assert_secret_nowhere(tmp_path, SECRET)


def test_custom_headers_keep_the_providers_own_key(
    srv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Headers without a key header (a gateway's routing header, OpenRouter's X-Title)
    go along with the provider's own Authorization, which the server still checks."""
    monkeypatch.setenv("GEMINI_API_KEY", SECRET)
    monkeypatch.setenv("ROUTE_TOKEN", "route-abc")
    srv.configure(api_key=SECRET)
    headers = "{'X-Title': 'gradetrail evals', 'X-Route': 'team ${ROUTE_TOKEN}'}"
    for client in CLIENTS:
        result = _run("gemini.yaml", srv, tmp_path / client, client, f"model.headers={headers}")
        assert result.manifest.counts == {"scored": 3}
    _assert_secret_nowhere(tmp_path, "route-abc")


@pytest.mark.parametrize(
    ("setting", "env_value", "words"),
    [
        ("model.headers={'api-key': '${AZURE_KEY_TYPO}'}", None, "${AZURE_KEY_TYPO} is not set"),
        ("model.headers={'api-key': '${AZURE_OPENAI_API_KEY}'}", "ab\ncd", "holds a line break"),
        ("model.headers={'bad header': 'x'}", None, "is not an HTTP token"),
        ("model.headers={'api-key': '${AZ-KEY}'}", None, "is not an environment variable"),
        ("model.headers={'Content-Type': 'text/plain'}", None, "is set by the HTTP client"),
        ("model.query={'api-version': '${V}'}", None, "query values are literal"),
    ],
)
def test_bad_headers_are_one_line_exit_2_before_any_call(
    srv, cli, monkeypatch: pytest.MonkeyPatch, setting: str, env_value: str | None, words: str
) -> None:
    """An unset variable, a value with a line break, a malformed name or reference: one
    line naming the header (never a value), exit 2, no request sent."""
    if env_value is not None:
        monkeypatch.setenv("AZURE_OPENAI_API_KEY", env_value)
    out = cli(
        "run",
        str(RECIPES / "azure-openai.yaml"),
        "--set",
        f"model.base_url={srv.openai_base_url}",
        "--set",
        setting,
    )
    assert out.exit_code == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], out.stderr
    assert "ab\ncd" not in out.stderr
    assert srv.settled_stats()["total"] == 0


@pytest.mark.parametrize("client", CLIENTS)
def test_anthropic_key_in_headers_replaces_its_own(
    srv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client: str
) -> None:
    """An Anthropic-protocol gateway whose key goes in x-api-key from another variable:
    ANTHROPIC_API_KEY is neither needed nor sent (the server checks the header)."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("GATEWAY_KEY", SECRET)
    srv.configure(api_key=SECRET)
    spec = gradetrail.load_spec(
        EXAMPLES / "gsm8k.yaml",
        [
            "model.provider=anthropic",
            f"model.base_url={srv.anthropic_base_url}",
            f"model.http_client={client}",
            "model.recordings=null",
            "model.headers={'x-api-key': '${GATEWAY_KEY}'}",
            "dataset.limit=2",
        ],
    )
    result = gradetrail.run_eval(spec, results_root=tmp_path / "results", cache_path=tmp_path / "c")
    assert result.manifest.counts == {"scored": 2}
    _assert_secret_nowhere(tmp_path, SECRET)


@pytest.mark.parametrize("client", CLIENTS)
def test_azure_deployment_recipe_streamed(
    srv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, client: str
) -> None:
    """Streamed (model.stream: true), the key header of model.headers is sent by both
    clients as it is unstreamed: the server refuses any request without it."""
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", SECRET)
    srv.configure(api_key=SECRET)
    result = _run("azure-openai.yaml", srv, tmp_path, client, "model.stream=true")
    assert result.manifest.counts == {"scored": 3}
    stats = srv.settled_stats(3)
    assert stats["streamed"] == 3 and stats["statuses"] == {"200": 3}
    _assert_secret_nowhere(tmp_path, SECRET)
