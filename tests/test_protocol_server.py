"""Tests of the local protocol server, driven through the real openai and anthropic SDKs."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from protocol_server import (
    ConfigError,
    Gsm8kData,
    QuestionIndex,
    ServerHandle,
    _build_arg_parser,
    config_from_args,
    fresh_protocol_server_fixture,
    load_gsm8k,
    parse_latency,
    protocol_server_fixture,
    running_server,
)

server = protocol_server_fixture(scope="module", name="server")
srv = fresh_protocol_server_fixture("server", name="srv")

MODEL = "175b_verification"


@pytest.fixture(scope="module")
def gsm8k() -> Gsm8kData:
    """The GSM8K data the server answers from."""
    return load_gsm8k()


def oai(handle: ServerHandle, **kw: Any) -> openai.AsyncOpenAI:
    """An AsyncOpenAI client for ``handle`` without retries."""
    return openai.AsyncOpenAI(base_url=handle.openai_base_url, api_key="test", max_retries=0, **kw)


def ant(handle: ServerHandle, **kw: Any) -> anthropic.AsyncAnthropic:
    """An AsyncAnthropic client for ``handle`` without retries."""
    return anthropic.AsyncAnthropic(
        base_url=handle.anthropic_base_url, api_key="test", max_retries=0, **kw
    )


def prompt(question: str) -> str:
    """A templated prompt around a GSM8K question, as a harness would send it."""
    return f"Solve the math problem. End with 'A: <number>'.\n\nQuestion: {question}\nAnswer:"


async def ask_openai(client: openai.AsyncOpenAI, text: str, model: str = MODEL, **kw: Any) -> Any:
    """One chat completion with a single user message."""
    return await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": text}], **kw
    )


async def ask_anthropic(
    client: anthropic.AsyncAnthropic, text: str, model: str = MODEL, **kw: Any
) -> Any:
    """One Messages call with a single user message."""
    kw.setdefault("max_tokens", 1024)
    return await client.messages.create(
        model=model, messages=[{"role": "user", "content": text}], **kw
    )


def run(coro_fn: Callable[[], Awaitable[Any]]) -> Any:
    """Run an async test body."""
    return asyncio.run(coro_fn())


# --- success shapes -------------------------------------------------------------------


def test_openai_success_shape(srv: ServerHandle, gsm8k: Gsm8kData) -> None:
    """OpenAI chat completion returns the recorded solution in the real response shape."""
    text = prompt(gsm8k.questions[3])

    async def body() -> None:
        async with oai(srv) as client:
            resp = await client.chat.completions.create(
                model=MODEL,
                messages=[
                    {"role": "system", "content": "You are a careful solver."},
                    {"role": "user", "content": text},
                ],
            )
        assert resp.object == "chat.completion" and resp.id.startswith("chatcmpl-")
        assert resp.model == MODEL and isinstance(resp.created, int)
        choice = resp.choices[0]
        assert choice.index == 0 and choice.finish_reason == "stop"
        assert choice.message.role == "assistant"
        assert choice.message.content == gsm8k.solutions[MODEL][3]
        usage = resp.usage
        assert usage is not None
        assert usage.prompt_tokens == len(f"You are a careful solver.\n{text}".split())
        assert usage.completion_tokens == len(gsm8k.solutions[MODEL][3].split())
        assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
        assert usage.prompt_tokens_details is not None
        assert usage.prompt_tokens_details.cached_tokens == 0

    run(body)


def test_anthropic_success_shape(srv: ServerHandle, gsm8k: Gsm8kData) -> None:
    """Anthropic message returns the recorded solution in the real response shape."""
    text = prompt(gsm8k.questions[7])

    async def body() -> None:
        async with ant(srv) as client:
            resp = await ask_anthropic(client, text, model="6b_finetuning", system="Be brief.")
        assert resp.type == "message" and resp.role == "assistant"
        assert resp.id.startswith("msg_") and resp.model == "6b_finetuning"
        assert resp.content[0].type == "text"
        assert resp.content[0].text == gsm8k.solutions["6b_finetuning"][7]
        assert resp.stop_reason == "end_turn" and resp.stop_sequence is None
        assert resp.usage.input_tokens == len(f"Be brief.\n{text}".split())
        assert resp.usage.output_tokens == len(gsm8k.solutions["6b_finetuning"][7].split())
        assert resp.usage.cache_read_input_tokens == 0

    run(body)


def test_every_recorded_model_is_served(srv: ServerHandle, gsm8k: Gsm8kData) -> None:
    """Each of the four recorded models answers with its own solution."""

    async def body() -> None:
        async with oai(srv) as client:
            for model in ("6b_finetuning", "6b_verification", "175b_finetuning", MODEL):
                resp = await ask_openai(client, gsm8k.questions[42], model=model)
                assert resp.choices[0].message.content == gsm8k.solutions[model][42]

    run(body)


def test_models_endpoint_both_shapes(srv: ServerHandle) -> None:
    """GET /v1/models lists the recorded models in OpenAI and in Anthropic shape."""

    async def body() -> None:
        async with oai(srv) as oclient, ant(srv) as aclient:
            oids = {m.id async for m in oclient.models.list()}
            aids = {m.id async for m in aclient.models.list()}
        assert {"6b_finetuning", MODEL} <= oids and oids == aids

    run(body)


def test_cache_read_tokens(srv: ServerHandle, gsm8k: Gsm8kData) -> None:
    """cache_read_tokens shows up as cached_tokens / cache_read_input_tokens."""
    srv.configure(cache_read_tokens=10)

    async def body() -> None:
        async with oai(srv) as oclient, ant(srv) as aclient:
            o = await ask_openai(oclient, gsm8k.questions[0])
            a = await ask_anthropic(aclient, gsm8k.questions[0])
        words = len(gsm8k.questions[0].split())
        assert o.usage.prompt_tokens == words and o.usage.prompt_tokens_details.cached_tokens == 10
        assert a.usage.input_tokens == words - 10 and a.usage.cache_read_input_tokens == 10

    run(body)


# --- lookup, unknown model and question, scripts ----------------------------------------


def test_question_index_variants(gsm8k: Gsm8kData) -> None:
    """Lookup finds a question exactly, re-spaced, templated, glued or among several."""
    index: QuestionIndex = gsm8k.index
    q1, q2 = gsm8k.questions[1], gsm8k.questions[1000]
    assert index.find(q1) == 1
    assert index.find(f"  {q1}\n") == 1
    assert index.find(" ".join(q1.split())) == 1  # double spaces collapsed
    assert index.find(prompt(q2)) == 1000
    assert index.find(f"Q:{q2}\nA:") == 1000  # glued start: found by its last words
    assert index.find(f"{q2}Answer:") == 1000  # glued end: found by its first words
    assert index.find(f'Question:"{q2}"') == 1000  # glued at both ends: substring scan
    assert index.find(f"Example: {q1}\nA: 3\n\nNow: {q2}") == 1000  # the last one wins
    assert index.find("What is 2 + 2?") is None


def test_unknown_model_is_404(srv: ServerHandle) -> None:
    """An unknown model is a 404 in each protocol's error shape."""

    async def body() -> None:
        async with oai(srv) as oclient, ant(srv) as aclient:
            with pytest.raises(openai.NotFoundError) as oerr:
                await ask_openai(oclient, "hi", model="gpt-nope")
            with pytest.raises(anthropic.NotFoundError) as aerr:
                await ask_anthropic(aclient, "hi", model="claude-nope")
        assert oerr.value.code == "model_not_found"
        assert oerr.value.body["type"] == "invalid_request_error"  # type: ignore[index]
        assert aerr.value.body == {  # type: ignore[comparison-overlap]
            "type": "error",
            "error": {"type": "not_found_error", "message": "model: claude-nope"},
            "request_id": aerr.value.request_id,
        }

    run(body)


def test_unknown_question_default_reply_or_error(srv: ServerHandle) -> None:
    """An unknown question gets default_reply (counted as unmatched) or, if set, a 400."""
    srv.configure(default_reply="No idea.")

    async def body() -> None:
        async with oai(srv) as client:
            resp = await ask_openai(client, "What is the capital of France?")
            assert resp.choices[0].message.content == "No idea."
            srv.configure(unknown_question="error")
            with pytest.raises(openai.BadRequestError):
                await ask_openai(client, "What is the capital of France?")

    run(body)
    assert srv.stats()["unmatched"] == 2


def test_scripted_replies(srv: ServerHandle, gsm8k: Gsm8kData, tmp_path: Path) -> None:
    """Scripted rules (substring, regex, per model, from a file) answer before GSM8K."""
    script = {
        "models": ["judge"],
        "rules": [
            {"contains": "Grade the answer", "reply": "GRADE: C"},
            {"regex": r"score \d+ out of", "reply": "GRADE: I", "model": "judge"},
        ],
    }
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    srv.configure(script=str(path))

    async def body() -> None:
        async with oai(srv) as oclient, ant(srv) as aclient:
            r1 = await ask_openai(oclient, "Grade the answer: 42", model="judge")
            r2 = await ask_anthropic(aclient, "Please score 3 out of 5", model="judge")
            r3 = await ask_openai(oclient, "Please score 3 out of 5", model=MODEL)
            r4 = await ask_openai(oclient, gsm8k.questions[9], model="judge")
        assert r1.choices[0].message.content == "GRADE: C"
        assert r2.content[0].text == "GRADE: I"
        assert r3.choices[0].message.content == "I don't know."  # regex rule is judge-only
        assert r4.choices[0].message.content == "I don't know."  # judge has no recordings

    run(body)


def test_max_tokens_truncation_and_stop(srv: ServerHandle, gsm8k: Gsm8kData) -> None:
    """max_tokens cuts the reply (length / max_tokens); a stop sequence ends it early."""
    solution = gsm8k.solutions[MODEL][0]
    first5 = " ".join(solution.split()[:5])

    async def body() -> None:
        async with oai(srv) as oclient, ant(srv) as aclient:
            o = await ask_openai(oclient, gsm8k.questions[0], max_tokens=5)
            a = await ask_anthropic(aclient, gsm8k.questions[0], max_tokens=5)
            s = await ask_anthropic(aclient, gsm8k.questions[0], stop_sequences=["\n"])
        assert o.choices[0].message.content == first5
        assert o.choices[0].finish_reason == "length" and o.usage.completion_tokens == 5
        assert a.content[0].text == first5 and a.stop_reason == "max_tokens"
        assert s.content[0].text == solution.split("\n")[0]
        assert s.stop_reason == "stop_sequence" and s.stop_sequence == "\n"

    run(body)


# --- faults -----------------------------------------------------------------------------


def test_rate_limit_fault_with_retry_after(srv: ServerHandle, gsm8k: Gsm8kData) -> None:
    """A 429 fault reaches the SDK as RateLimitError with retry-after and retry-after-ms."""
    srv.configure(
        faults=[{"kind": "rate_limit", "first": 2, "retry_after": 7, "retry_after_ms": 1500}]
    )

    async def body() -> None:
        async with oai(srv) as oclient, ant(srv) as aclient:
            with pytest.raises(openai.RateLimitError) as oerr:
                await ask_openai(oclient, gsm8k.questions[0])
            with pytest.raises(anthropic.RateLimitError) as aerr:
                await ask_anthropic(aclient, gsm8k.questions[0])
            ok = await ask_openai(oclient, gsm8k.questions[0])  # only the first 2 fail
        assert oerr.value.response.headers["retry-after"] == "7"
        assert oerr.value.response.headers["retry-after-ms"] == "1500"
        assert oerr.value.code == "rate_limit_exceeded"
        assert aerr.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
        assert aerr.value.response.headers["retry-after"] == "7"
        assert ok.choices[0].message.content == gsm8k.solutions[MODEL][0]

    run(body)
    assert srv.stats()["faults"] == {"rate_limit": 2}


def test_quota_exhausted(srv: ServerHandle) -> None:
    """Quota fault: OpenAI 429 insufficient_quota; Anthropic 400 credit balance too low."""
    srv.configure(faults=[{"kind": "quota"}])

    async def body() -> None:
        async with oai(srv) as oclient, ant(srv) as aclient:
            with pytest.raises(openai.RateLimitError) as oerr:
                await ask_openai(oclient, "hi")
            with pytest.raises(anthropic.BadRequestError) as aerr:
                await ask_anthropic(aclient, "hi")
        assert oerr.value.code == "insufficient_quota" and oerr.value.type == "insufficient_quota"
        assert "credit balance is too low" in aerr.value.message

    run(body)


def test_server_error_and_overloaded(srv: ServerHandle) -> None:
    """500 and overloaded faults: InternalServerError with 500, 503 (OpenAI) and 529."""

    async def body() -> None:
        async with oai(srv) as oclient, ant(srv) as aclient:
            srv.configure(faults=[{"kind": "server_error"}])
            with pytest.raises(openai.InternalServerError) as o500:
                await ask_openai(oclient, "hi")
            with pytest.raises(anthropic.InternalServerError) as a500:
                await ask_anthropic(aclient, "hi")
            srv.configure(faults=[{"kind": "overloaded"}])
            with pytest.raises(openai.InternalServerError) as o503:
                await ask_openai(oclient, "hi")
            with pytest.raises(anthropic.InternalServerError) as a529:
                await ask_anthropic(aclient, "hi")
        assert o500.value.status_code == 500 and o500.value.type == "server_error"
        assert a500.value.status_code == 500
        assert a500.value.body["error"]["type"] == "api_error"  # type: ignore[index]
        assert o503.value.status_code == 503
        assert a529.value.status_code == 529
        assert a529.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]

    run(body)


def test_error_body_under_200(srv: ServerHandle) -> None:
    """An error body under 200 parses into an empty result (choices/content None)."""
    srv.configure(faults=[{"kind": "error_200"}])

    async def body() -> None:
        async with oai(srv) as oclient, ant(srv) as aclient:
            o = await ask_openai(oclient, "hi")
            a = await ask_anthropic(aclient, "hi")
        assert o.choices is None and o.error["type"] == "server_error"  # type: ignore[attr-defined]
        assert a.content is None and a.type == "error"

    run(body)


def test_unparseable_body_under_200(srv: ServerHandle) -> None:
    """A truncated JSON body under 200 surfaces as a ValueError (JSONDecodeError)."""
    srv.configure(faults=[{"kind": "garbage_200"}])

    async def body() -> None:
        async with oai(srv) as oclient, ant(srv) as aclient:
            with pytest.raises(ValueError):
                await ask_openai(oclient, "hi")
            with pytest.raises(ValueError):
                await ask_anthropic(aclient, "hi")

    run(body)


def test_stall_is_a_client_timeout(srv: ServerHandle) -> None:
    """A stall longer than the client timeout is APITimeoutError; the server lets go."""
    srv.configure(faults=[{"kind": "stall", "seconds": 60}])

    async def body() -> None:
        async with oai(srv, timeout=0.3) as oclient, ant(srv, timeout=0.3) as aclient:
            with pytest.raises(openai.APITimeoutError):
                await ask_openai(oclient, "hi")
            with pytest.raises(anthropic.APITimeoutError):
                await ask_anthropic(aclient, "hi")

    run(body)
    stats = srv.settled_stats(2)
    assert stats["in_flight"] == 0 and stats["statuses"] == {"disconnected": 2}


def test_dropped_connection(srv: ServerHandle) -> None:
    """A dropped connection is APIConnectionError (not a timeout, not a 500)."""
    srv.configure(faults=[{"kind": "drop"}])

    async def body() -> None:
        async with oai(srv) as oclient, ant(srv) as aclient:
            with pytest.raises(openai.APIConnectionError) as oerr:
                await ask_openai(oclient, "hi")
            with pytest.raises(anthropic.APIConnectionError) as aerr:
                await ask_anthropic(aclient, "hi")
        for err in (oerr.value, aerr.value):
            assert not isinstance(err, openai.APITimeoutError | anthropic.APITimeoutError)
            assert "disconnected" in repr(err.__cause__)

    run(body)
    assert srv.settled_stats(2)["statuses"] == {"dropped": 2}


def test_hold_keeps_requests_until_released(srv: ServerHandle, gsm8k: Gsm8kData) -> None:
    """``hold`` with ``after``: the first request is answered, the next three wait until
    release and are then answered as usual; a held client that gives up frees its slot."""
    srv.configure(faults=[{"kind": "hold", "after": 1}])

    async def body() -> list[str]:
        async with oai(srv) as client:
            first = await ask_openai(client, gsm8k.questions[0])
            held = [
                asyncio.ensure_future(ask_openai(client, gsm8k.questions[i])) for i in (1, 2, 3)
            ]
            stats = await asyncio.to_thread(srv.wait_held, 3)
            assert stats["in_flight"] == 3 and not any(t.done() for t in held)
            assert await asyncio.to_thread(srv.release) == 3
            answers = [r.choices[0].message.content for r in await asyncio.gather(*held)]
            after = await ask_openai(client, gsm8k.questions[4])  # released: no longer held
        return [first.choices[0].message.content, *answers, after.choices[0].message.content]

    assert run(body) == [gsm8k.solutions[MODEL][i] for i in range(5)]
    stats = srv.settled_stats(5)
    assert stats["faults"] == {"hold": 3} and stats["statuses"] == {"200": 5}

    srv.configure(faults=[{"kind": "hold"}])  # a new fault list holds again

    async def give_up() -> None:
        async with oai(srv, timeout=0.5) as client:
            with pytest.raises(openai.APITimeoutError):
                await ask_openai(client, "hi")

    srv.reset(config=False)
    run(give_up)
    stats = srv.settled_stats(1)
    assert stats["statuses"] == {"disconnected": 1} and stats["held"] == 0


def test_missing_usage(srv: ServerHandle, gsm8k: Gsm8kData) -> None:
    """The no_usage modifier leaves usage out; the SDKs give None."""
    srv.configure(faults=[{"kind": "no_usage"}])

    async def body() -> None:
        async with oai(srv) as oclient, ant(srv) as aclient:
            o = await ask_openai(oclient, gsm8k.questions[2])
            a = await ask_anthropic(aclient, gsm8k.questions[2])
        assert o.usage is None and o.choices[0].message.content == gsm8k.solutions[MODEL][2]
        assert a.usage is None

    run(body)


def test_served_model_alias(srv: ServerHandle) -> None:
    """The alias modifier answers with a dated model name or a different one."""

    async def body() -> None:
        async with oai(srv) as oclient, ant(srv) as aclient:
            srv.configure(faults=[{"kind": "alias"}])
            o = await ask_openai(oclient, "hi")
            srv.configure(faults=[{"kind": "alias", "served_model": "gpt-4o-mini"}])
            a = await ask_anthropic(aclient, "hi")
        assert o.model == f"{MODEL}-20250101"
        assert a.model == "gpt-4o-mini"

    run(body)


def test_generic_error_and_api_key(srv: ServerHandle) -> None:
    """The generic error kind sets any status; api_key makes a wrong key a 401."""

    async def body() -> None:
        async with oai(srv) as client:
            srv.configure(faults=[{"kind": "error", "status": 403, "message": "nope"}])
            with pytest.raises(openai.PermissionDeniedError):
                await ask_openai(client, "hi")
            srv.configure(faults=[], api_key="sk-right")
            with pytest.raises(openai.AuthenticationError):
                await ask_openai(client, "hi")

    run(body)


def test_rate_limit_window(srv: ServerHandle) -> None:
    """rate_limit admits N requests per window and answers the rest 429 with Retry-After."""
    # a window far longer than sending 12 requests can take on a loaded machine, so none
    # of the first 5 ages out of it before the other 7 arrive
    srv.configure(rate_limit=5, rate_limit_window=60.0)

    async def body() -> list[Any]:
        async with oai(srv) as client:
            calls = [ask_openai(client, f"hi {i}") for i in range(12)]
            return await asyncio.gather(*calls, return_exceptions=True)

    results = run(body)
    limited = [r for r in results if isinstance(r, openai.RateLimitError)]
    assert len(limited) == 7 and len(results) - len(limited) == 5
    wait = int(limited[0].response.headers["retry-after"])
    wait_ms = int(limited[0].response.headers["retry-after-ms"])
    assert 1 <= wait <= 60 and wait_ms <= 60_000 and wait == math.ceil(wait_ms / 1000)
    assert srv.stats()["rate_limited"] == 7


def test_fault_targeting(srv: ServerHandle) -> None:
    """first / every / p+seed / contains select which requests a fault hits."""

    async def statuses(n: int, text: Callable[[int], str] = lambda i: f"q{i}") -> list[int]:
        out = []
        async with oai(srv) as client:
            for i in range(n):
                try:
                    await ask_openai(client, text(i))
                    out.append(200)
                except openai.APIStatusError as exc:
                    out.append(exc.status_code)
        return out

    srv.configure(faults=[{"kind": "500", "every": 3}, {"kind": "503", "first": 1}])
    assert asyncio.run(statuses(7)) == [503, 200, 500, 200, 200, 500, 200]
    srv.configure(faults=[{"kind": "server_error", "contains": "poison"}])
    got = asyncio.run(statuses(4, lambda i: "poison pill" if i % 2 else "fine"))
    assert got == [200, 500, 200, 500]
    srv.configure(faults=[{"kind": "server_error", "p": 0.5, "seed": 7, "times": 3}])
    first = asyncio.run(statuses(20))
    srv.configure(faults=[{"kind": "server_error", "p": 0.5, "seed": 7, "times": 3}])
    assert asyncio.run(statuses(20)) == first and first.count(500) == 3


def test_stats_and_reset(srv: ServerHandle, gsm8k: Gsm8kData) -> None:
    """Stats count paths, fingerprints, in-flight peak and arrivals; reset clears faults."""
    # the first 8 are held until all 8 are in, so the peak is 8 however slowly they arrive
    faults = [{"kind": "no_usage", "first": 1}, {"kind": "hold", "first": 8}]
    srv.configure(latency=0.05, faults=faults)

    async def body() -> None:
        async with oai(srv) as oclient, ant(srv) as aclient:
            calls = [ask_openai(oclient, gsm8k.questions[i]) for i in range(8)]
            batch = asyncio.gather(*calls)
            await asyncio.to_thread(srv.wait_held, 8)
            await asyncio.to_thread(srv.release)
            await batch
            await ask_openai(oclient, gsm8k.questions[0])  # a repeat of the first request
            await ask_anthropic(aclient, gsm8k.questions[0])  # same JSON, other path

    t0 = time.time()
    run(body)
    stats = srv.stats()
    assert stats["total"] == 10 and stats["statuses"] == {"200": 10}
    assert stats["paths"] == {"/v1/chat/completions": 9, "/v1/messages": 1}
    assert stats["max_in_flight"] == 8 and stats["in_flight"] == 0
    assert stats["repeated"] == 1 and stats["max_repeat"] == 2 and len(stats["fingerprints"]) == 9
    assert len(stats["arrivals"]) == 10 and all(t0 <= t <= time.time() for t in stats["arrivals"])
    assert stats["faults"] == {"no_usage": 1, "hold": 8} and stats["held"] == 0
    srv.reset()
    assert srv.stats()["total"] == 0
    assert "faults" not in srv.config() and "latency" not in srv.config()


def test_config_validation(srv: ServerHandle) -> None:
    """Typos in config keys, fault kinds or fault keys are rejected, not ignored."""
    for bad in (
        {"latenccy": 1},
        {"faults": [{"kind": "explode"}]},
        {"faults": [{"kind": "drop", "frist": 1}]},
        {"latency": "gamma:1,2"},
    ):
        with pytest.raises(ConfigError):
            srv.configure(**bad)
    srv.configure(add_faults=[{"kind": "drop", "first": 1}])
    srv.add_fault("no_usage")
    assert [f["kind"] for f in srv.config()["faults"]] == ["drop", "no_usage"]


def test_latency_distributions() -> None:
    """Latency specs: fixed, uniform within bounds, lognormal with the requested mean."""
    assert parse_latency(0.25)() == 0.25 and parse_latency("0.5")() == 0.5
    uniform = parse_latency("uniform:0.1,0.3", seed=1)
    assert all(0.1 <= uniform() <= 0.3 for _ in range(1000))
    lognormal = parse_latency({"dist": "lognormal", "mean": 0.1, "sigma": 0.5}, seed=1)
    mean = sum(lognormal() for _ in range(20000)) / 20000
    assert math.isclose(mean, 0.1, rel_tol=0.05)


def test_latency_is_applied(srv: ServerHandle) -> None:
    """Configured latency delays every answer by at least its value, and requests wait it
    out together rather than one after another (no wall-clock upper bound: the machine may
    be loaded; a latency that blocked the server would keep the peak in flight at 1)."""
    srv.configure(latency=0.3)

    async def timed(client: openai.AsyncOpenAI, i: int) -> float:
        t0 = time.perf_counter()
        await ask_openai(client, f"hi {i}")
        return time.perf_counter() - t0

    async def body() -> list[float]:
        async with oai(srv) as client:
            return await asyncio.gather(*(timed(client, i) for i in range(10)))

    assert min(run(body)) >= 0.3
    assert srv.settled_stats(10)["max_in_flight"] >= 2


def test_cli_flags_become_config() -> None:
    """Command-line flags, including compact and JSON fault specs, map to config keys."""
    args = _build_arg_parser().parse_args(
        [
            "--latency",
            "0.1",
            "--rate-limit",
            "10",
            "--fault",
            "rate_limit:first=3,retry_after=2",
            "--fault",
            '{"kind": "drop", "contains": "a, b"}',
            "--served-model-suffix",
            "-20240101",
            "--no-usage",
        ]
    )
    config = config_from_args(args)
    assert config["latency"] == 0.1 and config["rate_limit"] == 10
    assert config["faults"] == [
        {"kind": "rate_limit", "first": 3, "retry_after": 2},
        {"kind": "drop", "contains": "a, b"},
        {"kind": "no_usage"},
        {"kind": "alias", "suffix": "-20240101"},
    ]
    with pytest.raises(ConfigError):
        config_from_args(_build_arg_parser().parse_args(["--fault", "nonsense"]))


def test_listens_on_loopback_only(srv: ServerHandle) -> None:
    """The server binds 127.0.0.1 and reports it in base_url."""
    assert srv.base_url.startswith("http://127.0.0.1:") and srv.port > 0
    assert srv.process is not None and srv.process.poll() is None


def test_bad_startup_config_fails_fast() -> None:
    """running_server raises as soon as the server exits on a startup config it rejects
    (a RuntimeError naming the exit, not the TimeoutError of waiting out the startup
    timeout)."""
    with pytest.raises(RuntimeError, match="exited"), running_server(latency="gamma:1"):
        pass
