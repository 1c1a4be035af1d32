"""One gateway-wide budget of attachment bytes held by turns at once (SPEC 9; security review
2026-12-05, L-7: with a vision model, each of ``max_concurrent_turns`` turns could hold ten
20 MiB images as base64 through its model call, with nothing bounding the sum).

A turn takes what a file will hold before it loads the file, and gives it back when it no
longer needs the bytes: at once for a document or a voice note (only their text is kept),
after the model call for an image (its data URL is the request). Taking waits while other
turns hold the budget, at most ``wait_s``: then the caller leaves the file out and says so,
instead of the process growing without bound. One file larger than the whole budget may
still go, alone.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio


class ByteBudget:
    """At most ``limit()`` bytes taken at once (read at each take: a reload may change it)."""

    def __init__(self, limit: Callable[[], int], *, wait_s: float) -> None:
        self._limit = limit
        self._wait_s = wait_s
        self._held = 0
        self._peak = 0
        self._refused = 0
        self._freed = anyio.Event()  # set (and replaced) whenever bytes are given back

    def __repr__(self) -> str:
        return f"<ByteBudget held={self._held} limit={self._limit()}>"

    def statistics(self) -> dict[str, int]:
        return {"held": self._held, "peak": self._peak, "refused": self._refused}

    @property
    def held(self) -> int:
        return self._held

    async def take(self, size: int) -> int | None:
        """Take ``size`` bytes (at most the whole budget), waiting at most ``wait_s`` for
        other turns to give bytes back; what was taken (give it back later), or None when the
        wait ran out."""
        size = max(0, min(size, self._limit()))
        with anyio.move_on_after(self._wait_s):
            while self._held + size > self._limit():
                await self._freed.wait()
            self.adjust(size)
            return size
        self._refused += 1
        return None

    def adjust(self, size: int) -> None:
        """Count ``size`` more bytes as held (no wait: what a file turned out to hold more
        than its taker could know), or give them back when negative."""
        self._held += size
        self._peak = max(self._peak, self._held)
        if size < 0:
            self._freed.set()
            self._freed = anyio.Event()

    def give(self, size: int) -> None:
        self.adjust(-size)
