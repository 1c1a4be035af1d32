"""Turns per second through the peer API, with an instant fake model.

Three processes on loopback: the fake model (tests.fakes.openai_server), the real gateway
(``python -m gateway run``) and this load generator. N concurrent sessions each send M
messages back to back; the figures are the wall-clock turns/s over all of them and the
latency percentiles of single turns. Not a test: it prints figures and never fails on a time.

    .venv/bin/python -m tests.bench.peer_throughput --sessions 50 --messages 20 --repeat 3
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
from pathlib import Path

import aiohttp

from tests.harness import free_port


async def _wait_ready(url: str) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(400):
            try:
                async with http.get(url) as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError(f"{url} never answered")


async def _load(url: str, sessions: int, messages: int) -> tuple[float, list[float]]:
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=sessions)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def one_session(i: int) -> None:
            for m in range(messages):
                started = time.perf_counter()
                async with http.post(
                    f"{url}/api/sessions/bench-{i}/chat", json={"message": f"hello {m}"}
                ) as r:
                    body = await r.json()
                    assert r.status == 200 and body["failure"] is None, body
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(one_session(i) for i in range(sessions)))
        elapsed = time.perf_counter() - started
    return elapsed, latencies


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[2]
    results = []
    for run in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            model_port, peer_port = free_port(), free_port()
            config = Path(tmp) / "botmux.toml"
            config.write_text(
                f'[store]\npath = "{tmp}/botmux.db"\n[peer]\nlisten = "127.0.0.1:{peer_port}"\n'
                f'[model]\nbase_url = "http://127.0.0.1:{model_port}/v1"\nmodel = "bench"\n'
                f'api_keys = ["sk-bench"]\n[log]\nlevel = "warning"\n'
            )
            env = {**os.environ, "PYTHONPATH": str(root)}
            model = subprocess.Popen(
                [sys.executable, "-m", "tests.fakes.openai_server", str(model_port)],
                cwd=root, env=env, stdout=subprocess.DEVNULL,
            )
            gateway = subprocess.Popen(
                [sys.executable, "-m", "gateway", "run", "--config", str(config)],
                cwd=root, env=env, stderr=subprocess.DEVNULL,
            )
            try:
                await _wait_ready(f"http://127.0.0.1:{peer_port}/readyz")
                await _load(f"http://127.0.0.1:{peer_port}", args.sessions, 2)  # warm up
                cpu_before = _cpu_seconds(gateway.pid)
                elapsed, latencies = await _load(
                    f"http://127.0.0.1:{peer_port}", args.sessions, args.messages
                )
                cpu = _cpu_seconds(gateway.pid) - cpu_before
            finally:
                gateway.terminate()
                model.terminate()
                gateway.wait()
                model.wait()
        turns = args.sessions * args.messages
        results.append(
            {
                "turns_per_s": turns / elapsed,
                "p50_ms": 1000 * statistics.median(latencies),
                "p90_ms": 1000 * _pct(latencies, 0.90),
                "p99_ms": 1000 * _pct(latencies, 0.99),
                "gateway_cpu_ms_per_turn": 1000 * cpu / turns,
            }
        )
        print(f"run {run + 1}: " + ", ".join(f"{k} {v:.1f}" for k, v in results[-1].items()))
    summary = {k: statistics.median(r[k] for r in results) for k in results[0]}
    spread = {k: (min(r[k] for r in results), max(r[k] for r in results)) for k in results[0]}
    print(f"\n{args.sessions} sessions x {args.messages} messages, {args.repeat} runs, {os.cpu_count()} cores")
    for key, value in summary.items():
        low, high = spread[key]
        print(f"  {key:<26} median {value:8.1f}   (min {low:.1f}, max {high:.1f})")
    print(json.dumps({"median": summary, "spread": spread}))


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    asyncio.run(main())
