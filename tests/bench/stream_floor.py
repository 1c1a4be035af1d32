"""The floor under a streamed turn's CPU: a minimal aiohttp relay, nothing but read and write.

The relay (this module run with ``--serve PORT MODEL_URL``, its own process) answers
``POST /plain`` by asking the fake model for a completion and writing its JSON back, and
``POST /stream`` by asking for a streamed one and writing each piece read from the model
(aiohttp's ``iter_any``: one read each) to its client as it comes (a chunked
``StreamResponse``): no store, no JSON decoding, no actor, no SSE framing of its own. The
bench drives both like ``tests/bench/streaming.py`` drives the gateway (``--turns`` at
``--concurrency``) and prints the relay's CPU per turn (``/proc``): what asyncio and aiohttp
alone cost per streamed chunk on this machine, the lower bound for botmux's relay.

    .venv/bin/python -m tests.bench.stream_floor --chunks 50 --interval 0.02 [--loop asyncio]

The relay runs on uvloop, as ``botmux run`` does, unless ``--loop asyncio``.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys

import aiohttp
import anyio
from aiohttp import web

from gateway.event_loop import CHOICES, backend_options
from tests.bench._procs import ROOT, _env, cpu_seconds, wait_http
from tests.bench.streaming import streaming_model
from tests.harness import free_port

RELAY = [sys.executable, "-m", "tests.bench.stream_floor"]


async def serve(port: int, model_url: str) -> None:
    http = aiohttp.ClientSession()

    async def plain(request: web.Request) -> web.Response:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        async with http.post(f"{model_url}/chat/completions", json=body) as r:
            return web.Response(body=await r.read(), content_type="application/json")

    async def stream(request: web.Request) -> web.StreamResponse:
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        async with http.post(f"{model_url}/chat/completions", json=body) as r:
            await response.prepare(request)
            async for data in r.content.iter_any():
                await response.write(data)
        await response.write_eof()
        return response

    async def ready(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/plain", plain)
    app.router.add_post("/stream", stream)
    app.router.add_get("/ready", ready)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()


async def cpu_per_turn(
    http: aiohttp.ClientSession, url: str, pid: int, turns: int, concurrency: int
) -> float:
    async def worker() -> None:
        for _ in range(turns // concurrency):
            async with http.post(url, json={}) as r:
                assert r.status == 200
                await r.read()

    before = cpu_seconds(pid)
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return (cpu_seconds(pid) - before) / (turns // concurrency * concurrency)


async def main(args: argparse.Namespace) -> None:
    async with streaming_model(args.first, args.chunks, args.interval) as model:
        port = free_port()
        relay = subprocess.Popen(  # noqa: ASYNC220 - a long-lived child, not awaited here
            [*RELAY, "--serve", str(port), model.url, "--serve-loop", args.loop],
            cwd=ROOT,
            env=_env(),
        )
        try:
            base = f"http://127.0.0.1:{port}"
            await wait_http(f"{base}/ready")
            async with aiohttp.ClientSession() as http:
                for path in ("/plain", "/stream"):  # warm up
                    async with http.post(f"{base}{path}", json={}) as r:
                        await r.read()
                results: dict[str, list[float]] = {"plain": [], "stream": []}
                for _ in range(args.runs):  # alternate, so the machine's load hits both
                    for name in results:
                        results[name].append(
                            await cpu_per_turn(
                                http, f"{base}/{name}", relay.pid, args.turns, args.concurrency
                            )
                        )
        finally:
            relay.terminate()
            relay.wait()
    plain, stream = sorted(results["plain"]), sorted(results["stream"])
    mid = len(plain) // 2
    print(
        f"minimal aiohttp relay on {args.loop}, {args.chunks} chunks {args.interval * 1000:.0f} ms apart;"
        f" {args.turns} turns, {args.concurrency} at once, {args.runs} runs (median, range)"
    )
    print(
        f"  CPU per turn: plain {plain[mid] * 1000:.2f} ms ({plain[0] * 1000:.2f}-"
        f"{plain[-1] * 1000:.2f}), streamed {stream[mid] * 1000:.2f} ms ({stream[0] * 1000:.2f}-"
        f"{stream[-1] * 1000:.2f}); per chunk"
        f" {(stream[mid] - plain[mid]) * 1000 / args.chunks * 1000:.0f} us"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--serve", nargs=2, metavar=("PORT", "MODEL_URL"))
    parser.add_argument("--serve-loop", choices=CHOICES, default="uvloop", help=argparse.SUPPRESS)
    parser.add_argument("--chunks", type=int, default=50)
    parser.add_argument("--interval", type=float, default=0.02)
    parser.add_argument("--first", type=float, default=0.05)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--loop", choices=CHOICES, default="uvloop", help="the relay's loop (botmux: uvloop)"
    )
    parsed = parser.parse_args()
    if parsed.serve:
        port, url = int(parsed.serve[0]), parsed.serve[1]
        anyio.run(serve, port, url, backend_options=backend_options(parsed.serve_loop))
    else:
        asyncio.run(main(parsed))
