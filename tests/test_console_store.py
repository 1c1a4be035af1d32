"""The operator console's store reads, on both backends: conversations found by a substring
of their key a page at a time with their state, and the outbox chunks not delivered."""

from __future__ import annotations

import pytest

from gateway.messages import Failure, Inbound, TurnResult
from gateway.store import (
    AdmitRow,
    AnswerTurn,
    ExpireChunks,
    FailChunk,
    MarkDelivered,
    OutboxChunks,
    SearchConversations,
)
from tests.support.stores import Opener

pytestmark = pytest.mark.anyio


def inbound(conversation: str, pmid: str, text: str = "hi") -> Inbound:
    platform = conversation.split(":", 1)[0]
    return Inbound(
        platform=platform, conversation=conversation, platform_message_id=pmid, text=text
    )


async def test_conversations_are_searched_by_key_and_paged_newest_first(
    open_store: Opener,
) -> None:
    async with open_store() as store:
        keys = [f"peer:team-{i}" for i in range(5)] + ["telegram:42", "peer:Team-caps"]
        for i, key in enumerate(keys):
            row = (await store.submit(AdmitRow(inbound(key, f"m{i}")))).row
            failure = Failure("rate_limited", True) if key == "peer:team-3" else None
            await store.submit(
                AnswerTurn(row, TurnResult(reply=f"a{i}", failure=failure), tuple([f"a{i}"]))
            )
        await store.submit(AdmitRow(inbound("peer:team-1", "late")))  # pending, and newest activity

        found = await store.read(SearchConversations("team-", 100))
        assert {c.key for c in found} == {f"peer:team-{i}" for i in range(5)}  # case-sensitive
        stamps = [(c.updated_at, c.key) for c in found]
        assert stamps == sorted(stamps, reverse=True)
        assert found[0].key == "peer:team-1" and found[0].pending == 1 and found[0].messages == 3
        failed = next(c for c in found if c.key == "peer:team-3")
        assert failed.last_failure == "rate_limited" and failed.last_failure_at is not None
        assert all(c.last_failure is None for c in found if c is not failed)

        pages, after = [], None
        while True:
            page = await store.read(SearchConversations("team-", 2, after))
            if not page:
                break
            pages.append([c.key for c in page])
            after = (page[-1].updated_at, page[-1].key)
        assert [k for p in pages for k in p] == [c.key for c in found]
        assert [len(p) for p in pages] == [2, 2, 1]

        assert len(await store.read(SearchConversations("", 100))) == len(keys)
        assert [c.key for c in await store.read(SearchConversations("telegram:", 10))] == [
            "telegram:42"
        ]
        assert await store.read(SearchConversations("nobody", 10)) == []
        assert await store.read(SearchConversations("%", 10)) == []  # no LIKE wildcards


async def test_the_outbox_listing_shows_every_chunk_not_delivered(open_store: Opener) -> None:
    async with open_store() as store:
        chunks = []
        for i in range(3):
            row = (await store.submit(AdmitRow(inbound(f"telegram:{i}", f"o{i}")))).row
            outcome = await store.submit(
                AnswerTurn(row, TurnResult(reply=f"r{i}"), tuple([f"r{i}a", f"r{i}b"]))
            )
            chunks.extend(outcome.chunks)
        await store.submit(MarkDelivered(chunks[0].id, "tg:1"))
        await store.submit(MarkDelivered(chunks[1].id, "tg:2"))
        await store.submit(ExpireChunks(tuple([chunks[2].id])))
        await store.submit(FailChunk(chunks[3].id))

        listed = await store.read(OutboxChunks(100))
        assert [(c.id, c.state) for c in listed] == [
            (chunks[5].id, "pending"),
            (chunks[4].id, "pending"),
            (chunks[3].id, "failed"),
            (chunks[2].id, "expired"),
        ]
        assert listed[-1].conversation == "telegram:1" and listed[-1].text == "r1a"
        assert [c.id for c in await store.read(OutboxChunks(1))] == [chunks[5].id]
