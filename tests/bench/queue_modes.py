"""Queue modes benchmark (SPEC 10): the model calls ``collect`` saves on a scripted burst workload.

Not a test: it prints figures. A gateway runs in process with the fake model (each answer
takes ``--model-s``); ``--conversations`` peer sessions each send ``--bursts`` bursts of 1 to
5 messages (seeded), the messages of a burst 50-400 ms apart, the bursts ``--gap-s`` apart,
every message its own request, sent on schedule without waiting for answers (as chat users
type). The same script runs in each queue mode; for each: messages, model calls, those cut
short (interrupted), calls per message, and the latency a message waits for its answer
(median and p95).

    .venv/bin/python -m tests.bench.queue_modes [--conversations 20] [--bursts 5] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import aiohttp
import anyio

from gateway.config import parse_config
from tests.fakes.openai_server import Sleep, ok, open_fake_model
from tests.harness import config_text, running_gateway

Script = list[list[list[float]]]  # per conversation, per burst, each message's delay before


def script(conversations: int, bursts: int, seed: int) -> Script:
    rng = random.Random(seed)
    return [
        [[rng.uniform(0.05, 0.4) for _ in range(rng.randint(1, 5))] for _ in range(bursts)]
        for _ in range(conversations)
    ]


async def run_mode(
    mode: str, plan: Script, args: argparse.Namespace
) -> tuple[int, int, int, list[float]]:
    latencies: list[float] = []
    async with open_fake_model() as fake:
        fake.default = lambda r: Sleep(args.model_s, ok("an answer"))
        with tempfile.TemporaryDirectory() as tmp:
            extra = (
                f'[gateway]\nqueue_mode = "{mode}"\ndebounce_s = {args.debounce_s}\n'
                f"debounce_max_s = {args.debounce_max_s}\nmax_pending_per_conversation = 64\n"
            )
            text = config_text(Path(tmp) / "b.db", fake.base_url, extra=extra)
            config = parse_config(text, source="bench", env={})
            async with running_gateway(config) as (_, url), aiohttp.ClientSession() as http:

                async def send(session: str, n: int) -> None:
                    started = time.monotonic()
                    body = {"message": f"message {n}"}
                    async with http.post(f"{url}/api/sessions/{session}/chat", json=body) as r:
                        assert r.status == 200, await r.text()
                    latencies.append(time.monotonic() - started)

                async def conversation(index: int, bursts: list[list[float]]) -> None:
                    async with anyio.create_task_group() as tg:
                        n = 0
                        for burst in bursts:
                            for delay in burst:
                                await anyio.sleep(delay)
                                n += 1
                                tg.start_soon(send, f"c{index}", n)
                            await anyio.sleep(args.gap_s)

                async with anyio.create_task_group() as tg:
                    for index, bursts in enumerate(plan):
                        tg.start_soon(conversation, index, bursts)
        return len(latencies), len(fake.requests), len(fake.closed), latencies


async def main(args: argparse.Namespace) -> None:
    plan = script(args.conversations, args.bursts, args.seed)
    print(
        f"{args.conversations} conversations x {args.bursts} bursts (seed {args.seed}),"
        f" model {args.model_s}s, debounce {args.debounce_s}s/{args.debounce_max_s}s"
    )
    print(
        f"{'mode':<10} {'messages':>8} {'calls':>6} {'cut':>4} {'calls/msg':>9}"
        f" {'p50 s':>6} {'p95 s':>6}"
    )
    for mode in ("followup", "collect", "interrupt"):
        messages, calls, cut, latencies = await run_mode(mode, plan, args)
        p95 = sorted(latencies)[int(0.95 * (len(latencies) - 1))]
        print(
            f"{mode:<10} {messages:>8} {calls:>6} {cut:>4} {calls / messages:>9.2f}"
            f" {statistics.median(latencies):>6.2f} {p95:>6.2f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=20)
    parser.add_argument("--bursts", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--model-s", type=float, default=0.5)
    parser.add_argument("--gap-s", type=float, default=3.0)
    parser.add_argument("--debounce-s", type=float, default=1.5)
    parser.add_argument("--debounce-max-s", type=float, default=5.0)
    anyio.run(main, parser.parse_args())
