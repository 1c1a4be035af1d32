"""Connections to PostgreSQL: their session settings, asyncpg's exceptions translated into
ours (which failures leave a connection unusable), and URLs fit to show (without the
password)."""

from __future__ import annotations

import functools
import math
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

import anyio
import asyncpg

from gateway.errors import StoreError, StoreUnavailable
from gateway.store._errors import Table, kind_of, mapped

P = ParamSpec("P")
T = TypeVar("T")


def session_settings(lease_s: float) -> dict[str, str]:
    """Session settings of the writer's and the pool's connections. A node frozen in the
    middle of a transaction (SIGSTOP, a VM paused) would hold its row locks for as long as it
    stays frozen: its own heartbeat row, which every claimer locks FOR SHARE, or conversation
    rows. PostgreSQL ends such a session after half a lease, so the others can take over (our
    transactions never sit idle: their statements follow each other at once)."""
    return {"idle_in_transaction_session_timeout": str(max(500, int(lease_s * 500)))}


#: How long a connection (or the pool) may take to close politely before it is cut: the
#: server rolls back whatever such a connection left open, so nothing depends on the goodbye.
CLOSE_DEADLINE_S = 1.0


def connect_options(lease_s: float, command_timeout_s: float) -> dict[str, Any]:
    """asyncpg's options for every connection of the store: the session settings, and how
    long connecting and each statement may take (``[store] command_timeout_s``), so that a
    database that stops answering (a partition, a frozen server) fails the statement with
    ``StoreUnavailable`` instead of holding its caller forever."""
    return {
        "server_settings": session_settings(lease_s),
        "timeout": command_timeout_s,
        "command_timeout": command_timeout_s,
    }


async def close_or_cut(
    connection: asyncpg.Connection | asyncpg.Pool, close_by: float = math.inf
) -> None:
    """Close politely within :data:`CLOSE_DEADLINE_S` (and by ``close_by``, anyio's clock:
    the gateway's stop), else cut the sockets; shielded (it runs at a close, perhaps a
    cancelled one)."""
    with anyio.CancelScope(shield=True):
        with anyio.CancelScope(deadline=min(anyio.current_time() + CLOSE_DEADLINE_S, close_by)):
            try:
                await connection.close()
                return
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
                pass  # asyncpg's own close timed out, or the socket failed: cut it
        connection.terminate()


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    scheme, sep, rest = url.partition("://")
    if "@" not in rest:
        return url
    credentials, _, host = rest.rpartition("@")
    user = credentials.split(":", 1)[0]
    return f"{scheme}{sep}{user}:***@{host}" if ":" in credentials else f"{scheme}{sep}{rest}"


#: asyncpg's exceptions into ours (``_errors``: the first entry that matches wins).
PG_ERRORS: Table = (
    # The server refused one statement (a cancelled statement included): the connection is
    # still usable, and the writer retries the batch one write at a time.
    (asyncpg.QueryCanceledError, StoreError),
    # The connection failed, the server shut down or cannot accept connections now, an idle
    # transaction was ended, the server ran out of resources: the database, not the statement.
    (asyncpg.PostgresConnectionError, StoreUnavailable),
    (asyncpg.OperatorInterventionError, StoreUnavailable),
    (asyncpg.IdleInTransactionSessionTimeoutError, StoreUnavailable),
    (asyncpg.InsufficientResourcesError, StoreUnavailable),
    (asyncpg.PostgresError, StoreError),
    # asyncpg's client-side DataError and ClientConfigurationError (InterfaceError and
    # ValueError): an argument it could not encode, a bad option. The connection is usable.
    (ValueError, StoreError),
    # The connection is closed or its protocol is in a state it cannot continue from (a
    # connection ended under a statement).
    (asyncpg.InterfaceError, StoreUnavailable),
    (asyncpg.InternalClientError, StoreUnavailable),
    # The socket: refused, reset, or no answer within command_timeout (TimeoutError).
    (OSError, StoreUnavailable),
)


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` leaves a connection unusable, so a batch's outcome is unknown: the
    socket failed, asyncpg's protocol is in a state it cannot continue from (a connection
    ended under a statement, e.g. by ``idle_in_transaction_session_timeout`` while this
    process was frozen), or the server sent a fatal error. An error the server reported on
    one statement, an argument asyncpg could not encode, or a bug of ours leave it usable."""
    return kind_of(exc, PG_ERRORS) is StoreUnavailable


def translating(what: str) -> Callable[[Callable[P, Awaitable[T]]], Callable[P, Awaitable[T]]]:
    """A method whose asyncpg exceptions come out as ours (``PG_ERRORS``)."""

    def decorate(method: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
        @functools.wraps(method)
        async def translated(*args: P.args, **kwargs: P.kwargs) -> T:
            with mapped(PG_ERRORS, what):
                return await method(*args, **kwargs)

        return translated

    return decorate
