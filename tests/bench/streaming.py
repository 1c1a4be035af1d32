"""Streaming through the peer API (SPEC 8): time to the first visible token, and CPU per turn.

The fake model runs as its own process in program mode and streams ``--chunks`` words
``--interval`` s apart, the first after ``--first`` s (its own time to first token); the
gateway is the real ``botmux run``. Prints:

- the model's own time to first token, measured by a client talking to it directly, and the
  time to the first delta through botmux (``/v1/chat/completions`` with ``"stream": true``,
  and the SSE chat route), p50 and p99, and botmux's added latency (their difference);
- the gateway's CPU per streamed turn against a non-streamed one (``/proc``, the whole
  process), over ``--turns`` turns at ``--concurrency`` at once.

    .venv/bin/python -m tests.bench.streaming --chunks 50 --interval 0.02
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp

from tests.bench._procs import ROOT, Proc, _env, cpu_seconds, gateway, wait_http
from tests.harness import free_port


@asynccontextmanager
async def streaming_model(first_s: float, chunks: int, interval_s: float) -> AsyncIterator[Proc]:
    port = free_port()
    args = [str(port), str(first_s), str(chunks), str(interval_s)]
    popen = subprocess.Popen(  # noqa: ASYNC220 - a long-lived child, not awaited here
        [sys.executable, "-m", "tests.fakes.openai_server", *args],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.DEVNULL,
    )
    proc = Proc(popen, f"http://127.0.0.1:{port}/v1", time.perf_counter())
    try:
        await wait_http(f"{proc.url}/models")
        yield proc
    finally:
        popen.terminate()
        popen.wait()


async def first_token(http: aiohttp.ClientSession, url: str, body: dict[str, object]) -> float:
    """Seconds from sending the request to the first piece of text, then the rest is read."""
    started = time.perf_counter()
    seen: float | None = None
    async with http.post(url, json=body) as r:
        assert r.status == 200, await r.text()
        async for raw in r.content:
            line = raw.strip()
            if seen is None and line.startswith(b"data: {"):
                data = json.loads(line[6:])
                choices = data.get("choices") or [{}]
                if data.get("content") or choices[0].get("delta", {}).get("content"):
                    seen = time.perf_counter() - started
    assert seen is not None
    return seen


def quantiles(values: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return statistics.median(values), cuts[98]


Request = Callable[[int, int], tuple[str, dict[str, object]]]


async def timings(
    http: aiohttp.ClientSession, request_of: Request, turns: int, concurrency: int
) -> list[float]:
    """First-token times of ``turns`` requests, ``concurrency`` workers each in turn."""
    results: list[float] = []

    async def worker(w: int) -> None:
        for i in range(turns // concurrency):
            results.append(await first_token(http, *request_of(w, i)))

    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return results


async def cpu_per_turn(
    http: aiohttp.ClientSession, gw: Proc, turns: int, concurrency: int, *, stream: bool
) -> float:
    async def worker(w: int) -> None:
        for i in range(turns // concurrency):
            body = {"message": f"turn {i}", "stream": stream}
            async with http.post(f"{gw.url}/api/sessions/cpu-{stream}-{w}/chat", json=body) as r:
                assert r.status == 200
                await r.read()

    before = cpu_seconds(gw.pid)
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return (cpu_seconds(gw.pid) - before) / (turns // concurrency * concurrency)


async def main(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="botmux-stream-"))
    n, c = args.turns, args.concurrency
    async with (
        streaming_model(args.first, args.chunks, args.interval) as model,
        gateway(work, model.url) as gw,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http,
    ):
        # Warm up: the first turn pays for connections and imports.
        await first_token(
            http, f"{gw.url}/api/sessions/warm/chat", {"message": "w", "stream": True}
        )
        direct = await timings(
            http,
            lambda w, i: (
                f"{model.url}/chat/completions",
                {"model": "m", "stream": True, "messages": [{"role": "user", "content": "d"}]},
            ),
            n,
            c,
        )
        v1 = await timings(
            http,
            lambda w, i: (
                f"{gw.url}/v1/chat/completions",
                {
                    "model": "botmux",
                    "stream": True,
                    "user": f"v1-{w}",
                    "messages": [{"role": "user", "content": f"v{i}"}],
                },
            ),
            n,
            c,
        )
        sse = await timings(
            http,
            lambda w, i: (
                f"{gw.url}/api/sessions/sse-{w}/chat",
                {"message": f"s{i}", "stream": True},
            ),
            n,
            c,
        )
        cpu_plain = await cpu_per_turn(http, gw, args.cpu_turns, args.cpu_concurrency, stream=False)
        cpu_stream = await cpu_per_turn(http, gw, args.cpu_turns, args.cpu_concurrency, stream=True)
    model_p50, model_p99 = quantiles(direct)
    print(
        f"model: {args.chunks} chunks {args.interval * 1000:.0f} ms apart, first after"
        f" {args.first * 1000:.0f} ms; {n} turns, {c} at once"
    )
    print(
        f"model's own first token (direct): p50 {model_p50 * 1000:.1f} ms, p99 {model_p99 * 1000:.1f} ms"
    )
    for name, values in (("/v1/chat/completions stream", v1), ("SSE chat route", sse)):
        p50, p99 = quantiles(values)
        print(
            f"{name}: first token p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms;"
            f" added by botmux p50 {(p50 - model_p50) * 1000:.1f} ms,"
            f" p99 {(p99 - model_p99) * 1000:.1f} ms"
        )
    print(
        f"gateway CPU per turn ({args.cpu_turns} turns, {args.cpu_concurrency} at once):"
        f" plain {cpu_plain * 1000:.2f} ms, streamed {cpu_stream * 1000:.2f} ms"
        f" ({cpu_stream / cpu_plain:.2f}x)"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--chunks", type=int, default=50)
    parser.add_argument("--interval", type=float, default=0.02)
    parser.add_argument("--first", type=float, default=0.05)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--cpu-turns", type=int, default=100)
    parser.add_argument("--cpu-concurrency", type=int, default=20)
    asyncio.run(main(parser.parse_args()))
