"""A turn's durable tool steps in the store (``gateway.ports.StepLedger``, SPEC 15), and the
wait for an approval's answer.

An answer given on this node wakes the turn waiting for it at once (:class:`Decisions`); one
given on another node (a Telegram button polled by another node) is found by reading the
store every :data:`POLL_S` while the turn waits, so nothing but the store carries it, and a
restart or a takeover keeps the wait: the call stays ``awaiting`` with the time it was asked.
Because it is stored, a drain need not wait for it (:meth:`Decisions.only_waiting`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager

import anyio

from gateway.messages import CallState, StoredCall, StoredMessage, StoredStep, ToolCall
from gateway.store import (
    CallRow,
    FinishCall,
    OpenCall,
    RecordStep,
    StartCall,
    Store,
    TurnSteps,
)

#: How often a turn waiting for an approval looks in the store (an answer given on another
#: node); one given here wakes it at once.
POLL_S = 1.0


class Decisions:
    """Turns waiting for an approval here, by the call's row: a decision stored on this node
    wakes its turn at once."""

    def __init__(self) -> None:
        self._waiting: dict[int, anyio.Event] = {}
        self._conversations: Counter[str] = Counter()  # a wait running in each, by key

    def __repr__(self) -> str:
        return f"<Decisions waiting={len(self._waiting)}>"

    @contextmanager
    def waiting_in(self, conversation: str) -> Iterator[None]:
        self._conversations[conversation] += 1
        try:
            yield
        finally:
            self._conversations[conversation] -= 1
            if not self._conversations[conversation]:
                del self._conversations[conversation]

    def only_waiting(self, busy: Collection[str]) -> bool:
        """Whether each of the ``busy`` conversations (a turn running or queued) has its
        turn waiting for an approval: a drain then has nothing to wait for, as the waits
        are stored and resume at the next start."""
        return bool(busy) and all(key in self._conversations for key in busy)

    def event(self, call_row: int) -> anyio.Event:
        return self._waiting.setdefault(call_row, anyio.Event())

    def decided(self, call_row: int) -> None:
        event = self._waiting.pop(call_row, None)
        if event is not None:
            event.set()

    def forget(self, call_row: int) -> None:
        self._waiting.pop(call_row, None)


class StoredSteps:
    def __init__(
        self,
        store: Store,
        decisions: Decisions,
        *,
        wall: Callable[[], float] = time.time,
        poll_s: float = POLL_S,
    ) -> None:
        self._store = store
        self._decisions = decisions
        self._wall = wall
        self._poll_s = poll_s

    def __repr__(self) -> str:
        return f"<StoredSteps {self._decisions!r}>"

    async def steps(self, first_row: StoredMessage) -> list[StoredStep]:
        return await self._store.read(TurnSteps(first_row.id))

    async def record_step(
        self, first_row: StoredMessage, content: str, calls: Sequence[ToolCall], model: str
    ) -> int:
        return await self._store.submit(RecordStep(first_row, content, tuple(calls), model))

    async def open_call(
        self, first_row: StoredMessage, call: ToolCall, *, awaiting: bool
    ) -> StoredCall:
        state = CallState.AWAITING if awaiting else CallState.STARTED
        asked = self._wall() if awaiting else None
        row = await self._store.submit(OpenCall(first_row, call, state, asked))
        found = await self._store.read(CallRow(row))
        assert found is not None, "a call just opened is stored"
        return found[0]

    async def start_call(self, call_row: int) -> None:
        await self._store.submit(StartCall(call_row))

    async def finish_call(self, call_row: int, result: str, *, is_error: bool) -> None:
        await self._store.submit(FinishCall(call_row, result, is_error))

    async def decision(self, call_row: int, *, deadline: float) -> StoredCall:
        event = self._decisions.event(call_row)
        found = await self._store.read(CallRow(call_row))
        assert found is not None, "a call awaiting a decision is stored"
        try:
            with self._decisions.waiting_in(found[1].conversation):
                return await self._decided(call_row, event, deadline)
        finally:
            self._decisions.forget(call_row)

    async def _decided(self, call_row: int, event: anyio.Event, deadline: float) -> StoredCall:
        while True:
            found = await self._store.read(CallRow(call_row))
            assert found is not None, "a call awaiting a decision is stored"
            call = found[0]
            left = deadline - self._wall()
            if call.state != CallState.AWAITING or left <= 0:
                return call
            with anyio.move_on_after(min(left, self._poll_s)):
                await event.wait()
