"""Transcript pages (issue 37, review 2026-12-05 L-8): what one call of the transcript route,
of A2A ``ListTasks`` and of ``GET /v1/responses/{id}`` costs in a long conversation, before
(the whole conversation read each time) and after (only the page, or the one row id).

Not a test: it prints figures. On a SQLite store seeded with ``--rows`` rows in one
conversation (``tests.bench._seed``), each figure the median of ``--repeat`` calls:

- in process, the store read and the JSON body: the whole transcript as the old route read
  it, against the default page (100 rows); the whole transcript A2A's old ``ListTasks`` read
  for a page of 50 tasks, against the task page; the whole transcript the old
  ``/v1/responses`` read for one previous id, against ``PreviousTurn``;
- over HTTP, a running gateway's ``GET /api/sessions/{id}/messages`` (the default page) and
  ``?limit=1000``.

    .venv/bin/python -m tests.bench.transcript_pages [--rows 10000] [--repeat 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp

from gateway.store import PreviousTurn, TaskPage, Transcript, TranscriptPage
from gateway.store.sqlite import open_sqlite_store
from platforms.peer.convert import TRANSCRIPT_PAGE, transcript_json
from tests.bench._seed import create, seed
from tests.harness import make_config, running_gateway


async def _median_ms(fn: Callable[[], Awaitable[object]], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


async def run(rows: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "b.db"
        await create(db)
        seed(db, conversations=1, pairs=rows // 2, prefix="long")
        key = "peer:long0"
        figures: dict[str, float] = {}
        async with open_sqlite_store(str(db)) as store:
            newest = (await store.read(TranscriptPage(key, 1))).rows[-1].id

            async def whole() -> None:
                json.dumps(transcript_json(await store.read(Transcript(key))))

            async def page() -> None:
                found = await store.read(TranscriptPage(key, TRANSCRIPT_PAGE))
                json.dumps(transcript_json(found.rows, next_before=found.rows[0].id))

            async def tasks() -> None:
                await store.read(TaskPage(key, "long-", 50))

            async def previous() -> None:
                await store.read(PreviousTurn(key, newest))

            figures["transcript route, whole (before)"] = await _median_ms(whole, repeat)
            figures[f"transcript route, page of {TRANSCRIPT_PAGE} (after)"] = await _median_ms(
                page, repeat
            )
            figures["ListTasks / responses, whole transcript read (before)"] = await _median_ms(
                lambda: store.read(Transcript(key)), repeat
            )
            figures["ListTasks, task page of 50 (after)"] = await _median_ms(tasks, repeat)
            figures["responses, previous turn (after)"] = await _median_ms(previous, repeat)
        async with (
            running_gateway(make_config(db, None)) as (_, url),
            aiohttp.ClientSession() as http,
        ):

            async def get(query: str) -> None:
                async with http.get(f"{url}/api/sessions/long0/messages{query}") as r:
                    assert r.status == 200
                    await r.read()

            figures["HTTP GET, default page"] = await _median_ms(lambda: get(""), repeat)
            figures["HTTP GET, limit=1000"] = await _median_ms(lambda: get("?limit=1000"), repeat)
    print(f"{rows} rows in one conversation, median of {repeat}:")
    for what, ms in figures.items():
        print(f"  {what:<58} {ms:8.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    asyncio.run(run(args.rows, args.repeat))


if __name__ == "__main__":
    main()
