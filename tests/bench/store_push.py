"""The SQLite store's writer pushed as hard as it commits, against raw aiosqlite (issue 20,
"Store").

    .venv/bin/python -m tests.bench.store_push [--writers 200] [--turns 20000] [--repeat 3]

``--writers`` tasks each run turns through the store's own write API as fast as it commits:
``admit`` a user row, then ``answer`` it with one chunk, then ``mark_delivered`` the chunk
(what a turn writes: 2 message rows and 1 outbox row inserted, the user row, the conversation
and the chunk updated). Figures: rows inserted per second (3 per turn), store operations per
second, the process's CPU per turn, commits and the mean batch; beside it raw aiosqlite's
``executemany`` of 1,000 rows per commit into a table of the same shape (WAL,
``synchronous=NORMAL``), in the same process, alternating.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import anyio

from gateway.messages import Inbound, TurnResult
from gateway.store import AdmitRow, AnswerTurn, MarkDelivered
from gateway.store.sqlite import open_sqlite_store
from tests.bench._figures import spread


async def push(path: Path, writers: int, turns: int) -> dict[str, float]:
    async with open_sqlite_store(str(path), mailbox=4096) as store:
        per_writer = turns // writers
        cpu0, started = time.process_time(), time.perf_counter()

        async def writer(w: int) -> None:
            for n in range(per_writer):
                inbound = Inbound("peer", f"peer:w{w}", f"w{w}-{n}", f"hello there {n}")
                admission = await store.submit(AdmitRow(inbound))
                outcome = await store.submit(
                    AnswerTurn(admission.row, TurnResult(f"echo {n}"), tuple([f"echo {n}"]))
                )
                await store.submit(MarkDelivered(outcome.chunks[0].id, f"http:{admission.row.id}"))

        async with anyio.create_task_group() as tg:
            for w in range(writers):
                tg.start_soon(writer, w)
        seconds = time.perf_counter() - started
        cpu = time.process_time() - cpu0
        stats = store.statistics().writer
    done = per_writer * writers
    return {
        "store_rows_per_s": 3 * done / seconds,
        "turns_per_s": done / seconds,
        "cpu_us_per_turn": 1e6 * cpu / done,
        "commits": float(stats.commits),
        "mean_batch": stats.operations / max(1, stats.commits),
    }


async def raw(
    path: Path, rows: int = 100_000, per_commit: int = 1000, *, index: bool = True
) -> float:
    """Raw aiosqlite's rows per second: ``executemany`` of ``per_commit`` rows per commit
    (WAL, ``synchronous=NORMAL``), with an index on (conversation, id) like the store's
    messages when ``index``; the ceiling the store's writer is measured against."""
    import aiosqlite

    async with aiosqlite.connect(path, isolation_level=None) as db:
        await db.execute("PRAGMA journal_mode = WAL")
        await db.execute("PRAGMA synchronous = NORMAL")
        await db.execute(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, conversation TEXT, content TEXT, state TEXT,"
            " created_at REAL)"
        )
        if index:
            await db.execute("CREATE INDEX t_by_conversation ON t (conversation, id)")
        started = time.perf_counter()
        for start in range(0, rows, per_commit):
            await db.execute("BEGIN")
            await db.executemany(
                "INSERT INTO t (id, conversation, content, state, created_at) VALUES (?,?,?,?,?)",
                [
                    (i, f"peer:c{i % 50}", "hello there", "pending", 0.0)
                    for i in range(start + 1, start + per_commit + 1)
                ],
            )
            await db.execute("COMMIT")
        return rows / (time.perf_counter() - started)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--writers", type=int, default=200)
    parser.add_argument("--turns", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runs, raws = [], []
    for n in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            runs.append(await push(Path(tmp) / "botmux.db", args.writers, args.turns))
            raws.append(await raw(Path(tmp) / f"raw{n}.db"))
        print(f"  store {runs[-1]}  raw {raws[-1]:.0f} rows/s", flush=True)
    for key in runs[0]:
        print(f"{key:<22} {spread([r[key] for r in runs], digits=1, width=12)}")
    print(f"{'raw_rows_per_s':<22} {spread(raws, digits=1, width=12)}")
    ratios = [r["store_rows_per_s"] / w for r, w in zip(runs, raws, strict=True)]
    print(f"{'ratio_of_raw':<22} {spread(ratios, digits=3, width=12)}")


if __name__ == "__main__":
    asyncio.run(main())
