"""The compaction summary in the store (SPEC 11), the same on SQLite and PostgreSQL: one per
conversation, written only forward, gone with ``/new`` (reset) and with the conversation, and
never brought back by a summary made before a reset."""

from __future__ import annotations

import itertools

import pytest

from gateway.messages import Inbound, TurnResult
from gateway.store import (
    AdmitRow,
    AnswerTurn,
    DeleteConversation,
    DeleteTurn,
    ReplyTo,
    ResetConversation,
    SaveSummary,
    Store,
    SummaryOf,
)
from tests.support.stores import Opener

pytestmark = pytest.mark.anyio

_pmids = itertools.count()


async def answered(store: Store, conversation: str, n: int) -> list[int]:
    """``n`` answered turns; the ids of their rows (user, assistant, ...)."""
    ids = []
    for i in range(n):
        inbound = Inbound("peer", conversation, f"m{next(_pmids)}", f"q{i}")
        row = (await store.submit(AdmitRow(inbound))).row
        await store.submit(AnswerTurn(row, TurnResult(reply=f"a{i}", model="m"), tuple([f"a{i}"])))
        reply = await store.read(ReplyTo(row.id))
        assert reply is not None
        ids += [row.id, reply.id]
    return ids


async def test_one_summary_per_conversation_written_only_forward(open_store: Opener) -> None:
    async with open_store() as store:
        ids = await answered(store, "peer:a", 3)
        await answered(store, "peer:b", 1)
        assert await store.read(SummaryOf("peer:a")) is None
        assert await store.submit(SaveSummary("peer:a", "first", ids[1]))
        assert await store.submit(SaveSummary("peer:a", "second", ids[3]))
        assert not await store.submit(
            SaveSummary("peer:a", "older", ids[1])
        )  # covers less: refused
        assert not await store.submit(SaveSummary("peer:nobody", "x", 5))  # no such conversation
    async with open_store() as store:  # durable
        summary = await store.read(SummaryOf("peer:a"))
        assert summary is not None
        assert (summary.conversation, summary.content, summary.through) == (
            "peer:a",
            "second",
            ids[3],
        )
        assert await store.read(SummaryOf("peer:b")) is None


async def test_reset_clears_it_and_an_older_summary_cannot_come_back(open_store: Opener) -> None:
    async with open_store() as store:
        ids = await answered(store, "peer:a", 2)
        assert await store.submit(SaveSummary("peer:a", "before /new", ids[1]))
        await store.submit(ResetConversation("peer:a"))
        assert await store.read(SummaryOf("peer:a")) is None
        # Made from rows before the reset (a compaction that raced /new): refused.
        assert not await store.submit(SaveSummary("peer:a", "stale", ids[3]))
        assert await store.read(SummaryOf("peer:a")) is None
        later = await answered(store, "peer:a", 1)
        assert await store.submit(SaveSummary("peer:a", "after /new", later[1]))
        summary = await store.read(SummaryOf("peer:a"))
        assert summary is not None and summary.content == "after /new"


async def test_deleting_the_conversation_deletes_its_summary(open_store: Opener) -> None:
    async with open_store() as store:
        ids = await answered(store, "peer:a", 1)
        assert await store.submit(SaveSummary("peer:a", "s", ids[1]))
        assert await store.submit(DeleteConversation("peer:a")) == 2
        assert await store.read(SummaryOf("peer:a")) is None
        again = await answered(store, "peer:a", 1)  # a new conversation of the same key
        assert await store.read(SummaryOf("peer:a")) is None
        assert await store.submit(SaveSummary("peer:a", "new", again[1]))


async def test_deleting_a_folded_turn_deletes_the_summary_holding_it(open_store: Opener) -> None:
    async with open_store() as store:
        ids = await answered(store, "peer:a", 3)
        assert await store.submit(SaveSummary("peer:a", "s", ids[3]))
        assert await store.submit(DeleteTurn(ids[4]))  # after the summary: it stays
        assert await store.read(SummaryOf("peer:a")) is not None
        assert await store.submit(
            DeleteTurn(ids[2])
        )  # folded into it: its text must not outlive it
        assert await store.read(SummaryOf("peer:a")) is None
