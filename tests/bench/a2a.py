"""A2A benchmark (SPEC 12): what a task costs through ``POST /a2a``, in process, SQLite.

Not a test: it prints figures. Raw JSON-RPC over httpx against the in-process gateway and
the fake model (which answers at once), so the figures are botmux's own cost per task:

- ``new``: sequential ``SendMessage`` of new tasks (admission, the turn, the commit, the
  outbox chunk recorded), latency percentiles;
- ``repeat``: the same messageIds again: the stored task, no model call;
- ``concurrent``: ``--concurrent`` sends at once over ``--contexts`` contexts, tasks/s.

    .venv/bin/python -m tests.bench.a2a [--tasks 300] [--concurrent 400] [--contexts 50]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import httpx

from tests.fakes.openai_server import open_fake_model
from tests.harness import make_config, running_gateway

V1 = {"A2A-Version": "1.0"}


def _send(i: int, context: str) -> dict[str, Any]:
    message = {
        "messageId": f"m{i}",
        "contextId": context,
        "role": "ROLE_USER",
        "parts": [{"text": f"hi {i}"}],
    }
    return {"jsonrpc": "2.0", "id": i, "method": "SendMessage", "params": {"message": message}}


def _pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))] * 1000


async def run(tasks: int, concurrent: int, contexts: int) -> None:
    store = Path(tempfile.mkdtemp()) / "b.db"
    async with (
        open_fake_model() as fake,
        running_gateway(make_config(store, fake.base_url, extra="[a2a]\n")) as (app, url),
        httpx.AsyncClient(timeout=60) as http,
    ):

        async def one(i: int, context: str) -> float:
            start = time.perf_counter()
            r = await http.post(f"{url}/a2a", json=_send(i, context), headers=V1)
            assert r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
            return time.perf_counter() - start

        for i in range(20):  # warm up
            await one(1_000_000 + i, "warm")
        new = [await one(i, f"c{i % 10}") for i in range(tasks)]
        calls = len(fake.requests)
        repeat = [await one(i, f"c{i % 10}") for i in range(tasks)]
        assert len(fake.requests) == calls, "a repeated messageId ran a model call"
        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for i in range(concurrent):
                tg.start_soon(one, 2_000_000 + i, f"p{i % contexts}")
        elapsed = time.perf_counter() - start
        print(f"new task:   p50 {_pct(new, 0.5):.1f} ms  p95 {_pct(new, 0.95):.1f} ms")
        print(f"repeat:     p50 {_pct(repeat, 0.5):.1f} ms  p95 {_pct(repeat, 0.95):.1f} ms")
        print(f"concurrent: {concurrent / elapsed:.0f} tasks/s ({concurrent} over {contexts})")
        print(f"adapter:    {app.adapters[-1].statistics()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--concurrent", type=int, default=400)
    parser.add_argument("--contexts", type=int, default=50)
    args = parser.parse_args()
    anyio.run(run, args.tasks, args.concurrent, args.contexts)


if __name__ == "__main__":
    main()
