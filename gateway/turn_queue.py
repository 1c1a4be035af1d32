"""A session actor's queue, decided without I/O (STYLE: decide, then act): which rows wait,
which turn runs, what a ``/stop`` or a newer row cuts, and when a burst is taken.

The rows themselves are the durable queue (``pending`` rows in the store); this is the
actor's index of them. A row waits as a *header* (its content left out, read whole when its
turn comes), unless its turn starts at once. ``gateway.session`` owns one :class:`TurnQueue`
per actor and acts on what it says: it cancels the turn's or the debounce's scope when
:func:`cut` says so, sleeps when :meth:`TurnQueue.take` says wait, and runs the burst it
hands out. The time is always passed in (``now``: epoch seconds, as rows' ``created_at``).
"""

from __future__ import annotations

import bisect
import dataclasses
from dataclasses import dataclass
from typing import Literal

from gateway.messages import StoredMessage
from gateway.queue import QueuePolicy, TakeBurst, WaitForMore, next_burst

#: What cut the running turn (or the burst being collected): ``/stop``, or a newer row in
#: queue mode "interrupt".
Cut = Literal["stop", "interrupt"]


@dataclass(frozen=True, slots=True)
class CutTurn:
    """Cancel the running turn's model phase; ``why`` is what the turn then ends as."""

    why: Cut


@dataclass(frozen=True, slots=True)
class CutBurst:
    """Cancel the debounce of a burst being collected: its turn starts stopped."""


@dataclass(frozen=True, slots=True)
class KeepRunning:
    """Nothing to cut (nothing runs, or the running turn's text reached a viewer who cannot
    be shown a correction: the new row waits for the next turn)."""


CutAction = CutTurn | CutBurst | KeepRunning


def cut(
    why: Cut, *, running: bool, collecting: bool, binding: bool, already: Cut | None
) -> CutAction:
    """What a ``/stop`` or an interrupting row does: a stop outranks an interruption; a stop
    while a burst is collected cancels the burst; an interruption spares a turn whose text a
    peer client already saw."""
    if why == "interrupt" and binding:
        return KeepRunning()
    if why == "stop" and collecting:
        return CutBurst()
    if running:
        return CutTurn("stop" if "stop" in (why, already) else why)
    return KeepRunning()


def header(row: StoredMessage) -> StoredMessage:
    """``row`` as the queue keeps a row that waits: without its content (read at its turn)."""
    return row if not row.content else dataclasses.replace(row, content="", attachments=())


class TurnQueue:
    """The rows queued or running in one conversation, by id (admission order)."""

    __slots__ = ("_queued", "cut", "floor", "running", "waiting")

    def __init__(self) -> None:
        self.waiting: list[StoredMessage] = []  # not started yet, id order (short)
        self._queued: list[int] = []  # ids queued or running, ascending
        self.running: tuple[StoredMessage, ...] = ()  # the running turn's rows
        self.floor = 0  # rows up to this id were loaded from the store at start
        self.cut: Cut | None = None  # what cut the running turn (or the burst collected)

    def __len__(self) -> int:
        """Rows queued or running."""
        return len(self._queued)

    def has(self, row_id: int) -> bool:
        """Whether the row is queued or running."""
        i = bisect.bisect_left(self._queued, row_id)
        return i < len(self._queued) and self._queued[i] == row_id

    def starts_now(self, row: StoredMessage, *, collecting: bool) -> bool:
        """Whether ``row``'s turn starts as soon as the worker runs: then the row admitted is
        kept whole and the turn does not read it back (a row with attachments is read, for
        the refs as stored). A row that waits (behind a turn, in a burst's window) is queued
        as a header and read when its turn comes, so a purge or delete meanwhile is seen
        before the model is asked; the answer's commit refuses a row settled in the instant
        between (``TurnSettled``)."""
        return not (self.waiting or self.running or collecting or row.attachments)

    def admitted(self, row: StoredMessage, *, collecting: bool) -> bool:
        """Queue a row admitted here (after the rows read at start, once): whether it was."""
        if row.id <= self.floor or self.has(row.id):
            return False
        self.enqueue(row if self.starts_now(row, collecting=collecting) else header(row))
        return True

    def loaded(self, rows: list[StoredMessage]) -> bool:
        """Queue the pending rows read from the store that are not queued yet: whether one of
        them is newer than the running turn (admitted on another node while it ran)."""
        newer = False
        for row in rows:
            if self.has(row.id):
                continue
            newer = newer or (bool(self.running) and row.id > self.running[-1].id)
            self.enqueue(row)
            self.floor = max(self.floor, row.id)
        return newer

    def enqueue(self, row: StoredMessage) -> None:
        bisect.insort(self._queued, row.id)
        # In id order: rows admitted together may reach the actor in any order.
        bisect.insort(self.waiting, row, key=lambda r: r.id)

    def take(self, policy: QueuePolicy, now: float) -> TakeBurst | WaitForMore | None:
        """The next turn's rows, taken out of the waiting ones (``gateway.queue.next_burst``),
        or how long to wait for the burst to grow (its rows wait as headers meanwhile); None:
        nothing waits."""
        if not self.waiting:
            return None
        decision = next_burst(policy, self.waiting, now)
        if isinstance(decision, TakeBurst):
            del self.waiting[: len(decision.rows)]  # a prefix: the oldest rows
        self.waiting[:] = map(header, self.waiting)  # they wait for this turn or the burst
        return decision

    def stopped_burst(self) -> tuple[StoredMessage, ...]:
        """After the debounce: the burst a ``/stop`` cancelled (its turn starts stopped)."""
        if self.cut != "stop" or not self.waiting:
            return ()
        rows = tuple(self.waiting)
        self.waiting.clear()
        return rows

    def start(self, burst: tuple[StoredMessage, ...]) -> None:
        self.running = burst

    def finish(self, *, requeue: bool) -> None:
        """The running turn ended; ``requeue``: its rows go back to wait (interrupted, or its
        answer refused because one of them was settled meanwhile), as headers."""
        burst, self.running, self.cut = self.running, (), None
        for row in burst:
            if requeue:
                bisect.insort(self.waiting, header(row), key=lambda r: r.id)
            else:
                self._queued.remove(row.id)

    def close(self) -> None:
        """Intake closed: rows not started stay pending in the store for the next start."""
        self.waiting.clear()
        self._queued = [row.id for row in self.running]
