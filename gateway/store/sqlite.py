"""The embedded store: SQLite through aiosqlite, WAL, with group commit (``_writer``).

This module only holds the connections, runs transactions and assigns ids; what each write
and query does is its concern module's (``admission``, ``answers``, ...), found through
``registry``. The writer applies a batch's runs of the same write, all in one transaction, in
one hop to aiosqlite's connection thread; a query runs whole on the reader's thread, also in
one hop (a hop costs ~40 us of CPU).

Reads use a second connection, which WAL lets run beside the writer and which only ever sees
committed rows. ``synchronous=NORMAL`` keeps every commit through a process crash (SIGKILL);
only a power loss can take the last commits back.

Row ids are assigned here, in the order operations reach the writer, so id order is
admission order (SPEC section 5: arrival order means admission order).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from itertools import groupby
from typing import Any, Protocol, TypeVar

import aiosqlite
import anyio

from gateway.errors import StoreClosed, StoreError
from gateway.events import Observe
from gateway.store._errors import SQLITE_ERRORS, mapped
from gateway.store._schema import migrate
from gateway.store._writer import GroupWriter
from gateway.store.base import StoreStatistics
from gateway.store.commands import Ids, Query, SqliteTx, Write
from gateway.store.registry import REGISTRY

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


class _OnThread(Protocol):
    """aiosqlite's ``Connection._execute``: run a function on the connection's own thread."""

    def __call__(
        self, fn: Callable[[sqlite3.Connection], T], db: sqlite3.Connection, /
    ) -> Awaitable[T]: ...


async def on_thread(connection: aiosqlite.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """``fn(db)`` on ``connection``'s thread, one hop there and back."""
    run: _OnThread = connection._execute
    return await run(fn, connection._conn)


class SqliteStore:
    """The :class:`~gateway.store.base.Store` on one SQLite file; see :func:`open_sqlite_store`."""

    #: A single node: no leases (``gateway.store.leases`` is PostgreSQL's).
    leases = None

    def __init__(
        self,
        path: str,
        writer: aiosqlite.Connection,
        reader: aiosqlite.Connection,
        *,
        ids: Ids,
        mailbox: int = 4096,
        command_timeout_s: float = 10.0,
        clock: Callable[[], float] = time.time,
        observe: Observe = lambda event: None,
    ) -> None:
        self.path = path
        self._writer = writer
        self._reader = reader
        self._clock = clock
        self._ids = ids
        self._group = GroupWriter(
            self._commit, mailbox=mailbox, observe=observe, deadline_s=command_timeout_s
        )

    def __repr__(self) -> str:
        return f"<SqliteStore {self.path!r} commits={self._group.statistics().commits}>"

    def stop_by(self, deadline: float) -> None:
        self._group.stop_by(deadline)

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(writer=self._group.statistics(), leases=None)

    async def submit(self, write: Write[R]) -> R:
        assert REGISTRY.knows(write), f"not a store write: {write!r}"
        return await self._group.submit(write)

    async def read(self, query: Query[R]) -> R:
        handler = REGISTRY.reader(query)
        with _read_errors():
            return await on_thread(self._reader, lambda db: handler.sqlite(db, query))

    # -- the writer ------------------------------------------------------------------------

    async def _commit(self, batch: list[Write[Any]]) -> Sequence[object]:
        # The whole group commit is one call on aiosqlite's connection thread: one hop there
        # and back instead of one per statement (that was ~1 ms per commit).
        with mapped(SQLITE_ERRORS, "store write failed"):
            return await on_thread(self._writer, lambda db: self._commit_on_thread(db, batch))

    def _commit_on_thread(self, db: sqlite3.Connection, batch: list[Write[Any]]) -> list[object]:
        """Apply ``batch`` in one transaction; runs on the writer connection's own thread."""
        results: list[object] = []
        tx = SqliteTx(db, self._clock(), self._ids)
        db.execute("BEGIN IMMEDIATE")
        try:
            for kind, run in groupby(batch, key=type):
                results.extend(REGISTRY.writer(kind).sqlite(tx, list(run)))
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return results


@contextmanager
def _read_errors() -> Iterator[None]:
    """A read's failures as the store's: closed, or failed (not the caller's fault)."""
    try:
        with mapped(SQLITE_ERRORS, "store read failed"):
            yield
    except ValueError as exc:  # aiosqlite: "no active connection"
        raise StoreClosed("the store is closed") from exc
    except sqlite3.Error as exc:  # locked, I/O error, ...: the store failed, not the caller
        raise StoreError(f"store read failed: {exc}") from exc


def _create_private(path: str) -> None:
    """Create the database file readable by its owner only (it holds every conversation)."""
    if path == ":memory:" or os.path.exists(path):
        return
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    os.close(fd)


async def _connect(path: str, busy_timeout_s: float) -> aiosqlite.Connection:
    db = await aiosqlite.connect(path, isolation_level=None)
    await db.execute("PRAGMA journal_mode = WAL")
    await db.execute("PRAGMA synchronous = NORMAL")
    await db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
    await db.execute("PRAGMA foreign_keys = ON")
    return db


async def _close(db: aiosqlite.Connection, deadline_s: float) -> None:
    """Close within the deadline (a statement waiting on a lock ends within busy_timeout_s);
    past it, the connection's thread is told to stop once its current statement ends."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(deadline_s) as waited:
        await db.close()
    if waited.cancelled_caught:
        log.warning("store: the SQLite connection did not close in time")
        db.stop()


async def _last_ids(db: aiosqlite.Connection) -> Ids:
    rows = await db.execute_fetchall(
        "SELECT (SELECT COALESCE(MAX(id), 0) FROM messages),"
        " (SELECT COALESCE(MAX(id), 0) FROM outbox)"
    )
    ((message, chunk),) = rows
    return Ids(message=message, chunk=chunk)


@asynccontextmanager
async def open_sqlite_store(
    path: str,
    *,
    mailbox: int = 4096,
    busy_timeout_s: float = 5.0,
    command_timeout_s: float = 10.0,
    clock: Callable[[], float] = time.time,
    observe: Observe = lambda event: None,
) -> AsyncIterator[SqliteStore]:
    """Open (creating and migrating as needed) the store at ``path``; close it on exit.
    ``busy_timeout_s``: how long a statement waits for a lock another process holds before
    it fails (``StoreUnavailable``); ``command_timeout_s``: how long a group commit may take
    (and the close, for what is queued)."""
    opening = f"cannot open the store at {path}"
    with mapped(SQLITE_ERRORS, opening):
        _create_private(path)
        writer = await _connect(path, busy_timeout_s)
    reader: aiosqlite.Connection | None = None
    try:
        with mapped(SQLITE_ERRORS, opening):
            await migrate(writer)
            reader = await _connect(path, busy_timeout_s)
            store = SqliteStore(
                path,
                writer,
                reader,
                ids=await _last_ids(writer),
                mailbox=mailbox,
                command_timeout_s=command_timeout_s,
                clock=clock,
                observe=observe,
            )
        async with store._group.running():
            yield store
    finally:
        for connection in (reader, writer):
            if connection is not None:
                await _close(connection, command_timeout_s)
