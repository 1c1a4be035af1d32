"""What a chat adapter knows of its messages through the store (``gateway.ports.Recall``):
the claim of an answer that is not a turn, and whether a conversation is stored."""

from __future__ import annotations

from gateway.store import ClaimAnswer, ConversationKnown, ReleaseAnswer, Store


class StoredRecall:
    def __init__(self, store: Store) -> None:
        self._store = store

    def __repr__(self) -> str:
        return "<StoredRecall>"

    async def claim_answer(self, platform: str, message_id: str) -> bool:
        return await self._store.submit(ClaimAnswer(platform, message_id))

    async def release_answer(self, platform: str, message_id: str) -> None:
        await self._store.submit(ReleaseAnswer(platform, message_id))

    async def conversation_known(self, conversation: str) -> bool:
        return await self._store.read(ConversationKnown(conversation))
