"""Scaling out: turns/s with 1, 2 and 3 botmux nodes on one PostgreSQL, against SQLite.

The model answers after 500 ms, so what limits a node is how many turns it runs at once
(``gateway.max_concurrent_turns``, 64 by default), not the CPU: more nodes, more turns in
flight. The load is closed-loop through the peer API, each conversation sending its messages
one after another, message ``m`` of conversation ``c`` to node ``(c + m) % nodes`` (a load
balancer without affinity: most turns run on another node than the one that received them,
so the NOTIFY path is what is measured).

    .venv/bin/python -m tests.bench.cluster                        # 3 runs each
    .venv/bin/python -m tests.bench.cluster --repeat 1 --json docs/cluster_benchmarks.json

PostgreSQL is a throwaway server with its durable defaults (fsync on), on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anyio

from tests import pgserver
from tests.bench import _load, _procs

LATENCY_S = 0.5


@asynccontextmanager
async def _node(workdir: Path, model_url: str, store: str, name: str) -> AsyncIterator[_procs.Proc]:
    await anyio.Path(workdir).mkdir(parents=True, exist_ok=True)
    sections = ""
    if store.startswith("postgresql://"):
        sections = f'[cluster]\nnode_id = "{name}"\n'
    port = _procs.free_port()
    config = _procs.gateway_config(workdir, model_url, port, sections=sections)
    text = config.read_text().replace("max_concurrent_turns = 1024", "max_concurrent_turns = 64")
    if store.startswith("postgresql://"):
        text = text.replace("[store]\n", f'[store]\nurl = "{store}"\n', 1)
    config.write_text(text)
    popen = subprocess.Popen(  # noqa: ASYNC220 - a long-lived child, not awaited here
        [sys.executable, "-m", "gateway", "run", "--config", str(config)],
        cwd=_procs.ROOT,
        env={**os.environ, "PYTHONPATH": str(_procs.ROOT)},
        stderr=subprocess.DEVNULL,
    )
    proc = _procs.Proc(popen, f"http://127.0.0.1:{port}", time.perf_counter())
    try:
        await _procs.wait_http(f"{proc.url}/readyz")
        yield proc
    finally:
        popen.terminate()
        popen.wait()


async def _run(nodes: int, store: str, conversations: int, messages: int) -> dict[str, float]:
    async with _procs.fake_model(LATENCY_S) as model, AsyncExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        gateways = [
            await stack.enter_async_context(_node(tmp / f"n{i}", model.url, store, f"n{i}"))
            for i in range(nodes)
        ]
        connector = aiohttp.TCPConnector(limit=conversations + 10)
        http = await stack.enter_async_context(aiohttp.ClientSession(connector=connector))
        run_id = os.urandom(3).hex()

        def spread(prefix: str) -> _load.Send:
            sends = [_load.peer_chat(http, gw.url, f"{prefix}{run_id}-") for gw in gateways]

            async def send(c: int, m: int) -> None:
                await sends[(c + m) % len(sends)](c, m)

            return send

        await _load.closed_loop(spread("warm"), min(conversations, 64), 2)
        cpu_before = [_procs.cpu_seconds(gw.pid) for gw in gateways]
        pg_before = _procs.postgres_cpu()
        result = await _load.closed_loop(spread("c"), conversations, messages)
        gateway_cpu = sum(
            _procs.cpu_seconds(gw.pid) - before
            for gw, before in zip(gateways, cpu_before, strict=True)
        )
        pg_cpu = _procs.postgres_cpu() - pg_before
    return {
        "turns_per_s": result.turns_per_s,
        "p50_ms": result.p50_ms,
        "p95_ms": 1000 * result.pct(0.95),
        "gateway_cpu_ms_per_turn": 1000 * gateway_cpu / result.turns,
        "postgres_cpu_ms_per_turn": 1000 * pg_cpu / result.turns,
    }


def _summary(runs: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    return {
        key: {
            "median": round(statistics.median(r[key] for r in runs), 2),
            "min": round(min(r[key] for r in runs), 2),
            "max": round(max(r[key] for r in runs), 2),
        }
        for key in runs[0]
    }


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--conversations", type=int, default=400)
    parser.add_argument("--messages", type=int, default=4)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="botmux-bench-pg-"))
    url = pgserver.start(base, durable=True)
    results: dict[str, Any] = {
        "machine": {"cores": os.cpu_count(), "python": sys.version.split()[0]},
        "model_latency_s": LATENCY_S,
        "max_concurrent_turns_per_node": 64,
        "conversations": args.conversations,
        "messages_per_conversation": args.messages,
        "repeat": args.repeat,
    }
    try:
        plan = [("sqlite, 1 node", 1, "sqlite")] + [
            (f"postgresql, {n} node{'s' if n > 1 else ''}", n, url) for n in (1, 2, 3)
        ]
        for label, nodes, store in plan:
            runs = []
            for _ in range(args.repeat):
                runs.append(await _run(nodes, store, args.conversations, args.messages))
            results[label] = _summary(runs)
            line = results[label]
            print(
                f"{label:<22} {line['turns_per_s']['median']:8.1f} turns/s"
                f"  [{line['turns_per_s']['min']:.1f} .. {line['turns_per_s']['max']:.1f}]"
                f"  p50 {line['p50_ms']['median']:7.1f} ms  p95 {line['p95_ms']['median']:7.1f} ms"
                f"  gateway CPU {line['gateway_cpu_ms_per_turn']['median']:.2f} ms/turn"
                f"  postgres CPU {line['postgres_cpu_ms_per_turn']['median']:.2f} ms/turn",
                flush=True,
            )
    finally:
        pgserver.stop(base)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
