"""What reaches the Slack adapter's actor, from either way in, and what it answers.

Socket Mode hands over envelopes (``events_api``, ``interactive``, ``slash_commands``), each
acknowledged by sending its ``envelope_id`` back; the Events API posts the same payloads over
HTTP, each answered by the response. Both become an :class:`Envelope` for the adapter's actor,
which decides one at a time, in arrival order (admission order is arrival order), and gives
its :class:`Verdict` through the envelope's :class:`Pending`: only then is the envelope
acknowledged (``ACK``: the row is committed, or there was nothing to admit) or left
unacknowledged (``RETRY``: the store failed, Slack delivers it again; ``HOLD``: draining,
the next process or node gets it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import anyio


class Verdict(Enum):
    ACK = "ack"
    RETRY = "retry"
    HOLD = "hold"


class Pending:
    """A verdict not given yet: the Socket Mode listener or the HTTP handler waits on it."""

    def __init__(self) -> None:
        self._given = anyio.Event()
        self.verdict = Verdict.HOLD

    def give(self, verdict: Verdict) -> None:
        if not self._given.is_set():
            self.verdict = verdict
            self._given.set()

    async def wait(self) -> Verdict:
        await self._given.wait()
        return self.verdict


@dataclass(frozen=True, slots=True)
class Envelope:
    """One payload from Slack: ``kind`` as Socket Mode names it (``events_api``,
    ``interactive``, ``slash_commands``), ``retry`` Slack's retry count (0: the first
    delivery)."""

    kind: str
    payload: Any
    retry: int = 0
    pending: Pending = field(default_factory=Pending, compare=False)
