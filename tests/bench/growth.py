"""Growth: does botmux stay flat as its store grows? (issue 20, "Growth")

    .venv/bin/python -m tests.bench.growth throughput [--repeat 3] [--rows 1000000]
    .venv/bin/python -m tests.bench.growth startup [--repeat 3] [--pending 10000]
    .venv/bin/python -m tests.bench.growth history [--repeat 200]

throughput: the suite's 50-conversation closed loop (the real gateway process, the loopback
fake model, new and existing conversations) against an empty store and against one seeded
with ``--rows`` rows over ``rows / 10`` conversations, alternating, ``--repeat`` times each:
turns/s, p50, gateway CPU ms per turn.

startup: a store with ``--pending`` pending user rows (over as many conversations, and over
100), and as many replies committed but not delivered: process start to /readyz 200, and to
every pending row answered (and every chunk delivered).

history: the per-turn history read (``Store.history``, 20 rows) of a conversation at row 20 and
at row 20,000, through the store's own API (SQLite; PostgreSQL too with BOTMUX_TEST_POSTGRES).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from gateway.store import History
from tests.bench import _load, _procs, _seed

Result = dict[str, float]


def _median(runs: list[Result]) -> dict[str, str]:
    return {
        key: f"{statistics.median(r[key] for r in runs):.2f}"
        f" [{min(r[key] for r in runs):.2f} .. {max(r[key] for r in runs):.2f}]"
        for key in runs[0]
    }


# -- throughput ------------------------------------------------------------------------------


async def _load_once(store: Path, model_url: str, workdir: Path, messages: int) -> Result:
    shutil.copy(store, workdir / "botmux.db")
    # The seeded copy is ~300 MB of dirty pages: written back now, not under the gateway's
    # own WAL writes and checkpoints during the run (the empty store's copy has none).
    os.sync()
    async with _procs.gateway(workdir, model_url) as gw:
        connector = aiohttp.TCPConnector(limit=60)
        async with aiohttp.ClientSession(connector=connector) as http:
            await _load.closed_loop(_load.peer_chat(http, gw.url, "warm"), 50, 2)
            cpu0 = _procs.cpu_seconds(gw.pid)
            # Existing conversations (seeded ones, with 10 rows of history) and new ones.
            half = _load.peer_chat(http, gw.url, "seed")
            new = _load.peer_chat(http, gw.url, f"new{time.monotonic_ns()}-")

            async def send(c: int, m: int) -> None:
                await (half if c % 2 else new)(c, m)

            result = await _load.closed_loop(send, 50, messages)
            cpu = _procs.cpu_seconds(gw.pid) - cpu0
    return {
        "turns_per_s": result.turns_per_s,
        "p50_ms": result.p50_ms,
        "p99_ms": 1000 * result.pct(0.99),
        "cpu_ms_per_turn": 1000 * cpu / result.turns,
    }


async def throughput(repeat: int, rows: int, messages: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        empty, seeded = base / "empty.db", base / "seeded.db"
        await _seed.create(empty)
        await _seed.create(seeded)
        started = time.perf_counter()
        _seed.seed(seeded, conversations=rows // 10, pairs=5)
        print(f"seeded {rows} rows in {time.perf_counter() - started:.1f} s", flush=True)
        runs: dict[str, list[Result]] = {"empty": [], "seeded": []}
        async with _procs.fake_model() as model:
            for n in range(repeat):
                for name, store in (("empty", empty), ("seeded", seeded))[:: 1 if n % 2 else -1]:
                    work = base / f"run-{name}-{n}"
                    work.mkdir()
                    result = await _load_once(store, model.url, work, messages)
                    shutil.rmtree(work)
                    runs[name].append(result)
                    print(f"  {name:7} {result}", flush=True)
    out: dict[str, Any] = {name: _median(r) for name, r in runs.items()}
    e = statistics.median(r["turns_per_s"] for r in runs["empty"])
    s = statistics.median(r["turns_per_s"] for r in runs["seeded"])
    ep = statistics.median(r["p50_ms"] for r in runs["empty"])
    sp = statistics.median(r["p50_ms"] for r in runs["seeded"])
    out["seeded_over_empty"] = {"turns_per_s": f"{s / e:.3f}", "p50_ms": f"{sp / ep:.3f}"}
    return out


# -- startup ---------------------------------------------------------------------------------


def _left(db: Path) -> tuple[int, int]:
    conn = sqlite3.connect(db)
    try:
        ((pending,),) = conn.execute(
            "SELECT COUNT(*) FROM messages WHERE state = 'pending'"
        ).fetchall()
        ((chunks,),) = conn.execute(
            "SELECT COUNT(*) FROM outbox WHERE state IN ('pending', 'sending')"
        ).fetchall()
        ((twice,),) = conn.execute(
            "SELECT COUNT(*) FROM (SELECT user_row_id FROM messages WHERE role = 'assistant'"
            " GROUP BY user_row_id HAVING COUNT(*) > 1)"
        ).fetchall()
    finally:
        conn.close()
    if twice:
        raise RuntimeError(f"{twice} rows answered twice")
    return pending, chunks


async def _start_once(conversations: int, pending: int, model_url: str, workdir: Path) -> Result:
    db = workdir / "botmux.db"
    await _seed.create(db)
    _seed.seed(db, conversations=conversations, pairs=1, pending=pending, undelivered=pending)
    async with _procs.gateway(workdir, model_url) as gw:
        ready = time.perf_counter() - gw.started_at
        while True:
            left = _left(db)
            if left == (0, 0):
                break
            if time.perf_counter() - gw.started_at > 300:
                raise RuntimeError(f"not all answered: {left} left")
            await asyncio.sleep(0.05)
        done = time.perf_counter() - gw.started_at
        cpu = _procs.cpu_seconds(gw.pid)
        rss = _procs.memory_kib(gw.pid)["VmHWM"] / 1024
    return {
        "seconds_to_ready": ready,
        "seconds_to_all_answered": done,
        "cpu_seconds_to_all_answered": cpu,
        "peak_rss_mb": rss,
    }


async def startup(repeat: int, pending: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with _procs.fake_model() as model:
        for conversations in (1, pending, 100):
            if conversations == 1:  # the same start with nothing left to resume
                runs = []
                for _ in range(repeat):
                    with tempfile.TemporaryDirectory() as tmp:
                        runs.append(await _start_once(1, 0, model.url, Path(tmp)))
                out["nothing pending"] = _median(runs)
                continue
            runs = []
            for _ in range(repeat):
                with tempfile.TemporaryDirectory() as tmp:
                    runs.append(await _start_once(conversations, pending, model.url, Path(tmp)))
                print(f"  {conversations} conversations: {runs[-1]}", flush=True)
            out[f"{pending} pending over {conversations} conversations"] = _median(runs)
    return out


# -- history ---------------------------------------------------------------------------------


async def history(repeat: int) -> dict[str, Any]:
    import os

    from gateway.store.sqlite import open_sqlite_store

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "botmux.db"
        await _seed.create(db)
        # Two conversations in a store of 1,000,000 rows: one at row 20, one at row 20,000.
        _seed.seed(db, conversations=1, pairs=10, prefix="short")
        _seed.seed(db, conversations=1, pairs=10_000, prefix="long")
        _seed.seed(db, conversations=98_000, pairs=5, prefix="other")
        async with open_sqlite_store(str(db)) as store:
            out["sqlite"] = await _time_history(store, repeat)
        url = os.environ.get("BOTMUX_TEST_POSTGRES")
        if url:
            out["postgres"] = await _postgres_history(url, repeat)
    return out


async def _time_history(store: Any, repeat: int) -> dict[str, str]:
    out = {}
    for name in ("short", "long"):
        key = f"peer:{name}0"
        await store.read(History(key, 20))
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            rows = await store.read(History(key, 20))
            times.append(1000 * (time.perf_counter() - started))
        assert len(rows) == 20, len(rows)
        out[f"history(20) at row {20 if name == 'short' else 20_000}"] = (
            f"{statistics.median(times):.3f} ms [{min(times):.3f} .. {max(times):.3f}]"
        )
    return out


async def _postgres_history(url: str, repeat: int) -> dict[str, str]:
    import asyncpg

    from gateway.store.postgres import open_postgres_store

    url = await fresh_database(url, "botmux_growth")
    async with open_postgres_store(url, node="bench") as store:
        db = await asyncpg.connect(url)
        try:
            await _seed_postgres(db)
        finally:
            await db.close()
        return await _time_history(store, repeat)


async def fresh_database(url: str, name: str) -> str:
    """A new empty database ``name`` on the server of ``url`` (the tests' own is left alone)."""
    import asyncpg

    admin = await asyncpg.connect(url)
    try:
        await admin.execute(f"DROP DATABASE IF EXISTS {name}")
        await admin.execute(f"CREATE DATABASE {name}")
    finally:
        await admin.close()
    return url.rsplit("/", 1)[0] + "/" + name


async def _seed_postgres(db: Any) -> None:
    """The two conversations, and 200,000 other rows, by COPY (the store's schema)."""
    now = time.time()
    convs = [("peer:short0", 10), ("peer:long0", 10_000)] + [
        (f"peer:other{i}", 5) for i in range(20_000)
    ]
    await db.copy_records_to_table(
        "conversations",
        records=[(k, "peer", now, now, 0, None, 0, 0) for k, _ in convs],
        columns=["key", "platform", "created_at", "updated_at", "reset_after", "owner", "fence",
                 "next_seq"],
    )  # fmt: skip
    rows: list[tuple[Any, ...]] = []
    next_id = 0
    for key, pairs in convs:
        for _ in range(pairs):
            user, reply = next_id + 1, next_id + 2
            next_id += 2
            rows.append((user, key, "user", "hello", "answered", "peer", f"p{user}", None, reply,
                         user, now))  # fmt: skip
            rows.append((reply, key, "assistant", "hi", "final", "peer", None, user, None, None,
                         now))  # fmt: skip
    await db.copy_records_to_table(
        "messages",
        records=rows,
        columns=["id", "conversation", "role", "content", "state", "platform",
                 "platform_message_id", "user_row_id", "answered_by", "seq", "created_at"],
    )  # fmt: skip
    await db.execute("SELECT setval('messages_id_seq', $1)", next_id)
    await db.execute("ANALYZE")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=["throughput", "startup", "history"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--messages", type=int, default=20, help="per conversation per run")
    parser.add_argument("--pending", type=int, default=10_000)
    args = parser.parse_args()
    if args.what == "throughput":
        result = asyncio.run(throughput(args.repeat, args.rows, args.messages))
    elif args.what == "startup":
        result = asyncio.run(startup(args.repeat, args.pending))
    else:
        result = asyncio.run(history(max(args.repeat, 50)))
    for name, figures in result.items():
        print(name)
        for key, value in figures.items():
            print(f"  {key:<36} {value}")


if __name__ == "__main__":
    main()
