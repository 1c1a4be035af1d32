"""Instructions per turn of the gateway process, counted by valgrind's callgrind.

    .venv/bin/python -m tests.bench.instructions                 # 1 conversation, 100 turns
    .venv/bin/python -m tests.bench.instructions --conversations 50 --messages 4
    .venv/bin/python -m tests.bench.instructions --stream 50 --messages 20   # SSE chat route

Wall-clock figures on a shared 2-core machine move with whatever else runs; the number of
instructions the gateway executes per turn does not (callgrind counts them, not time), so this
is the figure to compare two commits with. The real ``botmux run`` runs under
``valgrind --tool=callgrind`` with instrumentation off (so the start is quick); after the warm-up it is switched on
(``callgrind_control -i on``) for the measured turns only, then the total is read from the
callgrind output. Slow (the gateway runs ~50x slower under valgrind): keep the turns few.

``--stream N`` streams each turn on the SSE chat route from a model that streams ``N`` chunks
20 ms apart (``tests/bench/streaming.py``'s fake): the instructions of a streamed turn, to
compare with a plain one's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import aiohttp

from tests.bench._load import closed_loop, gateway_load
from tests.bench._procs import ROOT, fake_model, gateway_config, wait_http
from tests.bench.streaming import streaming_model
from tests.harness import free_port


async def _run(args: argparse.Namespace, work: Path) -> float:
    model_of = streaming_model(0.0, args.stream, 0.02) if args.stream else fake_model()
    async with model_of as model:
        port = free_port()
        config = gateway_config(work, model.url, port)
        out = work / "callgrind.out"
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
        cmd += [sys.executable, "-m", "gateway", "run", "--config", str(config)]
        popen = subprocess.Popen(  # noqa: ASYNC220 - a long-lived child
            cmd,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stderr=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}"
        await wait_http(f"{base}/readyz", limit_s=300)
        timeout = aiohttp.ClientTimeout(total=600)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            send = gateway_load(http, base, args.route, bool(args.stream))
            await closed_loop(send, args.conversations, 3)  # warm-up
            await _toggle("on", popen.pid)
            result = await closed_loop(send, args.conversations, args.messages)
            await _toggle("off", popen.pid)
        popen.send_signal(signal.SIGINT)
        popen.wait()
    total = _total(work)
    if not total:
        text = (work / "callgrind.out").read_text(errors="replace")
        raise SystemExit(f"no callgrind summary: {text[:300]} ... {text[-300:]}")
    return total / result.turns


async def _toggle(state: str, pid: int) -> None:
    proc = await asyncio.create_subprocess_exec(
        "callgrind_control", "-i", state, str(pid), stdout=asyncio.subprocess.DEVNULL
    )
    if await proc.wait():
        raise SystemExit(f"callgrind_control -i {state} failed")


def _total(work: Path) -> int:
    """The instructions counted, from callgrind's output files."""
    total = 0
    for path in work.glob("callgrind.out*"):
        lines = path.read_text(errors="replace").splitlines()
        sums = [int(x.split()[1]) for x in lines if x.startswith(("summary:", "totals:"))]
        total += max(sums, default=0)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--route", choices=("session", "v1"), default="session")
    parser.add_argument("--conversations", type=int, default=1)
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--stream", type=int, default=0, metavar="CHUNKS")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        per_turn = asyncio.run(_run(args, Path(work)))
    route = f"SSE chat, {args.stream} chunks" if args.stream else args.route
    print(
        f"{route}, {args.conversations} x {args.messages}: {per_turn / 1e6:.3f} M instructions per turn"
    )


if __name__ == "__main__":
    main()
