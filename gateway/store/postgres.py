"""The shared store: PostgreSQL through asyncpg, for one or several botmux nodes.

The same :class:`~gateway.store.base.Store` as SQLite, with the same group commit
(``_writer``: one writer connection per node, each batch one transaction, one round trip per
statement kind, typed arrays through ``unnest``). This module only holds the connections and
runs transactions; what each write and query does is its concern module's, found through
``registry``, and the leases are :class:`~gateway.store.leases.PgLeases`, which the cluster is
handed (docs/CLUSTER.md has the design): admission places conversations and the answer commit
is fenced on them, in the writer's transaction.

Connections are held per statement (a pool), never per turn, plus the writer's and one for
LISTEN. A writer connection that failed is cut and reconnected before the next batch.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from itertools import groupby
from typing import Any, TypeVar

import anyio
import asyncpg

from gateway.errors import StoreClosed, StoreUnavailable
from gateway.events import Observe
from gateway.store._errors import kind_of, mapped
from gateway.store._pg_connection import (
    PG_ERRORS,
    close_or_cut,
    connect_options,
    connection_lost,
    redact,
)
from gateway.store._pg_schema import migrate
from gateway.store._writer import GroupWriter
from gateway.store.base import StoreStatistics
from gateway.store.commands import PgTx, Query, Write
from gateway.store.leases import PgLeases
from gateway.store.registry import REGISTRY

log = logging.getLogger(__name__)

R = TypeVar("R")


def default_node_id() -> str:
    """hostname-pid, short enough for a channel name (PostgreSQL allows 63 bytes)."""
    host = "".join(c if c.isalnum() or c in "._-" else "-" for c in socket.gethostname())
    return f"{host[:40]}-{os.getpid()}"


class PostgresStore:
    """The :class:`~gateway.store.base.Store` on PostgreSQL; see :func:`open_postgres_store`."""

    def __init__(
        self,
        url: str,
        pool: asyncpg.Pool,
        writer: asyncpg.Connection,
        *,
        leases: PgLeases,
        command_timeout_s: float = 10.0,
        mailbox: int = 4096,
        clock: Callable[[], float] = time.time,
        observe: Observe = lambda event: None,
    ) -> None:
        self.url = url
        self.leases = leases
        self.command_timeout_s = command_timeout_s
        self._pool = pool
        self._writer = writer
        self._clock = clock
        self._group = GroupWriter(
            self._commit, mailbox=mailbox, observe=observe, deadline_s=command_timeout_s
        )
        self._closing = False
        self.close_by = math.inf  # when the close must be over (anyio's clock), if stopping

    def __repr__(self) -> str:
        return f"<PostgresStore node={self.leases.node} leases={len(self.leases.held)}>"

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(writer=self._group.statistics(), leases=len(self.leases.held))

    def stop_by(self, deadline: float) -> None:
        self.close_by = deadline
        self._group.stop_by(deadline)

    async def submit(self, write: Write[R]) -> R:
        assert REGISTRY.knows(write), f"not a store write: {write!r}"
        return await self._group.submit(write)

    async def read(self, query: Query[R]) -> R:
        handler = REGISTRY.reader(query)
        try:
            with mapped(PG_ERRORS, "store read failed"):
                async with self._pool.acquire() as db:
                    return await handler.postgres(db, query)
        except StoreUnavailable as exc:
            if self._pool.is_closing():
                raise StoreClosed("the store is closed") from exc
            raise

    # -- the writer ------------------------------------------------------------------------

    async def _commit(self, batch: list[Write[Any]]) -> Sequence[object]:
        if self._writer.is_closed():
            await self._reconnect_writer()
        tx = PgTx(self._writer, self._clock(), self.leases)
        results: list[object] = []
        try:
            async with self._writer.transaction():
                for write_type, run in groupby(batch, key=type):
                    results.extend(await REGISTRY.writer(write_type).postgres(tx, list(run)))
        except Exception as exc:
            if not connection_lost(exc) and not self._writer.is_closed():
                # The server refused a statement: the writer retries write by write.
                kind = kind_of(exc, PG_ERRORS)
                if kind is None:
                    raise  # a bug of ours: likewise
                raise kind(f"the database refused a write: {exc}") from exc
            if self._closing:
                raise StoreClosed("the store is closed") from exc
            self._writer.terminate()  # reconnected before the next batch
            raise StoreUnavailable(f"the database connection was lost: {exc}") from exc
        except BaseException:
            # Cancelled (the writer's deadline, a close): the transaction's outcome is unknown
            # and the connection may be mid-statement. Cut it; the next batch reconnects.
            self._writer.terminate()
            raise
        for action in tx.after_commit:
            action()
        return results

    async def _reconnect_writer(self) -> None:
        options = connect_options(self.leases.lease_s, self.command_timeout_s)
        with mapped(PG_ERRORS, "cannot reach the database"), anyio.fail_after(self.leases.lease_s):
            self._writer = await asyncpg.connect(self.url, **options)
        log.warning("store: reconnected to the database")


@asynccontextmanager
async def open_postgres_store(
    url: str,
    *,
    node: str | None = None,
    lease_s: float = 5.0,
    pool_size: int = 10,
    command_timeout_s: float = 10.0,
    mailbox: int = 4096,
    clock: Callable[[], float] = time.time,
    observe: Observe = lambda event: None,
) -> AsyncIterator[PostgresStore]:
    """Connect (migrating the schema as needed) to the database at ``url``; close on exit.
    ``command_timeout_s``: how long connecting, each statement and each group commit may
    take; it also bounds how long the close waits for queued writes."""
    options = connect_options(lease_s, command_timeout_s)
    opening = f"cannot open the store at {redact(url)}"
    with mapped(PG_ERRORS, opening), anyio.fail_after(30):
        writer = await asyncpg.connect(url, **options)
    pool: asyncpg.Pool | None = None
    store: PostgresStore | None = None
    try:
        with mapped(PG_ERRORS, opening):
            await migrate(writer)
            pool = await asyncpg.create_pool(url, min_size=1, max_size=pool_size, **options)
        assert pool is not None
        leases = PgLeases(
            pool, url=url, node=node or default_node_id(), lease_s=lease_s, options=options
        )
        store = PostgresStore(
            url,
            pool,
            writer,
            leases=leases,
            command_timeout_s=command_timeout_s,
            mailbox=mailbox,
            clock=clock,
            observe=observe,
        )
        async with store._group.running():
            yield store
    finally:
        close_by = math.inf
        if store is not None:
            store._closing = True
            store.leases.close()
            writer = store._writer  # reconnected, perhaps
            close_by = store.close_by
        # Both at once: a database that stopped answering costs one goodbye's wait, not two.
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as closing:
                if pool is not None:
                    closing.start_soon(close_or_cut, pool, close_by)
                closing.start_soon(close_or_cut, writer, close_by)
