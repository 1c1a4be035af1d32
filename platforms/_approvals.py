"""Approvals in a chat (SPEC 15), what Telegram's and Discord's share: the message that asks,
the button data that names the call, what the message says once answered, and the quiet
typing while a turn waits.

A button's data is ``ap:<call row>:y`` or ``ap:<call row>:n``: it names the stored call and
nothing else, so a click is decided from the store alone (``Intake.decide``), by whichever
process or node receives it, however long after the message was sent, a restart included.
Whether the person who clicked may answer is the store's turn's business, never the button's.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from gateway.ports import ApprovalRequest

PREFIX = "ap"
APPROVE, DENY = "Approve", "Deny"
#: Who may answer, as the request says it (``gateway.approvals`` decides).
WHO = "Only the person whose message started this, or an approver, can answer."
_DATA = re.compile(r"^ap:([1-9][0-9]{0,17}):([yn])$")


def button_data(call_row: int, approve: bool) -> str:
    """The data a button carries (at most 24 bytes: Telegram allows 64, Discord 100)."""
    return f"{PREFIX}:{call_row}:{'y' if approve else 'n'}"


@dataclass(frozen=True, slots=True)
class Click:
    """A click on an approval button: the call it names, and the answer."""

    call_row: int
    approve: bool


def read_click(data: object) -> Click | None:
    """The click ``data`` stands for, or None when it is not an approval button's (another
    bot's, a stale format, garbage: platform input is untrusted)."""
    if not isinstance(data, str):
        return None
    found = _DATA.match(data)
    if found is None:
        return None
    return Click(int(found.group(1)), found.group(2) == "y")


def duration(seconds: float) -> str:
    """A timeout as people read it: ``45 s``, ``10 min``, ``2 h``."""
    if seconds < 120:
        return f"{seconds:g} s"
    if seconds < 2 * 3600:
        return f"{round(seconds / 60, 1):g} min"
    return f"{round(seconds / 3600, 1):g} h"


def request_text(request: ApprovalRequest, quote: Callable[[str], str] = str) -> str:
    """What the approval message says: the tool, its arguments as stored (cut to 500
    characters by the tool loop; ``quote`` shows them, as is by default), who may answer and
    what no answer means. Its last paragraph is replaced by the outcome once answered
    (:func:`answered_text`)."""
    arguments = quote(request.arguments or "{}")
    body = f"Approve this tool call?\nTool: {request.tool}\nArguments: {arguments}"
    footer = f"{WHO} No answer within {duration(request.timeout_s)} is a denial."
    return f"{body}\n\n{footer}"


def answered_text(shown: str, approve: bool, by: str) -> str:
    """The approval message once answered: what it showed, its last paragraph (who may answer,
    the timeout) replaced by who decided what."""
    body = shown.rpartition("\n\n")[0] or shown
    outcome = "Approved" if approve else "Denied"
    return f"{body}\n\n{outcome} by {by}." if by else f"{body}\n\n{outcome}."


class Waits:
    """Approvals asked here and not answered yet, by conversation, so the typing indicator
    pauses while a turn waits for a person (else "typing…" would show for the whole wait,
    up to ``approval_timeout_s``). A wait ends with an answer given here, its timeout, or the
    end of its turn; an answer given through another node is not seen here, and typing then
    stays quiet until the timeout or the turn's end (it is decoration)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._until: dict[int, tuple[str, float]] = {}  # call row -> (conversation, timeout)

    def __repr__(self) -> str:
        return f"<Waits {len(self._until)}>"

    def asked(self, request: ApprovalRequest) -> None:
        self._until[request.call_row] = (request.conversation, self._clock() + request.timeout_s)

    def answered(self, call_row: int) -> None:
        self._until.pop(call_row, None)

    def waiting(self, conversation: str) -> bool:
        now = self._clock()
        for row, (key, until) in list(self._until.items()):
            if until <= now:
                del self._until[row]
            elif key == conversation:
                return True
        return False

    def ended(self, conversation: str) -> None:
        """The conversation's turn ended: whatever it waited for is over."""
        for row in [r for r, (key, _) in self._until.items() if key == conversation]:
            del self._until[row]
