"""Queue modes (SPEC section 10): which waiting rows a conversation's next turn answers.

``followup`` answers every row in its own turn; ``collect`` answers a burst (the rows that
waited while a turn ran, or that arrived within ``debounce_s`` of each other, up to
``debounce_max_s`` after the first) in one turn; ``interrupt`` lets a new row stop the running
turn and answers the stopped row and the new ones together, at once.

Pure decisions, no I/O (the session actor acts on them): :func:`next_burst` says which rows
to take now or how long to wait for more, :func:`burst_text` is the one user message the
model sees for a burst.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from gateway.messages import StoredMessage, schedule_of

QueueMode = Literal["followup", "collect", "interrupt"]
QUEUE_MODES: tuple[QueueMode, ...] = ("followup", "collect", "interrupt")


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """One platform's queue mode and debounce window (``[gateway]``, overridable per platform)."""

    mode: QueueMode = "followup"
    debounce_s: float = 1.5
    debounce_max_s: float = 5.0

    @property
    def merges(self) -> bool:
        """Whether rows waiting together are answered in one turn."""
        return self.mode != "followup"


@dataclass(frozen=True, slots=True)
class TakeBurst:
    """Start a turn answering these rows (in id order; the last one is replied to)."""

    rows: tuple[StoredMessage, ...]


@dataclass(frozen=True, slots=True)
class WaitForMore:
    """The burst may still grow: decide again after ``seconds`` (or sooner, on a new row)."""

    seconds: float


def next_burst(
    policy: QueuePolicy, waiting: Sequence[StoredMessage], now: float
) -> TakeBurst | WaitForMore:
    """What the next turn answers, from the rows waiting (id order, not empty) and the time
    (epoch seconds, as ``created_at``). Rows that waited behind a running turn are old enough
    to go at once; a fresh burst waits ``debounce_s`` after its latest row, never past
    ``debounce_max_s`` after its first."""
    assert waiting, "nothing waits"
    # A schedule's firing (SPEC 16) is a turn of its own: its text is sent as it is, or its
    # prompt answered alone, never merged with what people wrote around it.
    alone = [i for i, row in enumerate(waiting) if schedule_of(row.platform_message_id)]
    if not policy.merges or (alone and alone[0] == 0):
        return TakeBurst((waiting[0],))
    if alone:
        waiting = waiting[: alone[0]]
    if policy.mode == "collect":
        first = min(row.created_at for row in waiting)
        last = max(row.created_at for row in waiting)
        due = min(last + policy.debounce_s, first + policy.debounce_max_s)
        if due > now:
            return WaitForMore(due - now)
    return TakeBurst(tuple(waiting))


def burst_text(texts: Sequence[str]) -> str:
    """The one user message of a burst: its texts in arrival order, a paragraph each."""
    return "\n\n".join(texts)
