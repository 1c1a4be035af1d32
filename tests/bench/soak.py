"""Soak: steady traffic for a long while, sampling the gateway's memory and open descriptors.

Not a test (it takes half an hour by default): it prints one line per sample and a summary,
and writes the samples as JSON for docs/RELIABILITY.md. Conversations come and go (each one
sends a few messages, then falls silent and is evicted), so actor churn is part of the load.

    .venv/bin/python -m tests.bench.soak --minutes 30 --rate 40 --json docs/soak.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import tempfile
import time
from pathlib import Path

import aiohttp
import anyio

from tests.bench import _procs


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=40.0, help="turns per second offered")
    parser.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rng = random.Random(7)
    samples: list[dict[str, float]] = []
    sent = failed = 0
    async with _procs.fake_model(latency_s=0.05) as model:
        with tempfile.TemporaryDirectory() as tmp:
            async with _procs.gateway(Path(tmp), model.url, "idle_evict_s = 20\n") as gw:
                connector = aiohttp.TCPConnector(limit=200)
                async with aiohttp.ClientSession(connector=connector) as http:
                    started = time.perf_counter()
                    end = started + args.minutes * 60
                    next_sample = started

                    async def turn(conversation: int, n: int) -> None:
                        nonlocal sent, failed
                        try:
                            async with http.post(
                                f"{gw.url}/api/sessions/soak-{conversation}/chat",
                                json={"message": f"message {n}"},
                            ) as r:
                                await r.read()
                                sent += 1
                                failed += r.status != 200
                        except aiohttp.ClientError:
                            failed += 1

                    n = 0
                    async with anyio.create_task_group() as tg:
                        while time.perf_counter() < end:
                            now = time.perf_counter()
                            if now >= next_sample:
                                memory = _procs.memory_kib(gw.pid)
                                sample = {
                                    "minute": (now - started) / 60,
                                    "rss_mb": memory["VmRSS"] / 1024,
                                    "fds": float(_fds(gw.pid)),
                                    "turns": float(sent),
                                    "failed": float(failed),
                                }
                                samples.append(sample)
                                print(
                                    f"{sample['minute']:6.1f} min  rss {sample['rss_mb']:6.1f} MB"
                                    f"  fds {int(sample['fds']):4d}  turns {sent}  failed {failed}",
                                    flush=True,
                                )
                                next_sample += args.every
                            # Conversations churn: most messages go to one of ~2,000 recent ones.
                            conversation = n // 5 % 2000 + (n // 10000) * 2000
                            tg.start_soon(turn, conversation + rng.randrange(3), n)
                            n += 1
                            await anyio.sleep(1 / args.rate)
    rss = [s["rss_mb"] for s in samples]
    print(
        f"\n{len(samples)} samples over {args.minutes:g} min at {args.rate:g} turns/s offered:"
        f" RSS first {rss[0]:.1f} MB, max {max(rss):.1f} MB, last {rss[-1]:.1f} MB;"
        f" fds {int(samples[0]['fds'])} -> {int(samples[-1]['fds'])}; turns {sent},"
        f" failed {failed}"
    )
    if args.json:
        args.json.write_text(json.dumps(samples, indent=1) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
