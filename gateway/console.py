"""What the operator console reads and decides in the store (``platforms.peer.admin``'s
``AdminStore`` port, SPEC 13): conversations, transcripts a page at a time, the outbox,
pairing codes and approved users."""

from __future__ import annotations

import time
from collections.abc import Callable

from gateway.messages import ConversationListing, OutboxChunk, PairingCode, RowPage
from gateway.store import (
    ApprovedUsers,
    ApprovePairing,
    OutboxChunks,
    OutboxPending,
    PairingCodes,
    RejectPairing,
    RevokeUser,
    SearchConversations,
    Store,
    TranscriptPage,
)


class ConsoleStore:
    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock

    def __repr__(self) -> str:
        return "<ConsoleStore>"

    async def search_conversations(
        self, query: str, limit: int, after: tuple[float, str] | None = None
    ) -> list[ConversationListing]:
        return await self._store.read(SearchConversations(query, limit, after))

    async def page(self, conversation: str, limit: int, before: int | None) -> RowPage:
        return await self._store.read(TranscriptPage(conversation, limit, before))

    async def outbox_chunks(self, limit: int) -> list[OutboxChunk]:
        return await self._store.read(OutboxChunks(limit))

    async def outbox_pending(self) -> dict[str, int]:
        return await self._store.read(OutboxPending())

    async def pairing_codes(self) -> list[PairingCode]:
        return await self._store.read(PairingCodes(self._clock()))

    async def approved_users(self) -> list[tuple[str, str, float]]:
        return await self._store.read(ApprovedUsers())

    async def approve_pairing(self, platform: str, code: str) -> str | None:
        return await self._store.submit(ApprovePairing(platform, code))

    async def reject_pairing(self, platform: str, code: str) -> str | None:
        return await self._store.submit(RejectPairing(platform, code))

    async def revoke_user(self, platform: str, user_id: str) -> bool:
        return await self._store.submit(RevokeUser(platform, user_id))
