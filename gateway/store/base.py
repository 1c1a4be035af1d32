"""The store interface: what the gateway needs from durable storage.

One method per step of the turn lifecycle (SPEC section 3), each one transaction. SQLite
(``sqlite.py``) is the embedded single-node backend; PostgreSQL (``postgres.py``) is the shared
one, for one or several nodes. Only the composition root and ``gateway.cluster`` (the leases,
PostgreSQL only) know which is used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from gateway.backlog import Caps
from gateway.messages import (
    Admission,
    Backlog,
    ConversationInfo,
    ConversationListing,
    ConversationSummary,
    Inbound,
    OutboxChunk,
    PairingCode,
    StoredMessage,
    TurnOutcome,
    TurnResult,
)
from gateway.store._writer import WriterStatistics


@dataclass(frozen=True, slots=True)
class StoreStatistics:
    """What a store committed, and the leases it holds (``Store.statistics()``)."""

    writer: WriterStatistics  # its writer's commits
    leases: int | None  # conversations this node holds (PostgreSQL); None: SQLite has none


class Store(Protocol):
    async def admit(
        self,
        inbound: Inbound,
        blobs: Mapping[str, bytes] | None = None,
        *,
        caps: Caps | None = None,
    ) -> Admission:
        """Store the user row as pending, unless (platform, platform id) is already stored,
        with its attachment references; ``blobs``: inline bytes by sha256, stored with it.
        ``caps``: raises :class:`~gateway.errors.Overloaded` (nothing stored) when as many
        rows wait already, counted in the same transaction (``gateway.backlog``)."""
        ...

    async def save_attachment(
        self,
        user_row_id: int,
        position: int,
        *,
        sha256: str | None = None,
        data: bytes | None = None,
        text: str | None = None,
    ) -> None:
        """Record attachment ``position`` of a user row: its bytes (content-addressed by
        ``sha256``) once fetched, the text made of them (transcript, document) once made."""
        ...

    async def blob(self, sha256: str) -> bytes | None:
        """The stored bytes with that sha256, if any row still refers to them."""
        ...

    async def attachment_bytes(self, conversation: str, sha256: str) -> tuple[str, bytes] | None:
        """(content type, bytes) of an attachment of ``conversation``; None when it has none
        with that sha256 (another conversation's file is not found through this one)."""
        ...

    async def answer(
        self,
        user_row: StoredMessage,
        result: TurnResult,
        chunks: Sequence[str],
        *,
        also: Sequence[int] = (),
        delivered_as: str | None = None,
    ) -> TurnOutcome:
        """Store the reply (or failure reply), settle the user row, queue the chunks.
        ``also``: the earlier rows of a merged turn (SPEC 10), settled in the same
        transaction and linked to the reply (``reply_to`` finds it for each).
        ``delivered_as``: the chunks are stored delivered, with that platform message id,
        instead of pending (``Outlet.delivered_as``: the outcome is its own delivery).
        Raises ``TurnSettled`` (nothing stored) when one of the rows is no longer pending,
        and, on PostgreSQL, ``LeaseLost`` when this node may not answer for it."""
        ...

    async def cancel(self, user_row_id: int, *, also: Sequence[int] = ()) -> None:
        """Mark pending user rows cancelled (``/stop``): they will not be resumed."""
        ...

    async def reset(self, conversation: str) -> None:
        """Start a fresh context (``/new``): earlier rows stay stored but leave the history."""
        ...

    async def mark_delivered(self, chunk_id: int, platform_message_id: str) -> None: ...

    async def expire_chunks(self, chunk_ids: Sequence[int]) -> None: ...

    async def mark_sending(self, chunk_id: int) -> None:
        """The chunk is being handed to its platform (at-most-once delivery only)."""
        ...

    async def expire_in_flight(self) -> int:
        """At start: chunks that were being sent when the process died are not sent again."""
        ...

    async def chunk_failed(self, chunk_id: int) -> None:
        """The platform refused the chunk for good: never send it again."""
        ...

    async def request_pairing(
        self, platform: str, user_id: str, label: str, *, ttl_s: float, max_pending: int
    ) -> tuple[str | None, str]:
        """A new pairing code for an unknown user: (code, "new"), or (None, "pending") when
        the user already has one, or (None, "full") when too many codes are pending."""
        ...

    async def approve_pairing(self, platform: str, code: str) -> str | None:
        """Approve the user behind ``code``; their user id, or None for an unknown code."""
        ...

    async def reject_pairing(self, platform: str, code: str) -> str | None:
        """Refuse ``code``: its user id, or None for an unknown code. The user gets no new
        code until the rejected one would have expired."""
        ...

    async def revoke_user(self, platform: str, user_id: str) -> bool: ...

    async def is_approved(self, platform: str, user_id: str) -> bool: ...

    async def pairing_codes(self) -> list[PairingCode]: ...

    async def approved_users(self) -> list[tuple[str, str, float]]: ...

    async def pending(self, conversation: str) -> list[StoredMessage]:
        """The conversation's pending user rows, oldest first."""
        ...

    async def conversations_with_pending(self) -> list[str]: ...

    async def history(self, conversation: str, limit: int) -> list[StoredMessage]:
        """The newest ``limit`` answered rows (user and assistant) since the last reset."""
        ...

    async def summary(self, conversation: str) -> ConversationSummary | None:
        """The conversation's compaction summary since the last reset, if any (SPEC 11)."""
        ...

    async def save_summary(self, conversation: str, content: str, through: int) -> bool:
        """Store the summary of the history rows up to ``through``, replacing an older one;
        refused (False) when a newer one is stored or a reset came after ``through``."""
        ...

    async def transcript(self, conversation: str) -> list[StoredMessage]:
        """Every row of the conversation, oldest first."""
        ...

    async def message(self, row_id: int) -> StoredMessage | None:
        """One row by id."""
        ...

    async def record_preview(self, user_row_id: int, message_id: str) -> None:
        """A chat preview's message for the turn of ``user_row_id`` (SPEC 8)."""
        ...

    async def preview_of(self, user_row_id: int) -> str | None: ...

    async def set_push_config(self, user_row_id: int, config_id: str, config: str | None) -> None:
        """An A2A task's push notification config (SPEC 12); None deletes it."""
        ...

    async def push_configs(self, user_row_id: int) -> list[str]:
        """The push notification configs of an A2A task, oldest first."""
        ...

    async def reply_to(self, user_row_id: int) -> StoredMessage | None:
        """The assistant row that settled a user row (its own, or a merged turn's), if any."""
        ...

    async def undelivered(self, platform: str | None = None) -> list[OutboxChunk]: ...

    async def recent_failures(self, limit: int) -> list[StoredMessage]:
        """The newest failure replies, newest first."""
        ...

    async def outbox_pending(self) -> dict[str, int]:
        """Undelivered chunks per platform."""
        ...

    async def conversations(self) -> list[ConversationInfo]: ...

    # -- the operator console (SPEC 13; ``_console``, ``_pg_console``) -----------------------

    async def search_conversations(
        self, query: str, limit: int, after: tuple[float, str] | None = None
    ) -> list[ConversationListing]:
        """Conversations whose key contains ``query``, newest activity first, at most
        ``limit``; ``after``: those after the page that ended at (updated_at, key)."""
        ...

    async def outbox_chunks(self, limit: int) -> list[OutboxChunk]:
        """The newest ``limit`` chunks not delivered (pending, sending, expired, failed)."""
        ...

    def statistics(self) -> StoreStatistics: ...

    # -- bounds and lifecycle (SPEC section 14; ``_lifecycle``, ``_pg_lifecycle``) ----------

    async def backlog(
        self,
        conversation: str,
        platform: str,
        platform_message_id: str,
        *,
        conversation_limit: int,
        total_limit: int,
    ) -> Backlog:
        """Pending rows of the conversation and of the store (each counted up to its limit),
        and whether (platform, platform id) is stored already: read before admitting."""
        ...

    async def pending_count(self, conversation: str) -> int: ...

    async def pending_headers(self, conversation: str) -> list[StoredMessage]:
        """The conversation's pending user rows, oldest first, without their content (``""``):
        what a session actor queues; it reads each row whole when its turn comes."""
        ...

    async def purge(self, conversation: str) -> int:
        """Mark the conversation's pending rows failed (never run, nothing sent); how many."""
        ...

    async def delete_conversation(self, conversation: str) -> int | None:
        """Remove the conversation, its rows and its outbox: the rows removed, None if absent."""
        ...

    async def delete_turn(self, user_row_id: int) -> bool | None:
        """Remove one settled turn (its user row, replies, outbox, preview): True; False
        while it is pending (nothing removed); None when there is no such user row."""
        ...

    async def expire_conversations(self, idle_before: float, anonymous_before: float) -> list[str]:
        """Delete conversations with nothing pending last active before ``idle_before``, and
        anonymous peer ones (``peer:anon-*``) before ``anonymous_before`` (epoch seconds)."""
        ...
