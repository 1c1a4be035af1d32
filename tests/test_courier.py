"""The chat platforms' courier (``platforms._courier``) on its own: ``wait_idle`` returns only
once every reply handed to it was sent and recorded (a drain relies on it before the node
stops and its conversations go to another node); a chunk whose send fails unexpectedly is
parked and the courier goes on (security review 2026-12-05, H-2)."""

from __future__ import annotations

from typing import cast

import anyio
import pytest

from gateway.errors import PlatformError
from gateway.events import Event, SendFailed
from gateway.messages import OutboxChunk, TurnOutcome
from gateway.ports import Ledger
from platforms._courier import Courier

pytestmark = pytest.mark.anyio


class Records:
    """The part of the delivery ledger a courier uses: what it recorded."""

    def __init__(self) -> None:
        self.recorded: list[int] = []
        self.failed: list[tuple[int, str]] = []

    async def before_send(self, chunk_id: int) -> None:
        pass

    async def delivered(self, chunk_id: int, platform_message_id: str) -> None:
        self.recorded.append(chunk_id)

    async def undeliverable(self, chunk_id: int, reason: str) -> None:
        self.failed.append((chunk_id, reason))


def outcome(conversation: str, *chunk_ids: int) -> TurnOutcome:
    chunks = tuple(
        OutboxChunk(n, conversation, "telegram", 100 + n, chunk_ids[0], i, "hi", 0.0)
        for i, n in enumerate(chunk_ids)
    )
    return TurnOutcome(conversation, chunk_ids[0], "hi", None, chunks)


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
        assert records.failed == []
        tg.cancel_scope.cancel()


async def test_a_chunk_whose_send_fails_unexpectedly_is_parked_and_the_courier_goes_on() -> None:
    """A send that raises something no platform refusal is (aiohttp's ValueError for a
    header with CR/LF, a bug) must not end the courier: that chunk is marked failed
    (``poisoned``, once, no retry) and the chunks after it, and other conversations', go."""
    attempts: list[int] = []

    async def send(chunk: OutboxChunk) -> str:
        attempts.append(chunk.id)
        if chunk.id == 1:
            raise ValueError("Forbidden control character detected in headers")
        if chunk.id == 4:
            raise PlatformError("bad request", status=400)  # a refusal: failed, as before
        return f"m{chunk.id}"

    records = Records()
    events: list[Event] = []
    courier = Courier("a2a", send, cast(Ledger, records), observe=events.append)
    async with anyio.create_task_group() as tg:
        await tg.start(courier.run)
        await courier.deliver(outcome("a", 1, 2))
        await courier.deliver(outcome("a", 3))
        await courier.deliver(outcome("b", 4, 5))
        with anyio.fail_after(5):
            await courier.wait_idle()
        tg.cancel_scope.cancel()
    assert sorted(attempts) == [1, 2, 3, 4, 5]  # each once: nothing retried
    assert sorted(records.recorded) == [2, 3, 5]
    assert sorted(records.failed) == [(1, "poisoned"), (4, "bad_request")]
    failed = sorted((e.chunk, e.reason) for e in events if isinstance(e, SendFailed))
    assert failed == [(1, "poisoned"), (4, "bad_request")]
    stats = courier.statistics()
    assert (stats.sent, stats.failed, stats.poisoned) == (3, 2, 1)
