"""The durable tool steps in the store (SPEC 15), on SQLite and PostgreSQL alike: a step and
its calls stored and read back in order, a replayed open changing nothing, the first decision
of an approval winning, the queries a peer client's answer and a click use, and a stopped
turn closing the calls it left open (none can be approved into a run that never comes)."""

from __future__ import annotations

import pytest

from gateway.messages import CallState, ToolCall
from gateway.store import (
    AdmitRow,
    AwaitingCall,
    CallRow,
    CancelTurn,
    DecideCall,
    FinishCall,
    OpenCall,
    RecordStep,
    StartCall,
    ToolRow,
    TurnSteps,
)
from gateway.store.answers import STOPPED_RUNNING, STOPPED_WAITING
from tests.support.stores import Opener, inbound

pytestmark = pytest.mark.anyio

PUSH = ToolCall("call_1", "git__push", '{"branch": "main"}')
STATUS = ToolCall("call_2", "git__status", "{}")


async def test_a_step_and_its_calls_are_stored_decided_and_read_back(open_store: Opener) -> None:
    async with open_store() as store:
        turn = (await store.submit(AdmitRow(inbound("push it", "m1")))).row
        step = await store.submit(RecordStep(turn, "Let me push.", (PUSH, STATUS), "gpt-x"))
        asked = await store.submit(OpenCall(turn, PUSH, CallState.AWAITING, requested_at=100.0))
        running = await store.submit(OpenCall(turn, STATUS, CallState.STARTED))
        # Opened again (a replay after a crash): the same row, its state untouched.
        assert await store.submit(OpenCall(turn, PUSH, CallState.STARTED)) == asked

        assert await store.read(AwaitingCall("peer:a", "call_1")) == asked
        assert await store.read(AwaitingCall("peer:b", "call_1")) is None  # another conversation
        assert await store.submit(DecideCall(asked, True, "peer:alice")) is True
        assert await store.submit(DecideCall(asked, False, "peer:bob")) is False  # first wins
        assert await store.read(AwaitingCall("peer:a", "call_1")) is None
        await store.submit(StartCall(asked))
        await store.submit(FinishCall(asked, "pushed"))
        await store.submit(FinishCall(running, "clean", is_error=True))

        (stored,) = await store.read(TurnSteps(turn.id))
        found = await store.read(CallRow(asked))
    assert (stored.row_id, stored.content, stored.calls, stored.model) == (
        step,
        "Let me push.",
        (PUSH, STATUS),
        "gpt-x",
    )
    push, status = stored.stored
    assert (push.call_id, push.tool, push.arguments) == ("call_1", "git__push", PUSH.arguments)
    assert (push.state, push.result, push.is_error) == ("finished", "pushed", False)
    assert (push.requested_at, push.decided_by) == (100.0, "peer:alice")
    assert (status.state, status.result, status.is_error) == ("finished", "clean", True)
    assert found is not None and found[0] == push and found[1].id == turn.id


async def test_a_calls_tool_row_is_found_without_the_transcript(open_store: Opener) -> None:
    """``ToolRow``: the newest tool row of a call id in one conversation (what the peer
    approvals route reads once a call no longer waits, L-8), by query, not by the transcript."""
    async with open_store() as store:
        first = (await store.submit(AdmitRow(inbound("push it", "m1")))).row
        await store.submit(RecordStep(first, "", (PUSH,)))
        older = await store.submit(OpenCall(first, PUSH, CallState.STARTED))
        again = (await store.submit(AdmitRow(inbound("push again", "m2")))).row
        await store.submit(RecordStep(again, "", (PUSH,)))  # a provider reusing call ids
        newer = await store.submit(OpenCall(again, PUSH, CallState.STARTED))
        elsewhere = (await store.submit(AdmitRow(inbound("push", "m3", "peer:b")))).row
        await store.submit(RecordStep(elsewhere, "", (PUSH,)))
        await store.submit(OpenCall(elsewhere, PUSH, CallState.STARTED))

        found = await store.read(ToolRow("peer:a", "call_1"))
        assert await store.read(ToolRow("peer:a", "call_2")) is None
        assert await store.read(ToolRow("peer:c", "call_1")) is None
    assert older < newer
    assert found is not None
    assert (found.id, found.role, found.call_id, found.user_row_id) == (
        newer,
        "tool",
        "call_1",
        again.id,
    )


async def test_a_stopped_turn_closes_the_calls_it_left_open(open_store: Opener) -> None:
    async with open_store() as store:
        turn = (await store.submit(AdmitRow(inbound("push it", "m1")))).row
        await store.submit(RecordStep(turn, "", (PUSH, STATUS)))
        asked = await store.submit(OpenCall(turn, PUSH, CallState.AWAITING, requested_at=1.0))
        await store.submit(OpenCall(turn, STATUS, CallState.STARTED))
        other = (await store.submit(AdmitRow(inbound("another", "m2", "peer:b")))).row
        await store.submit(RecordStep(other, "", (PUSH,)))
        untouched = await store.submit(OpenCall(other, PUSH, CallState.AWAITING))

        await store.submit(CancelTurn(turn.id))

        assert await store.submit(DecideCall(asked, True, "peer:alice")) is False
        assert await store.read(AwaitingCall("peer:a", "call_1")) is None
        (step,) = await store.read(TurnSteps(turn.id))
        assert await store.read(AwaitingCall("peer:b", "call_1")) == untouched
    push, status = step.stored
    assert (push.state, push.result, push.is_error) == ("finished", STOPPED_WAITING, True)
    assert (status.state, status.result, status.is_error) == ("finished", STOPPED_RUNNING, True)
