"""Sliding-window rate limits for the chat fakes (Telegram, Discord).

Why: streaming previews are only safe if they stay inside the platforms' limits, so the fakes
must answer 429 where the platform would. A window admits at most ``calls`` calls in any
``per_s`` seconds per key (a chat, a channel's route, "all"); a refused call is not counted.
Decide, then act: ``wait(key, now)`` only answers how long the next call must wait;
``add(key, now)`` counts an admitted call. The clock is the caller's, so a test may pass its
own.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Hashable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Limit:
    """At most ``calls`` calls in any ``per_s`` seconds."""

    calls: int
    per_s: float


class Windows:
    """One sliding window per key, all with the same ``limit``."""

    def __init__(self, limit: Limit) -> None:
        self.limit = limit
        self._times: defaultdict[Hashable, deque[float]] = defaultdict(deque)

    def __repr__(self) -> str:
        return f"<Windows {self.limit.calls}/{self.limit.per_s}s keys={len(self._times)}>"

    def _window(self, key: Hashable, now: float) -> deque[float]:
        times = self._times[key]
        while times and times[0] <= now - self.limit.per_s:
            times.popleft()
        return times

    def wait(self, key: Hashable, now: float) -> float:
        """Seconds until a call of ``key`` would be admitted: 0.0 when it would be now."""
        times = self._window(key, now)
        if len(times) < self.limit.calls:
            return 0.0
        return max(times[-self.limit.calls] + self.limit.per_s - now, 1e-3)

    def add(self, key: Hashable, now: float) -> None:
        self._window(key, now).append(now)

    def remaining(self, key: Hashable, now: float) -> int:
        return max(self.limit.calls - len(self._window(key, now)), 0)

    def reset_after(self, key: Hashable, now: float) -> float:
        """Seconds until the window of ``key`` is empty again (0.0 when it is)."""
        times = self._window(key, now)
        return max(times[-1] + self.limit.per_s - now, 0.0) if times else 0.0
