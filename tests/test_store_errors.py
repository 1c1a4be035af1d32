"""The store raises only our exceptions (``StoreError`` and its subclasses), whatever its
database library raised: every exception class of sqlite3 and asyncpg has an entry in its
backend's translation table, and a store whose database fails on demand (a SQLite file locked
by another process or with its tables gone, a PostgreSQL behind a cut connection) raises
``StoreError`` from each family of its methods: reads, pairing reads, writes, pairing writes,
and (PostgreSQL) the lease statements."""

from __future__ import annotations

import inspect
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import asyncpg
import asyncpg.exceptions
import pytest

from gateway.errors import StoreError, StoreUnavailable
from gateway.messages import Inbound, StoredMessage, TurnResult
from gateway.store import (
    AdmitRow,
    AnswerTurn,
    ApprovedUsers,
    ApprovePairing,
    CancelTurn,
    Conversations,
    ConversationsWithPending,
    ExpireChunks,
    ExpireInFlight,
    FailChunk,
    History,
    IsApproved,
    MarkDelivered,
    MarkSending,
    Message,
    OutboxPending,
    PairingCodes,
    PendingRows,
    RecentFailures,
    ReplyTo,
    RequestPairing,
    ResetConversation,
    RevokeUser,
    Store,
    Transcript,
    Undelivered,
    open_sqlite_store,
)
from gateway.store._errors import SQLITE_ERRORS, kind_of
from gateway.store._pg_connection import CLOSE_DEADLINE_S, PG_ERRORS
from gateway.store.postgres import PostgresStore, open_postgres_store
from tests.fakes.tcp_proxy import proxy_to

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


def library_errors(module: object) -> list[type[BaseException]]:
    """Every exception class a module defines that can be raised as an error (not a warning
    or an informational message)."""
    found = []
    for _, value in inspect.getmembers(module, inspect.isclass):
        if not issubclass(value, Exception) or issubclass(value, Warning):
            continue
        if value.__module__.split(".")[0] not in ("sqlite3", "asyncpg"):
            continue
        if issubclass(value, asyncpg.exceptions.PostgresLogMessage):
            continue
        found.append(value)
    return found


def test_every_sqlite3_exception_translates_to_a_store_error() -> None:
    classes = library_errors(sqlite3)
    assert sqlite3.OperationalError in classes and sqlite3.IntegrityError in classes
    for cls in classes:
        assert kind_of(cls("x"), SQLITE_ERRORS) is not None, f"{cls} has no translation"
    # A lock held elsewhere, a disk that fails: unavailable; a constraint: this write only.
    assert kind_of(sqlite3.OperationalError("database is locked"), SQLITE_ERRORS) is (
        StoreUnavailable
    )
    assert kind_of(sqlite3.IntegrityError("UNIQUE"), SQLITE_ERRORS) is StoreError
    assert kind_of(PermissionError("read-only"), SQLITE_ERRORS) is StoreUnavailable


def test_every_asyncpg_exception_translates_to_a_store_error() -> None:
    classes = library_errors(asyncpg.exceptions) + library_errors(asyncpg)
    assert len(classes) > 200  # every SQLSTATE class, and the client's own
    for cls in classes:
        assert kind_of(cls("x"), PG_ERRORS) is not None, f"{cls} has no translation"
    unavailable = [
        asyncpg.ConnectionDoesNotExistError,  # the connection is gone
        asyncpg.AdminShutdownError,
        asyncpg.CannotConnectNowError,
        asyncpg.IdleInTransactionSessionTimeoutError,
        asyncpg.TooManyConnectionsError,
        asyncpg.InterfaceError,
        asyncpg.InternalClientError,
        ConnectionResetError,
        TimeoutError,  # command_timeout
    ]
    for cls in unavailable:
        assert kind_of(cls("x"), PG_ERRORS) is StoreUnavailable, cls
    refused = [
        asyncpg.UniqueViolationError,
        asyncpg.QueryCanceledError,  # statement_timeout: the connection is still usable
        asyncpg.exceptions._base.DataError,  # an argument asyncpg could not encode
        asyncpg.PostgresError,
    ]
    for cls in refused:
        assert kind_of(cls("x"), PG_ERRORS) is StoreError, cls
    # A bug of ours is not the database's: it is not translated.
    assert kind_of(KeyError("x"), PG_ERRORS) is None


def message(i: int) -> Inbound:
    return Inbound(platform="peer", conversation="peer:a", platform_message_id=f"m{i}", text="hi")


Call = Callable[[Store, StoredMessage], Awaitable[object]]

READS: dict[str, Call] = {
    "pending": lambda s, row: s.read(PendingRows("peer:a")),
    "conversations_with_pending": lambda s, row: s.read(ConversationsWithPending()),
    "history": lambda s, row: s.read(History("peer:a", 10)),
    "transcript": lambda s, row: s.read(Transcript("peer:a")),
    "message": lambda s, row: s.read(Message(row.id)),
    "reply_to": lambda s, row: s.read(ReplyTo(row.id)),
    "undelivered": lambda s, row: s.read(Undelivered()),
    "recent_failures": lambda s, row: s.read(RecentFailures(5)),
    "outbox_pending": lambda s, row: s.read(OutboxPending()),
    "conversations": lambda s, row: s.read(Conversations()),
    # pairing and the allowlist
    "is_approved": lambda s, row: s.read(IsApproved("telegram", "42")),
    "pairing_codes": lambda s, row: s.read(PairingCodes(time.time())),
    "approved_users": lambda s, row: s.read(ApprovedUsers()),
}
WRITES: dict[str, Call] = {
    "admit": lambda s, row: s.submit(AdmitRow(message(99))),
    "answer": lambda s, row: s.submit(
        AnswerTurn(row, TurnResult(reply="ok", model="m"), tuple(["ok"]))
    ),
    "cancel": lambda s, row: s.submit(CancelTurn(row.id)),
    "reset": lambda s, row: s.submit(ResetConversation("peer:a")),
    "mark_delivered": lambda s, row: s.submit(MarkDelivered(1, "p1")),
    "expire_chunks": lambda s, row: s.submit(ExpireChunks(tuple([1]))),
    "chunk_failed": lambda s, row: s.submit(FailChunk(1)),
    "mark_sending": lambda s, row: s.submit(MarkSending(1)),
    "expire_in_flight": lambda s, row: s.submit(ExpireInFlight()),
    # pairing
    "request_pairing": lambda s, row: s.submit(
        RequestPairing("telegram", "42", "Ann", ttl_s=60, max_pending=3)
    ),
    "approve_pairing": lambda s, row: s.submit(ApprovePairing("telegram", "ABCD2345")),
    "revoke_user": lambda s, row: s.submit(RevokeUser("telegram", "42")),
}


async def failures(store: Store, row: StoredMessage, calls: dict[str, Call]) -> dict[str, str]:
    """Each call's exception class name ('-' when it did not fail); anything that is not a
    StoreError propagates and fails the test."""
    seen: dict[str, str] = {}
    for name, call in calls.items():
        try:
            await call(store, row)
        except StoreError as exc:
            seen[name] = type(exc).__name__
        else:
            seen[name] = "-"
    return seen


async def test_sqlite_writes_fail_as_store_errors_while_another_process_holds_the_lock(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "s.db")
    async with open_sqlite_store(path, busy_timeout_s=0.05) as store:
        row = (await store.submit(AdmitRow(message(1)))).row
        other = sqlite3.connect(path, isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")  # e.g. a backup tool or a CLI holding the lock
            seen = await failures(store, row, WRITES)
            assert seen == dict.fromkeys(WRITES, "StoreUnavailable")
            other.execute("ROLLBACK")
        finally:
            other.close()
        # Once the lock is gone the same store carries on.
        assert (await store.submit(AdmitRow(message(2)))).row.id > row.id
        assert await store.submit(RequestPairing("telegram", "42", "Ann", ttl_s=60, max_pending=3))


async def test_sqlite_reads_fail_as_store_errors_when_the_tables_are_gone(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "s.db")
    tables = ("messages", "outbox", "conversations", "approved_users", "pairing_codes")
    async with open_sqlite_store(path) as store:
        row = (await store.submit(AdmitRow(message(1)))).row
        other = sqlite3.connect(path, isolation_level=None)
        try:
            for table in tables:
                other.execute(f"ALTER TABLE {table} RENAME TO gone_{table}")
            seen = await failures(store, row, READS)
            assert seen == dict.fromkeys(READS, "StoreUnavailable")
            for table in tables:
                other.execute(f"ALTER TABLE gone_{table} RENAME TO {table}")
        finally:
            other.close()
        assert await store.read(PendingRows("peer:a")) == [row]


async def lease_calls(store: PostgresStore) -> dict[str, str]:
    calls: dict[str, Callable[[], Awaitable[object]]] = {
        "register_node": store.leases.register_node,
        "renew": store.leases.renew,
        "claim_orphans": lambda: store.leases.claim_orphans(10),
        "acquire": lambda: store.leases.acquire("peer:b"),
        "notify_owner": lambda: store.leases.notify_owner("peer:a", "x"),
        "try_named": lambda: store.leases.try_named("telegram:poller"),
        "live_nodes": store.leases.live_nodes,
        "release_all": store.leases.release_all,
    }
    seen = {}
    for name, call in calls.items():
        try:
            await call()
        except StoreError as exc:
            seen[name] = type(exc).__name__
        else:
            seen[name] = "-"
    return seen


async def test_postgres_methods_fail_as_store_errors_when_the_connection_is_cut(
    postgres_url: str,
) -> None:
    async with proxy_to(postgres_url) as proxy:
        async with open_postgres_store(proxy.url(postgres_url), node="n1", lease_s=2) as store:
            await store.leases.register_node()
            row = (await store.submit(AdmitRow(message(1)))).row
            proxy.cut()
            with anyio.fail_after(30):
                seen = await failures(store, row, {**READS, **WRITES})
                leases = await lease_calls(store)
            assert seen == dict.fromkeys({**READS, **WRITES}, "StoreUnavailable")
            assert leases == {name: "StoreUnavailable" for name in leases}
            proxy.restore()
            # The pool and the writer reconnect: the same store carries on.
            assert await store.read(PendingRows("peer:a")) == [row]
            assert (await store.submit(AdmitRow(message(2)))).row.id > row.id


async def test_a_black_holed_postgres_fails_writes_and_reads_and_closes_within_deadlines(
    postgres_url: str,
) -> None:
    deadline_s = 0.5
    async with proxy_to(postgres_url) as proxy:
        async with open_postgres_store(
            proxy.url(postgres_url), node="n1", lease_s=2, command_timeout_s=deadline_s
        ) as store:
            row = (await store.submit(AdmitRow(message(1)))).row
            proxy.stall()  # connections stay open; nothing comes back
            with anyio.fail_after(10):
                with pytest.raises(StoreUnavailable, match=r"did not commit within|Timeout"):
                    await store.submit(AdmitRow(message(2)))
                with pytest.raises(StoreUnavailable):
                    await store.read(PendingRows("peer:a"))
            closing = anyio.current_time()
        closed_s = anyio.current_time() - closing
        # The writer had nothing queued; the pool and the writer connection are cut after
        # their polite close's deadline each.
        assert closed_s < deadline_s + 2 * CLOSE_DEADLINE_S + deadline_s, closed_s
    # What was committed before the partition is there.
    async with open_postgres_store(postgres_url, node="n2") as store:
        assert await store.read(PendingRows("peer:a")) == [row]


async def test_writes_queued_at_a_close_against_a_black_holed_postgres_fail_within_deadlines(
    postgres_url: str,
) -> None:
    deadline_s = 0.5
    outcomes: dict[int, str] = {}

    async def admit(store: Store, i: int) -> None:
        try:
            await store.submit(AdmitRow(message(i)))
            outcomes[i] = "committed"
        except StoreError as exc:
            outcomes[i] = type(exc).__name__

    async with proxy_to(postgres_url) as proxy, anyio.create_task_group() as tg:
        async with open_postgres_store(
            proxy.url(postgres_url), node="n1", lease_s=2, command_timeout_s=deadline_s
        ) as store:
            proxy.stall()
            tg.start_soon(admit, store, 1)
            await anyio.wait_all_tasks_blocked()  # the writer is in its commit of 1
            tg.start_soon(admit, store, 2)
            await anyio.wait_all_tasks_blocked()  # 2 waits behind it
            closing = anyio.current_time()
        closed_s = anyio.current_time() - closing
    # Neither committed, and each caller was told (StoreUnavailable: outcome unknown), within
    # the close's deadline for what is queued plus the connections' polite closes.
    assert outcomes == {1: "StoreUnavailable", 2: "StoreUnavailable"}
    assert closed_s < deadline_s + 2 * CLOSE_DEADLINE_S + deadline_s, closed_s
    async with open_postgres_store(postgres_url, node="n2") as store:
        assert await store.read(PendingRows("peer:a")) == []
