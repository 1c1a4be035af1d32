"""Context-window benchmark (SPEC 11): what trimming costs per turn in a 2,000-row conversation.

Not a test: it prints figures. Three costs, each the median of ``--repeat`` runs:

- ``build``: the agent fitting a history of ``--rows`` rows (each ``--chars`` characters) into
  one endpoint's window and building the request (pure CPU, what every model call pays);
- ``prepare``: compaction's per-turn work before the call, on a real SQLite store holding the
  conversation: read the summary and the history (``history_messages`` = ``--rows``), decide
  what to fold (no model call: everything after the summary fits);
- ``history``: the store read alone, for comparison (what the session actor pays anyway
  when its history cache is cold).

    .venv/bin/python -m tests.bench.context [--rows 2000] [--chars 400] [--repeat 50]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from agent import Agent, ClientPool, CompactingRunner
from gateway.messages import ChatMessage, Inbound, TurnResult
from gateway.store import AdmitRow, AnswerTurn, History
from gateway.store.sqlite import open_sqlite_store
from tests.harness import make_config


def _median_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


async def _amedian_ms(fn: Callable[[], Awaitable[object]], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


async def run(rows: int, chars: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "b.db"
        for window in (8_000, 128_000, 0):
            config = make_config(
                db,
                "http://127.0.0.1:9/v1",
                model_extra=f"context_tokens = {window}\nmax_output_tokens = 1000\n",
                extra=f"[agent]\nhistory_messages = {rows}\nhistory_chars = 100000000\n",
            )
            agent = Agent(config.model, config.agent, ClientPool())
            history = [
                ChatMessage("user" if i % 2 == 0 else "assistant", "w" * chars) for i in range(rows)
            ]
            endpoint = agent.chain[0]
            _, fitted = agent.build(endpoint, history, "the new message")
            ms = _median_ms(
                lambda a=agent, e=endpoint, h=history: a.build(e, h, "the new message"), repeat
            )
            print(
                f"build   rows={rows} context_tokens={window or 'unbounded'}:"
                f" {ms:.3f} ms (kept {fitted.kept} rows, ~{fitted.tokens} tokens)"
            )
        async with open_sqlite_store(str(db)) as store:
            key = "peer:bench"
            for i in range(rows // 2):
                row = (await store.submit(AdmitRow(Inbound("peer", key, f"m{i}", "w" * chars)))).row
                await store.submit(
                    AnswerTurn(row, TurnResult(reply="w" * chars, model="m"), tuple(["w"]))
                )
            runner = CompactingRunner(agent, store, rows, history_chars=100_000_000)
            ms = await _amedian_ms(lambda: runner._prepare(key, "q", 0, None), repeat)
            print(f"prepare rows={rows} (summary read, history read, fold decision): {ms:.3f} ms")
            ms = await _amedian_ms(lambda: store.read(History(key, rows)), repeat)
            print(f"history rows={rows} (the store read alone): {ms:.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--chars", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    asyncio.run(run(args.rows, args.chars, args.repeat))


if __name__ == "__main__":
    main()
