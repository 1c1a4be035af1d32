"""Closed-loop load: N conversations, each sending its messages one after another.

The same generator drives botmux's peer API, its OpenAI-compatible route, hermes-agent's, or
the fake model directly through the ``openai`` client (the ceiling). Latency is per turn, as
the sender sees it.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp
import openai


@dataclass(frozen=True)
class LoadResult:
    turns: int
    seconds: float
    latencies: list[float]

    @property
    def turns_per_s(self) -> float:
        return self.turns / self.seconds

    def pct(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    @property
    def p50_ms(self) -> float:
        return 1000 * statistics.median(self.latencies)


Send = Callable[[int, int], Awaitable[None]]


async def closed_loop(send: Send, conversations: int, messages: int) -> LoadResult:
    latencies: list[float] = []

    async def one(c: int) -> None:
        for m in range(messages):
            started = time.perf_counter()
            await send(c, m)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(one(c) for c in range(conversations)))
    return LoadResult(conversations * messages, time.perf_counter() - started, latencies)


def peer_chat(http: aiohttp.ClientSession, base_url: str, prefix: str = "c") -> Send:
    async def send(c: int, m: int) -> None:
        async with http.post(
            f"{base_url}/api/sessions/{prefix}{c}/chat", json={"message": f"hello {m}"}
        ) as r:
            body = await r.json()
            if r.status != 200 or body.get("failure"):
                raise RuntimeError(f"turn failed: {r.status} {body}")

    return send


def completions(http: aiohttp.ClientSession, base_url: str, prefix: str = "c") -> Send:
    """An OpenAI-compatible gateway route (botmux's or hermes's), one session per conversation."""

    async def send(c: int, m: int) -> None:
        body = {
            "model": "bench",
            "messages": [{"role": "user", "content": f"hello {m}"}],
            "user": f"{prefix}{c}",
        }
        async with http.post(
            f"{base_url}/v1/chat/completions",
            json=body,
            headers={"X-Hermes-Session-Id": f"{prefix}{c}", "X-Botmux-Session": f"{prefix}{c}"},
        ) as r:
            data = await r.json()
            if r.status != 200:
                raise RuntimeError(f"turn failed: {r.status} {data}")

    return send


def direct(client: openai.AsyncOpenAI) -> Send:
    """The ceiling: a bare default-configured openai client calling the model itself."""

    async def send(c: int, m: int) -> None:
        await client.chat.completions.create(
            model="bench", messages=[{"role": "user", "content": f"hello {m}"}]
        )

    return send


def streamed_chat(http: aiohttp.ClientSession, base_url: str, prefix: str = "s") -> Send:
    """The session chat route streamed (SSE): each turn read to its ``message`` event."""

    async def send(c: int, m: int) -> None:
        body = {"message": f"hello {m}", "stream": True}
        async with http.post(f"{base_url}/api/sessions/{prefix}{c}/chat", json=body) as r:
            text = await r.text()
            if r.status != 200 or "event: message" not in text:
                raise RuntimeError(f"turn failed: {r.status} {text[-300:]}")

    return send


def gateway_load(http: aiohttp.ClientSession, base_url: str, route: str, stream: bool) -> Send:
    """The benches' load on a gateway: ``route`` "session" or "v1", or streamed chat."""
    if stream:
        return streamed_chat(http, base_url)
    return peer_chat(http, base_url) if route == "session" else completions(http, base_url)
