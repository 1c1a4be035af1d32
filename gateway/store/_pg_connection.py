"""Connections to PostgreSQL: their session settings, which failures leave one unusable, and
URLs fit to show (without the password)."""

from __future__ import annotations

import asyncpg


def session_settings(lease_s: float) -> dict[str, str]:
    """Session settings of the writer's and the pool's connections. A node frozen in the
    middle of a transaction (SIGSTOP, a VM paused) would hold its row locks for as long as it
    stays frozen: its own heartbeat row, which every claimer locks FOR SHARE, or conversation
    rows. PostgreSQL ends such a session after half a lease, so the others can take over (our
    transactions never sit idle: their statements follow each other at once)."""
    return {"idle_in_transaction_session_timeout": str(max(500, int(lease_s * 500)))}


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    scheme, sep, rest = url.partition("://")
    if "@" not in rest:
        return url
    credentials, _, host = rest.rpartition("@")
    user = credentials.split(":", 1)[0]
    return f"{scheme}{sep}{user}:***@{host}" if ":" in credentials else f"{scheme}{sep}{rest}"


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` leaves the writer's connection unusable, so the batch's outcome is
    unknown: the socket failed, asyncpg's protocol is in a state it cannot continue from (a
    connection ended under a statement, e.g. by ``idle_in_transaction_session_timeout`` while
    this process was frozen), or the server sent a fatal error (connection failure, shutdown,
    an idle transaction ended). An error the server reported on one statement, an argument
    asyncpg could not encode, or a bug of ours leave it usable: the writer then retries the
    batch one operation at a time."""
    if isinstance(exc, asyncpg.PostgresError):
        state = exc.sqlstate or ""
        return state.startswith(("08", "57P")) or state == "25P03"
    if isinstance(exc, asyncpg.InterfaceError):
        return not isinstance(exc, ValueError)  # asyncpg's DataError: a bad argument
    return isinstance(exc, OSError | asyncpg.InternalClientError)
