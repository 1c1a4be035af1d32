"""What a chat user is told when their message is refused before it is stored.

``Intake.admit`` raises :class:`~gateway.errors.Refused` before anything is stored: too many
turns wait (:class:`~gateway.errors.Overloaded`) or the text is over the limit
(:class:`~gateway.errors.MessageTooLong`). That is an answer, not a store failure: the chat
adapters acknowledge the message (a redelivery would be refused the same way) and send a
short notice instead of a reply. A user who keeps writing to a busy gateway gets at most one
"busy" notice per chat every ``every_s``, so the notices cannot add to the load they report.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gateway.errors import MessageTooLong, Refused

BUSY_TEXT = "I'm busy right now: please try again in a moment."
BUSY_NOTICE_EVERY_S = 30.0
_REMEMBERED = 4096  # chats whose last busy notice is remembered; older ones are forgotten


def too_long_text(limit: int) -> str:
    return f"That message is too long for me (limit {limit} characters)."


class RefusalNotices:
    """Decides the notice for a refusal, rate-limiting the busy one per chat."""

    def __init__(
        self, *, every_s: float = BUSY_NOTICE_EVERY_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._every_s = every_s
        self._clock = clock
        self._last_busy: dict[str, float] = {}
        self.suppressed = 0  # busy notices not sent: one went to that chat shortly before

    def __repr__(self) -> str:
        return f"<RefusalNotices chats={len(self._last_busy)} suppressed={self.suppressed}>"

    def text(self, refused: Refused, chat: str) -> str | None:
        """The notice for ``refused`` in ``chat``, or None when that chat was told already."""
        if isinstance(refused, MessageTooLong):
            return too_long_text(refused.limit)
        now = self._clock()
        last = self._last_busy.get(chat)
        if last is not None and now - last < self._every_s:
            self.suppressed += 1
            return None
        self._last_busy[chat] = now
        if len(self._last_busy) > _REMEMBERED:
            self._last_busy = {
                key: at for key, at in self._last_busy.items() if now - at < self._every_s
            }
        return BUSY_TEXT
