"""Requests waiting for an A2A task to move on (SPEC 12): an event per user row, set when its
turn's outcome arrives here or when it asks for input (SPEC 15). A turn answered on another
node never sets it: a waiter reads the store as a backstop (``A2aAdapter._wait``)."""

from __future__ import annotations

import anyio


class Settled:
    """An event per user row some requests here wait on; kept while anyone waits."""

    def __init__(self) -> None:
        self._events: dict[int, tuple[anyio.Event, int]] = {}

    def __repr__(self) -> str:
        return f"<Settled waiting={len(self._events)}>"

    def event(self, row_id: int) -> anyio.Event:
        event, waiting = self._events.get(row_id, (anyio.Event(), 0))
        self._events[row_id] = (event, waiting + 1)
        return event

    def set(self, row_id: int) -> None:
        """Wake whoever waits on the row now; a wait begun later gets a fresh event (a task
        asked for input, then answered, wakes its waiters again when it ends)."""
        held = self._events.pop(row_id, None)
        if held is not None:
            held[0].set()

    def forget(self, row_id: int, event: anyio.Event) -> None:
        held, waiting = self._events.get(row_id, (None, 0))
        if held is event:
            if waiting > 1:
                self._events[row_id] = (event, waiting - 1)
            else:
                del self._events[row_id]

    def __len__(self) -> int:
        return len(self._events)
