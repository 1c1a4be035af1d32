"""The chat platforms' courier (``platforms._courier``) on its own: ``wait_idle`` returns only
once every reply handed to it was sent and recorded (a drain relies on it before the node
stops and its conversations go to another node)."""

from __future__ import annotations

from typing import cast

import anyio
import pytest

from gateway.messages import OutboxChunk, TurnOutcome
from gateway.ports import Ledger
from platforms._courier import Courier

pytestmark = pytest.mark.anyio


class Records:
    """The part of the delivery ledger a courier uses: what it recorded."""

    def __init__(self) -> None:
        self.recorded: list[int] = []

    async def before_send(self, chunk_id: int) -> None:
        pass

    async def delivered(self, chunk_id: int, platform_message_id: str) -> None:
        self.recorded.append(chunk_id)

    async def undeliverable(self, chunk_id: int, reason: str) -> None:
        raise AssertionError(f"chunk {chunk_id} undeliverable: {reason}")


def outcome(conversation: str, chunk_id: int) -> TurnOutcome:
    chunk = OutboxChunk(chunk_id, conversation, "telegram", 100 + chunk_id, chunk_id, 0, "hi", 0.0)
    return TurnOutcome(conversation, chunk_id, "hi", None, (chunk,))


async def test_idle_waits_for_a_reply_handed_over_as_another_conversation_finishes() -> None:
    """A's last chunk is recorded in the same loop round as B's reply is handed to the
    courier: the courier is not idle until B was sent and recorded too."""
    release_a = anyio.Event()
    sent: list[int] = []

    async def send(chunk: OutboxChunk) -> str:
        if chunk.conversation == "a":
            await release_a.wait()
        sent.append(chunk.id)
        return f"m{chunk.id}"

    records = Records()
    courier = Courier("telegram", send, cast(Ledger, records))
    async with anyio.create_task_group() as tg:
        await tg.start(courier.run)
        await courier.deliver(outcome("a", 1))
        await anyio.wait_all_tasks_blocked()  # A's send is under way
        release_a.set()
        await courier.deliver(outcome("b", 2))  # yields first: A finishes meanwhile
        with anyio.fail_after(5):
            await courier.wait_idle()
        assert records.recorded == [1, 2], (sent, records.recorded)
        tg.cancel_scope.cancel()
