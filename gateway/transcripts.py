"""Stored turns read back (``gateway.ports.Transcripts`` and ``CallReads``, both served by
``StoredTranscripts``): a row, the reply that settled it, how its turn ended, a page of a
conversation's transcript and its attachments; a turn's tool steps, a call's row and the call
awaiting an approval (SPEC 15). What a peer request, an A2A task or a response id reads,
on any node, after any restart.
"""

from __future__ import annotations

from gateway.messages import (
    STOPPED_REPLY,
    Failure,
    MessageState,
    RowPage,
    StoredMessage,
    StoredStep,
    TaskRows,
    TurnOutcome,
    Usage,
)
from gateway.store import (
    AttachmentBytes,
    AwaitingCall,
    Message,
    PreviousTurn,
    ReplyTo,
    Store,
    TaskPage,
    ToolRow,
    TranscriptPage,
    TurnSteps,
)
from policy import TRANSIENT

#: What a request waiting for a row learns when an operator purged it (``sessions purge``).
PURGED_REPLY = "The message was dropped by an operator before it was answered."
DELETED_REPLY = "The conversation was deleted before this message was answered."


class StoredTranscripts:
    def __init__(self, store: Store) -> None:
        self._store = store

    def __repr__(self) -> str:
        return "<StoredTranscripts>"

    async def message(self, row_id: int) -> StoredMessage | None:
        return await self._store.read(Message(row_id))

    async def reply_to(self, user_row_id: int) -> StoredMessage | None:
        return await self._store.read(ReplyTo(user_row_id))

    async def tool_row(self, conversation: str, call_id: str) -> StoredMessage | None:
        return await self._store.read(ToolRow(conversation, call_id))

    async def page(self, conversation: str, limit: int, before: int | None) -> RowPage:
        return await self._store.read(TranscriptPage(conversation, limit, before))

    async def previous_turn(self, conversation: str, row_id: int) -> int | None:
        return await self._store.read(PreviousTurn(conversation, row_id))

    async def tasks(
        self,
        conversation: str,
        prefix: str,
        limit: int,
        before: int | None,
        states: tuple[str, ...] | None,
    ) -> TaskRows:
        return await self._store.read(TaskPage(conversation, prefix, limit, before, states))

    async def attachment(self, conversation: str, sha256: str) -> tuple[str, bytes] | None:
        return await self._store.read(AttachmentBytes(conversation, sha256))

    async def steps(self, turn_row_id: int) -> list[StoredStep]:
        return await self._store.read(TurnSteps(turn_row_id))

    async def awaiting_call(self, conversation: str, call_id: str) -> int | None:
        return await self._store.read(AwaitingCall(conversation, call_id))

    async def outcome(self, user_row_id: int) -> TurnOutcome | None:
        """How a user row's turn ended, read back from the store; None while it is pending."""
        row = await self.message(user_row_id)
        if row is None:  # its conversation was deleted
            deleted = Failure("deleted", False, detail="the conversation was deleted")
            return TurnOutcome("", user_row_id, DELETED_REPLY, deleted, ())
        if row.state == MessageState.PENDING:
            return None
        if row.state == MessageState.CANCELLED:
            return TurnOutcome(row.conversation, row.id, STOPPED_REPLY, None, ())
        reply = await self.reply_to(user_row_id)
        if reply is None:
            if row.state == MessageState.FAILED:  # purged: failed without running
                purged = Failure("purged", False, detail="dropped by an operator")
                return TurnOutcome(row.conversation, row.id, PURGED_REPLY, purged, ())
            return None
        failure = Failure(reply.failure, reply.failure in TRANSIENT) if reply.failure else None
        usage = Usage(reply.prompt_tokens or 0, reply.completion_tokens or 0)
        return TurnOutcome(row.conversation, row.id, reply.content, failure, (), usage)
