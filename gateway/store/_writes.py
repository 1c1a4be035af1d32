"""The store's writes, the same on both backends: each method submits one typed write
(``_ops``) to the group-commit writer (``_writer``), which hands batches of them to the
backend's ``apply``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gateway.backlog import Caps
from gateway.messages import Admission, Inbound, StoredMessage, TurnOutcome, TurnResult
from gateway.store._ops import (
    AdmitRow,
    AnswerTurn,
    ApprovePairing,
    CancelTurn,
    DeleteConversation,
    DeleteTurn,
    ExpireChunks,
    FailChunk,
    MarkDelivered,
    MarkSending,
    PurgeConversation,
    RecordPreview,
    RejectPairing,
    RequestPairing,
    ResetConversation,
    RevokeUser,
    SaveAttachment,
    SaveSummary,
    SetPushConfig,
)
from gateway.store._writer import GroupWriter


class QueuedWrites:
    _group: GroupWriter

    async def admit(
        self,
        inbound: Inbound,
        blobs: Mapping[str, bytes] | None = None,
        *,
        caps: Caps | None = None,
    ) -> Admission:
        return await self._group.submit(AdmitRow(inbound, tuple((blobs or {}).items()), caps))

    async def save_attachment(
        self,
        user_row_id: int,
        position: int,
        *,
        sha256: str | None = None,
        data: bytes | None = None,
        text: str | None = None,
    ) -> None:
        await self._group.submit(SaveAttachment(user_row_id, position, sha256, data, text))

    async def answer(
        self,
        user_row: StoredMessage,
        result: TurnResult,
        chunks: Sequence[str],
        *,
        also: Sequence[int] = (),
        delivered_as: str | None = None,
    ) -> TurnOutcome:
        write = AnswerTurn(user_row, result, tuple(chunks), tuple(also), delivered_as)
        return await self._group.submit(write)

    async def cancel(self, user_row_id: int, *, also: Sequence[int] = ()) -> None:
        await self._group.submit(CancelTurn(user_row_id, tuple(also)))

    async def reset(self, conversation: str) -> None:
        await self._group.submit(ResetConversation(conversation))

    async def mark_delivered(self, chunk_id: int, platform_message_id: str) -> None:
        await self._group.submit(MarkDelivered(chunk_id, platform_message_id))

    async def expire_chunks(self, chunk_ids: Sequence[int]) -> None:
        if chunk_ids:
            await self._group.submit(ExpireChunks(tuple(chunk_ids)))

    async def chunk_failed(self, chunk_id: int) -> None:
        await self._group.submit(FailChunk(chunk_id))

    async def mark_sending(self, chunk_id: int) -> None:
        await self._group.submit(MarkSending(chunk_id))

    async def request_pairing(
        self, platform: str, user_id: str, label: str, *, ttl_s: float, max_pending: int
    ) -> tuple[str | None, str]:
        return await self._group.submit(
            RequestPairing(platform, user_id, label, ttl_s, max_pending)
        )

    async def approve_pairing(self, platform: str, code: str) -> str | None:
        return await self._group.submit(ApprovePairing(platform, code.strip().upper()))

    async def reject_pairing(self, platform: str, code: str) -> str | None:
        return await self._group.submit(RejectPairing(platform, code.strip().upper()))

    async def revoke_user(self, platform: str, user_id: str) -> bool:
        return await self._group.submit(RevokeUser(platform, user_id))

    async def record_preview(self, user_row_id: int, message_id: str) -> None:
        await self._group.submit(RecordPreview(user_row_id, message_id))

    async def set_push_config(self, user_row_id: int, config_id: str, config: str | None) -> None:
        await self._group.submit(SetPushConfig(user_row_id, config_id, config))

    async def save_summary(self, conversation: str, content: str, through: int) -> bool:
        return await self._group.submit(SaveSummary(conversation, content, through))

    async def purge(self, conversation: str) -> int:
        return await self._group.submit(PurgeConversation(conversation))

    async def delete_conversation(self, conversation: str) -> int | None:
        return await self._group.submit(DeleteConversation(conversation))

    async def delete_turn(self, user_row_id: int) -> bool | None:
        return await self._group.submit(DeleteTurn(user_row_id))

    async def _delete_expired(
        self, keys: Sequence[str], idle_before: float, anonymous_before: float
    ) -> list[str]:
        """The retention sweep's deletes: one conversation per commit, each checked again in
        it (a message admitted since the read keeps its conversation). The ones deleted."""
        deleted = []
        for key in keys:
            sweep = DeleteConversation(key, idle_before, anonymous_before)
            if await self._group.submit(sweep) is not None:
                deleted.append(key)
        return deleted
