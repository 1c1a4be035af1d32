"""The store's memory of Slack's messages beyond their admission (SPEC 17), on both backends:
an answer that is not a turn is claimed once, whichever node claims it, and claims are
forgotten after a day; whether a thread's conversation is stored is one read."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from gateway.messages import Inbound
from gateway.store import AdmitRow, ClaimAnswer, ConversationKnown, ReleaseAnswer
from gateway.store.claims import CLAIM_KEPT_S
from tests.support.stores import Opener

pytestmark = pytest.mark.anyio

THREAD = "slack:T1:C1:thread:1.000001"


async def test_an_answer_is_claimed_once_across_batches_reopens_and_nodes(
    open_store: Opener,
) -> None:
    results: list[bool] = []

    async def claim(store: Any, message_id: str) -> None:
        results.append(await store.submit(ClaimAnswer("slack", message_id)))

    async with open_store() as store:
        async with anyio.create_task_group() as tg:  # at once (most often one batch)
            for _ in range(3):
                tg.start_soon(claim, store, "C1:1.000001")
        assert sorted(results) == [False, False, True]
        assert await store.submit(ClaimAnswer("slack", "C1:1.000002"))
        assert await store.submit(ClaimAnswer("telegram", "C1:1.000001"))  # another platform
    async with open_store(node="n2") as other:  # another node (SQLite: a reopen)
        assert not await other.submit(ClaimAnswer("slack", "C1:1.000001"))
        assert not await other.submit(ClaimAnswer("slack", "C1:1.000002"))


async def test_a_released_claim_is_claimed_again_on_any_node(open_store: Opener) -> None:
    """A command that failed in the store gives its claim up: Slack's next try of the
    message, on this node or another, claims it (and runs the command) again."""
    async with open_store() as store:
        assert await store.submit(ClaimAnswer("slack", "C1:1.000001"))
        assert await store.submit(ReleaseAnswer("slack", "C1:1.000001"))
        assert not await store.submit(ReleaseAnswer("slack", "C1:1.000001"))  # none held now
        assert await store.submit(ClaimAnswer("slack", "C1:1.000002"))
    async with open_store(node="n2") as other:
        assert await other.submit(ClaimAnswer("slack", "C1:1.000001"))
        assert not await other.submit(ClaimAnswer("slack", "C1:1.000002"))  # not released


async def test_claims_older_than_a_day_are_forgotten(open_store: Opener) -> None:
    now = [1_000_000.0]
    async with open_store(clock=lambda: now[0]) as store:
        assert await store.submit(ClaimAnswer("slack", "C1:1"))
        now[0] += CLAIM_KEPT_S / 2
        assert await store.submit(ClaimAnswer("slack", "C1:2"))
        assert not await store.submit(ClaimAnswer("slack", "C1:1"))  # kept: still young
        now[0] += CLAIM_KEPT_S / 2 + 1
        assert await store.submit(ClaimAnswer("slack", "C1:3"))  # this batch forgets C1:1
        assert not await store.submit(ClaimAnswer("slack", "C1:2"))
        assert await store.submit(ClaimAnswer("slack", "C1:1"))


async def test_a_conversation_is_known_once_a_turn_is_admitted_in_it(open_store: Opener) -> None:
    async with open_store() as store:
        assert not await store.read(ConversationKnown(THREAD))
        await store.submit(AdmitRow(Inbound("slack", THREAD, "C1:1.000001", "hello")))
        assert await store.read(ConversationKnown(THREAD))
        assert not await store.read(ConversationKnown("slack:T1:C1:thread:2.000001"))
    async with open_store(node="n2") as other:
        assert await other.read(ConversationKnown(THREAD))
