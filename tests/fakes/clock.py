"""A wall clock a test moves by hand, for the scheduler (``gateway.scheduler.Clock``): no test
waits for a real minute. :meth:`FakeClock.move` sets the time, wakes every sleeper whose
deadline passed, and returns once every scheduler loop on this clock (``loops``: two nodes
share one) acted and sleeps again until a later time.
"""

from __future__ import annotations

from datetime import datetime

import anyio


class FakeClock:
    def __init__(self, start: float | str, *, loops: int = 1) -> None:
        self._now = _epoch(start)
        self._loops = loops
        self._moved = anyio.Event()
        self._slept = anyio.Event()
        self._asleep: dict[int, float] = {}  # each sleeping call's deadline
        self._calls = 0
        self.sleeps = 0

    def now(self) -> float:
        return self._now

    async def sleep_until(self, deadline: float) -> None:
        self._calls += 1
        call = self._calls
        self.sleeps += 1
        self._asleep[call] = deadline
        slept, self._slept = self._slept, anyio.Event()
        slept.set()
        try:
            while self._now < deadline:
                await self._moved.wait()
        finally:
            del self._asleep[call]

    async def advance_to(self, when: float | str) -> None:
        """Set the time (never backwards) and let sleepers whose deadline passed go on."""
        self._now = max(self._now, _epoch(when))
        moved, self._moved = self._moved, anyio.Event()
        moved.set()

    async def idle(self) -> None:
        """Until every loop sleeps until a time after now (it did what was due)."""
        with anyio.fail_after(20):
            while not (len(self._asleep) >= self._loops and min(self._asleep.values()) > self._now):
                await self._slept.wait()

    async def move(self, when: float | str) -> None:
        """Move the time and wait until the loops acted on it."""
        await self.advance_to(when)
        await self.idle()


def _epoch(when: float | str) -> float:
    return when if isinstance(when, float | int) else datetime.fromisoformat(when).timestamp()
