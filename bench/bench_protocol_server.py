"""Benchmark the local protocol server with the real SDKs.

Fires every GSM8K test question (1,319) at the server with ``CONCURRENCY`` requests in
flight and a fixed server latency, once through ``openai.AsyncOpenAI`` and once through
``anthropic.AsyncAnthropic`` (both with ``max_retries=0``), and once through a bare
asyncio HTTP/1.1 client that shows what the server alone costs. Prints the wall time
against the ideal ``ceil(n / concurrency) * latency``, the client's and the server's CPU
seconds, and checks every answer against the recorded solution.

    python bench/bench_protocol_server.py [--latency 0.1] [--concurrency 64] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from protocol_server import ServerHandle, load_gsm8k, running_server  # noqa: E402

MODEL = "175b_verification"

# A client under test: ``ask(i)`` asks question i and returns the text; ``close()`` ends it.
Client = tuple[Callable[[int], Awaitable[str]], Callable[[], Awaitable[None]]]


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run_openai(srv: ServerHandle, questions: list[str], concurrency: int) -> Client:
    """Ask question ``i`` through ``openai.AsyncOpenAI``."""
    import openai

    client = openai.AsyncOpenAI(base_url=srv.openai_base_url, api_key="test", max_retries=0)

    async def ask(i: int) -> str:
        resp = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": f"Question: {questions[i]}\nAnswer:"}],
            max_tokens=512,
        )
        return resp.choices[0].message.content or ""

    return ask, client.close


async def run_anthropic(srv: ServerHandle, questions: list[str], concurrency: int) -> Client:
    """Ask question ``i`` through ``anthropic.AsyncAnthropic``."""
    import anthropic

    client = anthropic.AsyncAnthropic(
        base_url=srv.anthropic_base_url, api_key="test", max_retries=0
    )

    async def ask(i: int) -> str:
        resp = await client.messages.create(
            model=MODEL,
            messages=[{"role": "user", "content": f"Question: {questions[i]}\nAnswer:"}],
            max_tokens=512,
        )
        return resp.content[0].text  # type: ignore[union-attr]

    return ask, client.close


async def run_raw(srv: ServerHandle, questions: list[str], concurrency: int) -> Client:
    """Ask question ``i`` over a pool of bare keep-alive HTTP/1.1 connections."""
    pool: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
    for _ in range(concurrency):
        pool.put_nowait(await asyncio.open_connection("127.0.0.1", srv.port))

    async def ask(i: int) -> str:
        body = json.dumps(
            {
                "model": MODEL,
                "messages": [{"role": "user", "content": f"Question: {questions[i]}\nAnswer:"}],
                "max_tokens": 512,
            }
        ).encode()
        head = (
            "POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
        ).encode()
        reader, writer = await pool.get()
        try:
            writer.write(head + body)
            header = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in header.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            payload = json.loads(await reader.readexactly(length))
        finally:
            pool.put_nowait((reader, writer))
        return payload["choices"][0]["message"]["content"]

    async def close() -> None:
        while not pool.empty():
            _, writer = pool.get_nowait()
            writer.close()

    return ask, close


async def drive(ask: Callable[[int], Awaitable[str]], n: int, concurrency: int) -> list[str]:
    """Ask questions 0..n-1 with at most ``concurrency`` in flight; return the answers."""
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> str:
        async with sem:
            return await ask(i)

    return await asyncio.gather(*(one(i) for i in range(n)))


async def measure(
    name: str,
    factory: Callable[..., Awaitable[Client]],
    srv: ServerHandle,
    questions: list[str],
    expected: list[str],
    concurrency: int,
    repeat: int,
    ideal: float,
) -> dict[str, Any]:
    """Time ``repeat`` full runs of one client; print and return the best one."""
    ask, close = await factory(srv, questions, concurrency)
    try:
        return await _measure(name, ask, srv, questions, expected, concurrency, repeat, ideal)
    finally:
        # Close explicitly: a client left to the garbage collector closes its pool from
        # __del__ at a random later point, in the middle of the next client's run.
        await close()


async def _measure(
    name: str,
    ask: Callable[[int], Awaitable[str]],
    srv: ServerHandle,
    questions: list[str],
    expected: list[str],
    concurrency: int,
    repeat: int,
    ideal: float,
) -> dict[str, Any]:
    """The timed runs of :func:`measure`."""
    await drive(ask, concurrency, concurrency)  # warm-up: opens the connections
    assert srv.process is not None
    best: dict[str, Any] | None = None
    for _ in range(repeat):
        srv.reset(config=False)
        server_cpu0 = process_cpu_seconds(srv.process.pid)
        client_cpu0 = time.process_time()
        t0 = time.perf_counter()
        answers = await drive(ask, len(questions), concurrency)
        wall = time.perf_counter() - t0
        client_cpu = time.process_time() - client_cpu0
        server_cpu = process_cpu_seconds(srv.process.pid) - server_cpu0
        stats = srv.stats()
        row = {
            "client": name,
            "wall_s": wall,
            "ideal_s": ideal,
            "overhead_s": wall - ideal,
            "client_cpu_s": client_cpu,
            "server_cpu_s": server_cpu,
            "server_cpu_ms_per_req": 1000 * server_cpu / len(questions),
            "correct": sum(a == e for a, e in zip(answers, expected, strict=True)),
            "max_in_flight": stats["max_in_flight"],
            "repeated": stats["repeated"],
        }
        print(
            f"{name:10s} wall {wall:6.3f}s (ideal {ideal:.2f}s, +{wall - ideal:.3f}s)  "
            f"client CPU {client_cpu:5.2f}s  server CPU {server_cpu:5.2f}s "
            f"({row['server_cpu_ms_per_req']:.3f} ms/req)  "
            f"answers ok {row['correct']}/{len(questions)}  "
            f"max in flight {stats['max_in_flight']}  repeated {stats['repeated']}",
            flush=True,
        )
        if best is None or wall < best["wall_s"]:
            best = row
    assert best is not None
    return best


async def amain(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Run the benchmark for every client named in ``args.clients``."""
    data = load_gsm8k(args.data_dir)
    n = min(args.n, len(data.questions))
    questions = data.questions[:n]
    expected = data.solutions[MODEL][:n]
    ideal = math.ceil(n / args.concurrency) * args.latency
    factories = {"openai": run_openai, "anthropic": run_anthropic, "raw": run_raw}
    print(
        f"{n} GSM8K questions, {args.concurrency} in flight, server latency {args.latency}s, "
        f"{os.cpu_count()} CPUs, python {sys.version.split()[0]}",
        flush=True,
    )
    rows = []
    with running_server(data_dir=args.data_dir, latency=args.latency) as srv:
        for name in args.clients:
            rows.append(
                await measure(
                    name,
                    factories[name],
                    srv,
                    questions,
                    expected,
                    args.concurrency,
                    args.repeat,
                    ideal,
                )
            )
    return rows


def main() -> None:
    """Parse arguments, run, print a JSON summary of the best run per client."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency", type=float, default=0.1)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("-n", type=int, default=1319, help="number of questions")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--clients", nargs="+", default=["openai", "anthropic", "raw"])
    args = ap.parse_args()
    rows = asyncio.run(amain(args))
    print(json.dumps({"best": rows}, indent=2))


if __name__ == "__main__":
    main()
