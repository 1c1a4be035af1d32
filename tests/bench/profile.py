"""Profile the gateway process under the 50-conversation load: cProfile's top frames.

    .venv/bin/python -m tests.bench.profile                      # session route, 50 x 20
    .venv/bin/python -m tests.bench.profile --route v1 --top 40
    .venv/bin/python -m tests.bench.profile --out /tmp/gw.prof   # keep the raw profile
    .venv/bin/python -m tests.bench.profile --stream 50 --conversations 20   # streamed turns

The real ``botmux run`` runs under ``python -m cProfile``; the fake model and the load are
other processes' work, so what is printed is the gateway's own. cProfile inflates every
Python call about alike, so read the figures as shares, and compare before and after with the
same command. ``--spy`` runs py-spy (``record -f raw``) on the gateway instead and prints the
leaf frames' shares, which is closer to where the time goes, native code included.
``--stream N``: each turn streamed on the SSE chat route, from a model streaming ``N`` chunks
20 ms apart (as ``tests.bench.instructions --stream``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import pstats
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from tests.bench._load import closed_loop, gateway_load
from tests.bench._procs import ROOT, cpu_seconds, fake_model, gateway_config, wait_http
from tests.bench.streaming import streaming_model
from tests.harness import free_port


async def _run(args: argparse.Namespace, work: Path) -> None:
    model_of = streaming_model(0.0, args.stream, 0.02) if args.stream else fake_model()
    async with model_of as model:
        port = free_port()
        config = gateway_config(work, model.url, port)
        prof = Path(args.out or work / "gw.prof")
        if args.spy or args.none:
            cmd = [sys.executable, "-m", "gateway", "run", "--config", str(config)]
        else:
            cmd = [sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "gateway", "run"]
            cmd += ["--config", str(config)]
        popen = subprocess.Popen(  # noqa: ASYNC220 - a long-lived child
            cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.DEVNULL
        )
        base = f"http://127.0.0.1:{port}"
        await wait_http(f"{base}/readyz")
        spy = None
        async with aiohttp.ClientSession() as http:
            send = gateway_load(http, base, args.route, bool(args.stream))
            await closed_loop(send, args.conversations, 2)  # warm-up
            if args.spy:
                raw = Path(args.out) if args.out else work / "spy.txt"
                spy = subprocess.Popen(  # noqa: ASYNC220
                    [
                        str(Path(sys.executable).with_name("py-spy")),
                        "record",
                        "--nonblocking",
                        "-f",
                        "raw",
                        "-r",
                        "250",
                        "-o",
                        str(raw),
                        "--pid",
                        str(popen.pid),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                await asyncio.sleep(1.0)
            cpu0 = cpu_seconds(popen.pid)
            t0 = time.perf_counter()
            result = await closed_loop(send, args.conversations, args.messages)
            wall = time.perf_counter() - t0
            cpu = cpu_seconds(popen.pid) - cpu0
        print(
            f"{result.turns} turns, {result.turns_per_s:.0f} turns/s, p50 {result.p50_ms:.2f} ms,"
            f" gateway CPU {1000 * cpu / result.turns:.2f} ms/turn ({wall:.1f} s)"
        )
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait()
        popen.send_signal(signal.SIGINT)
        popen.wait()
    if args.spy:
        _print_spy(Path(args.out) if args.out else work / "spy.txt", args.top)
    elif not args.none:
        stats = pstats.Stats(str(prof))
        stats.sort_stats("tottime").print_stats(args.top)
        stats.sort_stats("cumulative").print_stats(args.top)


def _print_spy(raw: Path, top: int) -> None:
    leaves: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        total += n
        leaves[stack.split(";")[-1]] += n
    for frame, n in leaves.most_common(top):
        print(f"{100 * n / total:6.1f}%  {frame}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--route", choices=("session", "v1"), default="session")
    parser.add_argument("--conversations", type=int, default=50)
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--stream", type=int, default=0, metavar="CHUNKS")
    parser.add_argument("--out")
    parser.add_argument("--spy", action="store_true")
    parser.add_argument("--none", action="store_true", help="no profiler: the figures only")
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        asyncio.run(_run(args, Path(work)))


if __name__ == "__main__":
    main()
