"""What compaction reads and writes in the store (``agent.compaction.SummaryStore``, SPEC 11):
the history, and the conversation's summary."""

from __future__ import annotations

from gateway.messages import ConversationSummary, StoredMessage
from gateway.store import History, SaveSummary, Store, SummaryOf


class StoredSummaries:
    def __init__(self, store: Store) -> None:
        self._store = store

    def __repr__(self) -> str:
        return "<StoredSummaries>"

    async def history(self, conversation: str, limit: int) -> list[StoredMessage]:
        return await self._store.read(History(conversation, limit))

    async def summary(self, conversation: str) -> ConversationSummary | None:
        return await self._store.read(SummaryOf(conversation))

    async def save_summary(self, conversation: str, content: str, through: int) -> bool:
        return await self._store.submit(SaveSummary(conversation, content, through))
