"""Peak memory of the gateway under concurrent large uploads (SPEC 9's memory figure).

Starts the fake model and the real gateway as processes, sends ``--uploads`` concurrent chat
requests through the peer API, each with one ``--mib`` MiB image inline (base64), and prints
the gateway's peak RSS (``VmHWM`` from /proc, the whole process) and how long it took. With
``--vision`` the model sees images (each image then goes to the model as a data URL); without,
the image is stored and the text answered.

With ``--probe``, another conversation sends plain turns back to back, first alone for two
seconds, then while the uploads run: its latency (p50, p99, max) shows how long the uploads'
decoding and encoding hold the event loop, which every other conversation waits on.

    .venv/bin/python -m tests.bench.attachments --uploads 20 --mib 20 --vision
    .venv/bin/python -m tests.bench.attachments --uploads 6 --concurrency 1 --vision --probe
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from tests.bench._procs import ROOT, cpu_seconds, fake_model, memory_kib, wait_http
from tests.harness import free_port


def _spread(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies) or [0.0]
    return {
        "turns": len(latencies),
        "p50_ms": round(1e3 * ordered[len(ordered) // 2], 2),
        "p99_ms": round(1e3 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2),
        "max_ms": round(1e3 * ordered[-1], 2),
    }


async def _probe(http: aiohttp.ClientSession, url: str, until: asyncio.Event) -> list[float]:
    """Plain turns of one conversation back to back until ``until``: each one's latency."""
    latencies = []
    n = 0
    while not until.is_set():
        n += 1
        started = time.perf_counter()
        async with http.post(
            f"{url}/api/sessions/probe/chat",
            json={"message": f"ping {n}"},
        ) as r:
            await r.read()
        latencies.append(time.perf_counter() - started)
    return latencies


async def run(
    uploads: int, mib: int, vision: bool, *, concurrency: int = 0, probe: bool = False
) -> dict[str, object]:
    data = base64.b64encode(os.urandom(mib << 20)).decode()
    body = json.dumps(
        {
            "message": "what is it?",
            "attachments": [{"name": "p.png", "content_type": "image/png", "data": data}],
        }
    ).encode()
    del data
    with tempfile.TemporaryDirectory() as tmp:
        async with fake_model() as model:
            port = free_port()
            config = Path(tmp) / "botmux.toml"
            config.write_text(
                f'[store]\npath = "{tmp}/botmux.db"\n'
                f'[peer]\nlisten = "127.0.0.1:{port}"\nmax_body_bytes = {len(body) + 4096}\n'
                f'[model]\nbase_url = "{model.url}"\nmodel = "bench"\napi_keys = ["sk-bench"]\n'
                f"timeout_s = 120\n"
                + ('input = ["text", "image"]\n' if vision else "")
                + f"[agent]\nmax_attachment_bytes = {(mib << 20) + 1}\n"
                '[log]\nlevel = "warning"\n'
            )
            popen = subprocess.Popen(  # noqa: ASYNC220 - a long-lived child
                [sys.executable, "-m", "gateway", "run", "--config", str(config)],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                stderr=subprocess.DEVNULL,
            )
            try:
                url = f"http://127.0.0.1:{port}"
                await wait_http(f"{url}/readyz")
                before = memory_kib(popen.pid)
                timeout = aiohttp.ClientTimeout(total=600)
                probes: dict[str, object] = {}
                async with aiohttp.ClientSession(timeout=timeout) as http:
                    if probe:  # alone first: the baseline
                        alone = asyncio.Event()
                        asyncio.get_running_loop().call_later(2.0, alone.set)
                        probes["alone"] = _spread(await _probe(http, url, alone))
                    limit = asyncio.Semaphore(concurrency or uploads)

                    async def one(i: int) -> int:
                        async with (
                            limit,
                            http.post(
                                f"{url}/api/sessions/u{i}/chat",
                                data=body,
                                headers={"Content-Type": "application/json"},
                            ) as r,
                        ):
                            await r.read()
                            return r.status

                    done = asyncio.Event()
                    prober = asyncio.ensure_future(_probe(http, url, done)) if probe else None
                    cpu0 = cpu_seconds(popen.pid)
                    started = time.perf_counter()
                    statuses = await asyncio.gather(*(one(i) for i in range(uploads)))
                    seconds = time.perf_counter() - started
                    cpu = cpu_seconds(popen.pid) - cpu0
                    done.set()
                    if prober is not None:
                        probes["during_uploads"] = _spread(await prober)
                after = memory_kib(popen.pid)
            finally:
                popen.terminate()
                popen.wait()
    return {
        "uploads": uploads,
        "mib": mib,
        "vision": vision,
        "statuses": sorted(set(statuses)),
        "seconds": round(seconds, 2),
        "gateway_cpu_s_per_upload": round(cpu / uploads, 3),  # the probe's turns included
        **({"probe": probes} if probe else {}),
        "rss_idle_mib": round(before["VmRSS"] / 1024, 1),
        "peak_rss_mib": round(after["VmHWM"] / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--uploads", type=int, default=20)
    parser.add_argument("--mib", type=int, default=20)
    parser.add_argument("--vision", action="store_true")
    parser.add_argument("--concurrency", type=int, default=0, help="uploads at once (0: all)")
    parser.add_argument("--probe", action="store_true", help="time another conversation")
    args = parser.parse_args()
    result = asyncio.run(
        run(args.uploads, args.mib, args.vision, concurrency=args.concurrency, probe=args.probe)
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
