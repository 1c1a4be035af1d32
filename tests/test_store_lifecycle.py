"""The store's bounds and data lifecycle, on both backends: the caps checked in the
admission's transaction, the backlog read, pending rows without their content, purge, delete, and the retention sweep's
delete (SPEC section 14)."""

from __future__ import annotations

import time

import anyio
import pytest

from gateway.backlog import Caps, decide
from gateway.errors import Overloaded
from gateway.messages import Backlog, Inbound, TurnResult
from gateway.retention import NEVER, expire
from gateway.store import (
    AdmitRow,
    AnswerTurn,
    BacklogOf,
    Conversations,
    DeleteConversation,
    PendingCount,
    PendingHeaders,
    PendingRows,
    PurgeConversation,
    Transcript,
    Undelivered,
)
from tests.support.stores import Opener

pytestmark = pytest.mark.anyio


def inbound(pmid: str, conversation: str = "peer:a", text: str = "hello") -> Inbound:
    return Inbound(platform="peer", conversation=conversation, platform_message_id=pmid, text=text)


async def test_backlog_counts_up_to_the_limits_and_sees_a_stored_message(
    open_store: Opener,
) -> None:
    async with open_store() as store:
        for i in range(5):
            await store.submit(AdmitRow(inbound(f"a{i}")))
        for i in range(3):
            await store.submit(AdmitRow(inbound(f"b{i}", "peer:b")))
        read = await store.read(
            BacklogOf("peer:a", "peer", "a0", conversation_limit=100, total_limit=100)
        )
        assert (read.conversation, read.total, read.stored) == (5, 8, True)
        read = await store.read(
            BacklogOf("peer:a", "peer", "new", conversation_limit=4, total_limit=6)
        )
        assert (read.conversation, read.total, read.stored) == (4, 6, False)
        read = await store.read(
            BacklogOf("peer:c", "peer", "c0", conversation_limit=4, total_limit=100)
        )
        assert (read.conversation, read.total, read.stored) == (0, 8, False)
        assert await store.read(PendingCount("peer:a")) == 5


async def test_admission_checks_the_caps_in_its_own_transaction(open_store: Opener) -> None:
    """One batch (concurrent admissions share a commit) counts what it admitted before each
    message: a burst of 6 to a conversation capped at 4 stores 4; a redelivery at the cap is
    a duplicate, never refused; the gateway-wide cap counts every conversation."""
    caps = Caps(per_conversation=4, total=6)
    async with open_store() as store:
        outcomes: dict[str, str] = {}

        async def admit(pmid: str, conversation: str) -> None:
            try:
                admission = await store.submit(AdmitRow(inbound(pmid, conversation), (), caps=caps))
                outcomes[pmid] = "duplicate" if admission.duplicate else "stored"
            except Overloaded as exc:
                outcomes[pmid] = exc.scope

        async with anyio.create_task_group() as tg:
            for i in range(6):
                tg.start_soon(admit, f"a{i}", "peer:a")
        assert sorted(outcomes.values()) == ["conversation"] * 2 + ["stored"] * 4
        assert await store.read(PendingCount("peer:a")) == 4
        stored = [k for k, v in outcomes.items() if v == "stored"]
        await admit(stored[0], "peer:a")
        assert outcomes[stored[0]] == "duplicate"
        await admit("b0", "peer:b")
        await admit("b1", "peer:b")
        await admit("b2", "peer:b")
        assert [outcomes[k] for k in ("b0", "b1", "b2")] == ["stored", "stored", "gateway"]
        assert await store.read(PendingCount("peer:b")) == 2
        # Without caps (nothing asked), nothing is refused.
        assert not (await store.submit(AdmitRow(inbound("b3", "peer:b")))).duplicate


def test_a_batch_counts_what_it_admitted_before_each_message() -> None:
    caps = Caps(per_conversation=2, total=10)
    empty = Backlog(conversation=0, total=0, stored=False)
    batch = [(inbound(p, c), caps) for p, c in (("x", "peer:a"), ("x", "peer:a"), ("y", "peer:a"))]
    batch += [(inbound("z", "peer:a"), caps), (inbound("w", "peer:b"), None)]
    refusals = decide(batch, [empty, empty, empty, empty, None])
    # "x" twice: the second is a duplicate of the first (admitted, not counted); "z" is the
    # third of peer:a; a message without caps is never refused.
    assert [r.scope if r else None for r in refusals] == [None, None, None, "conversation", None]


async def test_pending_headers_are_the_pending_rows_without_their_content(
    open_store: Opener,
) -> None:
    async with open_store() as store:
        first = (await store.submit(AdmitRow(inbound("m1", text="x" * 1000)))).row
        second = (await store.submit(AdmitRow(inbound("m2", text="y" * 1000)))).row
        await store.submit(AnswerTurn(first, TurnResult(reply="done"), tuple(["done"])))
        headers = await store.read(PendingHeaders("peer:a"))
    assert [(h.id, h.content, h.state) for h in headers] == [(second.id, "", "pending")]
    assert headers[0].platform_message_id == "m2"


async def test_purge_marks_pending_rows_failed_and_keeps_the_rest(open_store: Opener) -> None:
    async with open_store() as store:
        answered = (await store.submit(AdmitRow(inbound("m1")))).row
        await store.submit(AnswerTurn(answered, TurnResult(reply="r1"), tuple(["r1"])))
        for pmid in ("m2", "m3"):
            await store.submit(AdmitRow(inbound(pmid)))
        other = (await store.submit(AdmitRow(inbound("o1", "peer:other")))).row
        assert await store.submit(PurgeConversation("peer:a")) == 2
        assert await store.submit(PurgeConversation("peer:a")) == 0
        states = [(m.role, m.state) for m in await store.read(Transcript("peer:a"))]
        assert states == [
            ("user", "answered"),
            ("assistant", "final"),
            ("user", "failed"),
            ("user", "failed"),
        ]
        assert await store.read(PendingRows("peer:a")) == []
        assert [r.id for r in await store.read(PendingRows("peer:other"))] == [other.id]


async def test_delete_removes_rows_and_outbox_of_one_conversation(open_store: Opener) -> None:
    async with open_store() as store:
        row = (await store.submit(AdmitRow(inbound("m1")))).row
        await store.submit(AnswerTurn(row, TurnResult(reply="r1"), tuple(["r1", "r2"])))
        await store.submit(AdmitRow(inbound("m2")))
        kept = (await store.submit(AdmitRow(inbound("o1", "peer:other")))).row
        await store.submit(AnswerTurn(kept, TurnResult(reply="o"), tuple(["o"])))
        assert await store.submit(DeleteConversation("peer:a")) == 3
        assert await store.submit(DeleteConversation("peer:a")) is None
        assert await store.read(Transcript("peer:a")) == []
        assert [c.key for c in await store.read(Conversations())] == ["peer:other"]
        assert [c.conversation for c in await store.read(Undelivered())] == ["peer:other"]
        assert len(await store.read(Transcript("peer:other"))) == 2
        # The key can be used again: a new conversation.
        again = await store.submit(AdmitRow(inbound("m3")))
        assert not again.duplicate
        assert [m.content for m in await store.read(Transcript("peer:a"))] == ["hello"]


async def test_expiry_deletes_idle_conversations_never_pending_ones(open_store: Opener) -> None:
    async with open_store() as store:
        for key in ("peer:idle", "peer:anon-1", "peer:anon-2"):
            row = (await store.submit(AdmitRow(inbound(f"{key}-1", key)))).row
            await store.submit(AnswerTurn(row, TurnResult(reply="r"), tuple(["r"])))
        await store.submit(AdmitRow(inbound("busy-1", "peer:busy")))  # pending: never idle
        later = time.time() + 60
        # Only anonymous ones past their cutoff.
        assert sorted(await expire(store, NEVER, later)) == [
            "peer:anon-1",
            "peer:anon-2",
        ]
        assert await expire(store, later, later) == ["peer:idle"]
        assert [c.key for c in await store.read(Conversations())] == ["peer:busy"]
        assert await expire(store, NEVER, NEVER) == []
