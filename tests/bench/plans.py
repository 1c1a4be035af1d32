"""The query plans of the store's per-turn reads (and of the reads that scanned as the store
grew), on a store of 1,000,000 rows over 100,000 conversations: SQLite's EXPLAIN QUERY PLAN
with each read's time, and PostgreSQL's EXPLAIN (with BOTMUX_TEST_POSTGRES; 200,000 rows,
ANALYZEd, in a database of its own).

    .venv/bin/python -m tests.bench.plans [--rows 1000000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

from gateway.store import admission, console, conversations, outbox
from gateway.store._rows import MSG_COLUMNS as COLUMNS
from gateway.store._rows import numbered
from tests.bench import _seed

KEY = "peer:seed77"
HISTORY = (
    " WHERE conversation = ? AND id > (SELECT reset_after FROM conversations WHERE key = ?)"
    " AND ((role = 'user' AND state = 'answered') OR (role = 'assistant' AND failure IS NULL))"
    " ORDER BY id DESC LIMIT ?"
)
REPLY_TO = (
    " WHERE role = 'assistant' AND (user_row_id = ? OR id = (SELECT answered_by FROM messages"
    " WHERE id = ?)) ORDER BY id LIMIT 1"
)

#: name: (SQLite SQL, its parameters); every turn runs the first ones.
SQLITE: dict[str, tuple[str, tuple[Any, ...]]] = {
    "turn: backlog caps": (admission._BACKLOG, (KEY, 100, 1000, "peer", "x")),
    "turn: admission's row": (
        f"SELECT {COLUMNS} FROM messages WHERE (platform = ? AND platform_message_id = ?)",
        ("peer", "x"),
    ),
    "turn: pending headers": (admission._HEADERS, (KEY,)),
    "turn: message by id": (f"SELECT {COLUMNS} FROM messages WHERE id = ?", (5,)),
    "turn: history (20)": (f"SELECT {COLUMNS} FROM messages" + HISTORY, (KEY, KEY, 20)),
    "turn: attachments of rows": (
        "SELECT user_row_id, position FROM attachments WHERE user_row_id IN (?, ?)",
        (1, 2),
    ),
    "turn: summary": ("SELECT content, through FROM summaries WHERE conversation = ?", (KEY,)),
    "turn: reply_to (peer replay)": (f"SELECT {COLUMNS} FROM messages" + REPLY_TO, (999_999,) * 2),
    "start: undelivered": ("SELECT id FROM outbox WHERE state = 'pending' ORDER BY id", ()),
    "start: conversations with pending": (admission._WITH_PENDING, ()),
    "start: in flight": ("SELECT id FROM outbox WHERE state = 'sending'", ()),
    "metrics: outbox pending": (outbox._OUTBOX_PENDING, ()),
    "console: page of conversations": (console._search_sql("instr", False), ("", 50)),
    "console: next page": (console._search_sql("instr", True), ("", 1e12, 1e12, "z", 50)),
    "console: outbox": (outbox._CHUNKS, (50,)),
    "retention: idle conversations": (
        conversations._EXPIRED,
        (time.time() - 86400 * 30, conversations.ANONYMOUS_PATTERN, time.time() - 86400),
    ),
    "status: recent failures": (
        f"SELECT {COLUMNS} FROM messages WHERE role = 'assistant' AND failure IS NOT NULL"
        " ORDER BY id DESC LIMIT ?",
        (10,),
    ),
    "delete: a conversation's outbox": ("DELETE FROM outbox WHERE conversation = ?", (KEY,)),
    "delete turn: its chunks": (
        "DELETE FROM outbox WHERE conversation = (SELECT conversation FROM messages"
        " WHERE id = ?) AND user_row_id = ?",
        (5, 5),
    ),
    "delete turn: its replies": (conversations._REPLIES, (5,)),
}


PG_KEY = "peer:other77"
#: The PostgreSQL store's text of the same reads.
POSTGRES: dict[str, tuple[str, tuple[Any, ...]]] = {
    "turn: backlog caps": (numbered(admission._BACKLOG), (PG_KEY, 100, 1000, "peer", "x")),
    "turn: admission's row": (
        f"SELECT {COLUMNS} FROM messages WHERE (platform, platform_message_id) IN"
        " (SELECT * FROM unnest($1::text[], $2::text[]))",
        (["peer"], ["x"]),
    ),
    "turn: pending headers": (numbered(admission._HEADERS), (PG_KEY,)),
    "turn: message by id": (f"SELECT {COLUMNS} FROM messages WHERE id = $1", (5,)),
    "turn: history (20)": (
        f"SELECT {COLUMNS} FROM messages"
        + numbered(HISTORY).replace("$2", "$1").replace("$3", "$2"),
        (PG_KEY, 20),
    ),
    "turn: answer's oldest pending": (
        "SELECT conversation, MIN(seq) AS seq FROM messages"
        " WHERE conversation = ANY($1::text[]) AND state = 'pending' GROUP BY conversation",
        ([PG_KEY],),
    ),
    "turn: reply_to (peer replay)": (
        f"SELECT {COLUMNS} FROM messages" + numbered(REPLY_TO).replace("$2", "$1"),
        (199_999,),
    ),
    "start: undelivered": (
        "SELECT id FROM outbox WHERE state = 'pending' AND ($1::text IS NULL OR platform = $1)"
        " ORDER BY id",
        (None,),
    ),
    "console: page of conversations": (numbered(console._search_sql("strpos", False)), ("", 50)),
    "console: outbox": (numbered(outbox._CHUNKS), (50,)),
    "retention: idle conversations": (
        numbered(conversations._EXPIRED),
        (time.time() - 86400 * 30, conversations.ANONYMOUS_PATTERN, time.time() - 86400),
    ),
    "status: recent failures": (
        f"SELECT {COLUMNS} FROM messages WHERE role = 'assistant' AND failure IS NOT NULL"
        " ORDER BY id DESC LIMIT $1",
        (10,),
    ),
}


def sqlite_plans(db: Path) -> None:
    conn = sqlite3.connect(db)
    for name, (sql, params) in SQLITE.items():
        plan = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
        conn.execute("BEGIN")
        started = time.perf_counter()
        for _ in range(5):
            conn.execute(sql, params).fetchall()
        ms = (time.perf_counter() - started) / 5 * 1000
        conn.execute("ROLLBACK")
        print(f"| {name} | {ms:.3f} ms | {'; '.join(plan)} |")
    conn.close()


async def postgres_plans(url: str) -> None:
    import asyncpg

    from gateway.store.postgres import open_postgres_store
    from tests.bench.growth import _seed_postgres, fresh_database

    plans_url = await fresh_database(url, "botmux_plans")
    async with open_postgres_store(plans_url, node="plans"):
        pass  # migrated
    db = await asyncpg.connect(plans_url)
    try:
        await _seed_postgres(db)
        for name, (sql, params) in POSTGRES.items():
            plan = [r[0] for r in await db.fetch("EXPLAIN " + sql, *params)]
            started = time.perf_counter()
            for _ in range(5):
                await db.fetch(sql, *params)
            ms = (time.perf_counter() - started) / 5 * 1000
            print(f"| {name} | {ms:.3f} ms | {'; '.join(p.strip() for p in plan)} |")
    finally:
        await db.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "botmux.db"
        await _seed.create(db)
        _seed.seed(db, conversations=args.rows // 10, pairs=5)
        print("SQLite\n| read | time | EXPLAIN QUERY PLAN |\n|---|---|---|")
        sqlite_plans(db)
    url = os.environ.get("BOTMUX_TEST_POSTGRES")
    if url:
        print("\nPostgreSQL\n| read | time | EXPLAIN |\n|---|---|---|")
        await postgres_plans(url)


if __name__ == "__main__":
    asyncio.run(main())
