"""Seed a SQLite store fast: rows shaped like the gateway's own, written with ``executemany``
into the schema the gateway's own ``migrate`` creates.

Each conversation gets user+assistant pairs (the user row answered, linked to its reply by
``answered_by``; the reply ``final`` with one delivered outbox chunk); ``pending`` user rows
can be added at the end of conversations (a crash left them unanswered), and ``undelivered``
replies (committed, their chunk still pending). Used by the growth, startup and history
benchmarks.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import aiosqlite

from gateway.store._schema import migrate


async def create(path: Path) -> None:
    """An empty store at ``path`` with the current schema."""
    async with aiosqlite.connect(path, isolation_level=None) as db:
        await db.execute("PRAGMA journal_mode = WAL")
        await migrate(db)


def seed(
    path: Path,
    *,
    conversations: int,
    pairs: int,
    pending: int = 0,
    undelivered: int = 0,
    prefix: str = "seed",
    platform: str = "peer",
    content: str = "hello there, how are you today? " * 2,
    now: float | None = None,
) -> int:
    """Add ``pairs`` answered turns to each of ``conversations`` conversations
    (``peer:{prefix}{i}``), then ``pending`` unanswered user rows and ``undelivered`` answered
    turns whose one chunk is still pending, spread round-robin over the conversations.
    Returns the number of message rows written."""
    now = time.time() if now is None else now
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = OFF")
    try:
        (next_id,) = db.execute("SELECT COALESCE(MAX(id), 0) FROM messages").fetchone()
        (next_chunk,) = db.execute("SELECT COALESCE(MAX(id), 0) FROM outbox").fetchone()
        keys = [f"{platform}:{prefix}{i}" for i in range(conversations)]
        db.execute("BEGIN")
        db.executemany(
            "INSERT OR IGNORE INTO conversations (key, platform, created_at, updated_at)"
            " VALUES (?, ?, ?, ?)",
            [(k, platform, now - 86400 + i, now - 3600 + i * 1e-3) for i, k in enumerate(keys)],
        )
        messages: list[tuple[object, ...]] = []
        chunks: list[tuple[object, ...]] = []
        written = 0

        def turn(key: str, t: float, *, delivered: bool) -> None:
            nonlocal next_id, next_chunk
            user, reply = next_id + 1, next_id + 2
            next_id += 2
            pmid = f"{prefix}-{user}"
            messages.append(
                (user, key, "user", content, "answered", platform, pmid, None, reply, t)
            )
            messages.append(
                (
                    reply,
                    key,
                    "assistant",
                    "Sure: " + content,
                    "final",
                    platform,
                    None,
                    user,
                    None,
                    t,
                )
            )
            next_chunk += 1
            chunks.append(
                (
                    next_chunk,
                    key,
                    platform,
                    reply,
                    user,
                    0,
                    "Sure: " + content,
                    "delivered" if delivered else "pending",
                    f"out-{next_chunk}" if delivered else None,
                    t,
                    t if delivered else None,
                )
            )

        def flush() -> None:
            nonlocal written
            db.executemany(
                "INSERT INTO messages (id, conversation, role, content, state, platform,"
                " platform_message_id, user_row_id, answered_by, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                messages,
            )
            db.executemany(
                "INSERT INTO outbox (id, conversation, platform, message_id, user_row_id, seq,"
                " text, state, platform_message_id, created_at, delivered_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                chunks,
            )
            written += len(messages)
            messages.clear()
            chunks.clear()

        # Conversation by conversation (rows of one conversation interleave with others' in
        # a real store; contiguous ids make no difference to an index on (conversation, id)).
        for n in range(pairs):
            for i, key in enumerate(keys):
                turn(key, now - 3600 + n + i * 1e-6, delivered=True)
            if len(messages) >= 200_000:
                flush()
        for n in range(undelivered):
            turn(keys[n % len(keys)], now - 10, delivered=False)
        for n in range(pending):
            next_id += 1
            key = keys[n % len(keys)]
            messages.append(
                (next_id, key, "user", content, "pending", platform, f"{prefix}-{next_id}",
                 None, None, now - 5)
            )  # fmt: skip
        flush()
        db.execute("COMMIT")
    finally:
        db.close()
    return written
