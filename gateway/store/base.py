"""The store interface: what the gateway needs from durable storage.

A write or a read is a typed command (``commands``: ``Write[R]``, ``Query[R]``), defined with
its SQLite and PostgreSQL functions in its concern module (``admission``, ``answers``,
``outbox``, ``conversations``, ``transcripts``, ``pairing``, ``previews``, ``push_configs``,
``summaries``, ``attachments``, ``console``): ``await store.submit(AnswerTurn(...))``,
``await store.read(Transcript(key))``. SQLite (``sqlite.py``) is the embedded single-node
backend; PostgreSQL (``postgres.py``) the shared one, for one or several nodes, whose leases
(``leases.PgLeases``) the cluster is handed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from gateway.store._writer import WriterStatistics
from gateway.store.commands import Query, Write

if TYPE_CHECKING:
    from gateway.store.leases import PgLeases

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class StoreStatistics:
    """What a store committed, and the leases it holds (``Store.statistics()``)."""

    writer: WriterStatistics  # its writer's commits
    leases: int | None  # conversations this node holds (PostgreSQL); None: SQLite has none


class Store(Protocol):
    async def submit(self, write: Write[R]) -> R:
        """Commit ``write`` (in a group commit with others): its result, or its refusal raised
        (``Overloaded``, ``TurnSettled``, ``LeaseLost``); ``StoreUnavailable`` when the
        database was lost (the outcome is then unknown, as after a crash)."""
        ...

    async def read(self, query: Query[R]) -> R:
        """Answer ``query`` from committed rows."""
        ...

    @property
    def leases(self) -> PgLeases | None:
        """This node's conversation and named leases (PostgreSQL); None on one SQLite node."""
        ...

    def statistics(self) -> StoreStatistics: ...

    def stop_by(self, deadline: float) -> None:
        """The gateway stops: the close (queued writes settling, the connections' goodbyes)
        is over by ``deadline`` (anyio's clock), whatever ``command_timeout_s`` says; a write
        cut short fails with its outcome unknown, as after a crash."""
        ...
