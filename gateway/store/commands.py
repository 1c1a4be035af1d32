"""The store's API as typed commands: a write or a query is a value, and its type says what
its caller gets back (aiogram's ``await bot(SendMessage(...))``).

``Write[R]`` is committed by the group writer (``_writer``); ``Query[R]`` is read beside it.
Each concern module (``admission``, ``answers``, ``outbox``, ...) defines its commands and, side
by side, the SQLite and PostgreSQL functions that carry them out, as plain functions over a
connection. ``registry`` maps every command type to its two functions; the backends
(``sqlite``, ``postgres``) only hold connections, run transactions and assign ids.

A handler is written with its command and result as type arguments
(``WriteHandler[AdmitRow, Admission](AdmitRow, f, g)``), so mypy checks that ``f`` and ``g`` take
``AdmitRow``s and return ``Admission``s, and that ``AdmitRow`` is a ``Write[Admission]`` (``R``
is invariant). ``tests/test_store_registry.py`` checks that every command has both functions.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar

from gateway.errors import GatewayError

if TYPE_CHECKING:
    import asyncpg
    import asyncpg.pool

    from gateway.store.leases import PgLeases

    PgConn: TypeAlias = asyncpg.Connection | asyncpg.pool.PoolConnectionProxy[Any]

R = TypeVar("R")
W = TypeVar("W", bound="Write[Any]")
Q = TypeVar("Q", bound="Query[Any]")


class Write(Generic[R]):
    """A write whose caller gets an ``R`` back once it committed (or its refusal raised)."""

    __slots__ = ()


class Query(Generic[R]):
    """A read whose caller gets an ``R``; it sees committed rows only."""

    __slots__ = ()


@dataclass(slots=True)
class Ids:
    """SQLite's row ids, assigned by the writer in the order writes reach it, so that id order
    is admission order (SPEC 5). A rolled-back batch leaves gaps, never reuses an id."""

    message: int = 0
    chunk: int = 0

    def next_message(self) -> int:
        self.message += 1
        return self.message

    def next_chunk(self) -> int:
        self.chunk += 1
        return self.chunk


@dataclass(slots=True)
class SqliteTx:
    """One SQLite transaction of the writer, on its connection's thread."""

    db: sqlite3.Connection
    now: float
    ids: Ids


@dataclass(slots=True)
class PgTx:
    """One PostgreSQL transaction of this node's writer. ``leases``: the conversations this
    node holds (admission places and claims, the answer commit is fenced on them);
    ``after_commit``: what to do once the transaction committed (a claim becomes ours)."""

    db: asyncpg.Connection
    now: float
    leases: PgLeases
    after_commit: list[Callable[[], None]] = field(default_factory=list)

    @property
    def node(self) -> str:
        return self.leases.node


#: A write's result, or its refusal (``LeaseLost``, ``Overloaded``, ``TurnSettled``): a
#: refusal fails that write alone, and the batch's other writes commit.
Refusal = GatewayError


# Not slotted: ``WriteHandler[AdmitRow, Admission](...)`` sets ``__orig_class__`` on the instance.
@dataclass(frozen=True)
class WriteHandler(Generic[W, R]):
    """How each backend applies a run of writes of one type: one result per write, in order."""

    kind: type[Write[R]]
    sqlite: Callable[[SqliteTx, list[W]], Sequence[R | Refusal]]
    postgres: Callable[[PgTx, list[W]], Awaitable[Sequence[R | Refusal]]]


@dataclass(frozen=True)
class QueryHandler(Generic[Q, R]):
    """How each backend answers a query: SQLite on its reader's thread, PostgreSQL on one
    connection of the pool."""

    kind: type[Query[R]]
    sqlite: Callable[[sqlite3.Connection, Q], R]
    postgres: Callable[[PgConn, Q], Awaitable[R]]


class Registry:
    """Every command type and its two functions (``gateway.store.registry`` fills one)."""

    def __init__(self, *handlers: WriteHandler[Any, Any] | QueryHandler[Any, Any]) -> None:
        self._writes: dict[type[Any], WriteHandler[Any, Any]] = {}
        self._queries: dict[type[Any], QueryHandler[Any, Any]] = {}
        for handler in handlers:
            table: dict[type[Any], Any] = (
                self._writes if isinstance(handler, WriteHandler) else self._queries
            )
            assert handler.kind not in table, f"{handler.kind.__name__} registered twice"
            table[handler.kind] = handler

    def writer(self, kind: type[Any]) -> WriteHandler[Any, Any]:
        return self._writes[kind]

    def reader(self, query: Query[R]) -> QueryHandler[Any, R]:
        return self._queries[type(query)]

    @property
    def writes(self) -> tuple[WriteHandler[Any, Any], ...]:
        return tuple(self._writes.values())

    @property
    def queries(self) -> tuple[QueryHandler[Any, Any], ...]:
        return tuple(self._queries.values())

    def knows(self, command: object) -> bool:
        return type(command) in self._writes or type(command) in self._queries
