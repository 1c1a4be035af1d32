"""Backlog benchmark (security review H2): what a flood and a restart cost the gateway's memory.

Not a test: it prints figures. The gateway runs as a real process from ``--root`` (a checkout
of botmux: this worktree by default, or another one to compare, e.g. ``/work/main``); the fake
model (this checkout's, 30 s per answer) runs in its own process.

    .venv/bin/python -m tests.bench.backlog flood [--root DIR] [--requests 1000] [--chars 30000]
    .venv/bin/python -m tests.bench.backlog startup [--root DIR] [--rows 10000] [--conversations 100]

flood: ``--requests`` chat requests of ``--chars`` characters to one session, ``--concurrency``
at a time, each client giving up after ``--client-timeout`` s (the review's repro). Prints the
statuses, the rows left pending, the gateway's RSS before, at its peak (VmHWM) and after the
clients left, then SIGTERM and a restart: start-to-ready and RSS after the restart.
startup: a store with ``--rows`` pending rows over ``--conversations`` conversations, then
start-to-ready and RSS at ready, 3 s later, and at the peak.
Only config keys every version knows are used, so the defaults of each version apply.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp

from gateway.store import AdmitRow
from tests.bench._procs import fake_model, memory_kib, wait_http
from tests.harness import free_port


def _mib(kib: int) -> str:
    return f"{kib / 1024:.0f} MiB"


def start_gateway(root: Path, workdir: Path, model_url: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    config = workdir / "botmux.toml"
    config.write_text(
        f'[store]\npath = "{workdir}/botmux.db"\n'
        f'[peer]\nlisten = "127.0.0.1:{port}"\n'
        f'[model]\nbase_url = "{model_url}"\nmodel = "bench"\napi_keys = ["sk-bench"]\n'
        "timeout_s = 120\n[gateway]\ndrain_timeout_s = 1\n"
        '[log]\nlevel = "warning"\n'
    )
    log = (workdir / "gateway.log").open("ab")
    popen = subprocess.Popen(
        [sys.executable, "-m", "gateway", "run", "--config", str(config)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    return popen, f"http://127.0.0.1:{port}"


async def ready(popen: subprocess.Popen[bytes], url: str) -> float:
    """Seconds from now until /readyz answers 200."""
    return await wait_http(f"{url}/readyz", limit_s=300)


def pending_rows(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(
            conn.execute("SELECT COUNT(*) FROM messages WHERE state = 'pending'").fetchone()[0]
        )


async def stop(popen: subprocess.Popen[bytes]) -> None:
    popen.send_signal(signal.SIGTERM)
    while popen.poll() is None:  # noqa: ASYNC110 - another process
        await asyncio.sleep(0.05)


async def restart(root: Path, workdir: Path, model_url: str) -> dict[str, Any]:
    started = time.perf_counter()
    popen, url = start_gateway(root, workdir, model_url)
    try:
        await ready(popen, url)
        to_ready = time.perf_counter() - started
        at_ready = memory_kib(popen.pid)["VmRSS"]
        await asyncio.sleep(3)
        later = memory_kib(popen.pid)
        # The first answer a new conversation gets while the backlog waits (the model: 30 s).
        return {
            "start_to_ready_s": round(to_ready, 2),
            "rss_at_ready": _mib(at_ready),
            "rss_3s_later": _mib(later["VmRSS"]),
            "rss_peak": _mib(later["VmHWM"]),
        }
    finally:
        await stop(popen)


async def flood(args: argparse.Namespace) -> None:
    root = args.root
    workdir = Path(tempfile.mkdtemp(prefix="botmux-backlog-"))
    body = {"message": "x" * args.chars}
    async with fake_model(latency_s=30.0) as model:
        popen, url = start_gateway(root, workdir, model.url)
        try:
            await ready(popen, url)
            before = memory_kib(popen.pid)["VmRSS"]
            statuses: Counter[str] = Counter()
            gate = asyncio.Semaphore(args.concurrency)
            timeout = aiohttp.ClientTimeout(total=args.client_timeout)
            started = time.perf_counter()
            async with aiohttp.ClientSession(
                timeout=timeout, connector=aiohttp.TCPConnector(limit=0)
            ) as http:

                async def one() -> None:
                    async with gate:
                        try:
                            async with http.post(f"{url}/api/sessions/flood/chat", json=body) as r:
                                await r.read()
                                statuses[str(r.status)] += 1
                        except TimeoutError:
                            statuses["client gave up"] += 1

                await asyncio.gather(*(one() for _ in range(args.requests)))
            flood_s = time.perf_counter() - started
            await asyncio.sleep(2)
            after = memory_kib(popen.pid)
            print(f"root: {root}")
            print(
                f"flood: {args.requests} requests x {args.chars} chars, {args.concurrency} at a"
                f" time, clients give up after {args.client_timeout} s: {flood_s:.1f} s"
            )
            print(f"  statuses: {dict(statuses)}")
            print(f"  rows pending: {pending_rows(workdir / 'botmux.db')}")
            print(
                f"  gateway RSS: before {_mib(before)}, peak {_mib(after['VmHWM'])},"
                f" 2 s after the clients left {_mib(after['VmRSS'])}"
            )
        finally:
            await stop(popen)
        print(f"  after SIGTERM and a restart: {await restart(root, workdir, model.url)}")


async def fill(db: Path, rows: int, conversations: int, chars: int) -> None:
    from gateway.messages import Inbound
    from gateway.store import open_sqlite_store

    text = "y" * chars
    async with open_sqlite_store(str(db)) as store:
        for start in range(0, rows, 500):
            await asyncio.gather(
                *(
                    store.submit(
                        AdmitRow(Inbound("peer", f"peer:c{i % conversations}", f"m{i}", text))
                    )
                    for i in range(start, min(rows, start + 500))
                )
            )


async def startup(args: argparse.Namespace) -> None:
    root = args.root
    workdir = Path(tempfile.mkdtemp(prefix="botmux-backlog-"))
    await fill(workdir / "botmux.db", args.rows, args.conversations, args.chars)
    size = (workdir / "botmux.db").stat().st_size
    async with fake_model(latency_s=30.0) as model:
        figures = await restart(root, workdir, model.url)
    print(f"root: {root}")
    print(
        f"startup with {args.rows} pending rows of {args.chars} chars in {args.conversations}"
        f" conversations (store {size / 2**20:.0f} MiB): {figures}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", choices=("flood", "startup"))
    parser.add_argument("--root", default=str(Path(__file__).resolve().parents[2]))
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--chars", type=int, default=30_000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--client-timeout", type=float, default=4.0)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--conversations", type=int, default=100)
    args = parser.parse_args()
    args.root = Path(args.root).resolve()
    asyncio.run(flood(args) if args.scenario == "flood" else startup(args))


if __name__ == "__main__":
    main()
