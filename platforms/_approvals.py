"""Approvals in a chat (SPEC 15), what Telegram's, Discord's and Slack's share: the message
that asks, how it is shown (``Asking``), the button data that names the call, what the message
says once answered, and the quiet typing while a turn waits.

A button's data is ``ap:<call row>:y`` or ``ap:<call row>:n``: it names the stored call and
nothing else, so a click is decided from the store alone (``Intake.decide``), by whichever
process or node receives it, however long after the message was sent, a restart included.
Whether the person who clicked may answer is the store's turn's business, never the button's.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from gateway.errors import PlatformError
from gateway.messages import Failure
from gateway.ports import ApprovalRequest
from platforms._notices import send_notice
from platforms._preview import Previews

log = logging.getLogger(__name__)

PREFIX = "ap"
APPROVE, DENY = "Approve", "Deny"
#: Who may answer, as the request says it (``gateway.approvals`` decides).
WHO = "Only the person whose message started this, or an approver, can answer."
_DATA = re.compile(r"ap:([1-9][0-9]{0,17}):([yn])")


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
    found = _DATA.fullmatch(data)  # the whole of it: a trailing newline is garbage too
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


class AskedCount(Protocol):
    asked: int


class Asking:
    """How a chat adapter shows an approval request, whatever its platform's ``send``: before
    it leaves, typing pauses (``waits``) and a preview message above it will not become the
    answer (``Previews.bury``); it is tried under the notices' rule (``platforms._notices``:
    not through the outbox, as it is not the turn's answer). One that cannot be shown is
    logged, never raised, and nobody can answer it: typing goes on, and the turn waits out its
    timeout, a denial the model is told of. One shown is counted (``counts.asked``)."""

    def __init__(self, previews: Previews, counts: AskedCount) -> None:
        self.waits = Waits()
        self._previews = previews
        self._counts = counts

    def __repr__(self) -> str:
        return f"<Asking {self.waits!r}>"

    async def show(
        self,
        request: ApprovalRequest,
        send: Callable[[], Awaitable[object]],
        *,
        errors: tuple[type[BaseException], ...],
        translate: Callable[[BaseException], PlatformError],
    ) -> None:
        self.waits.asked(request)
        self._previews.bury(request.conversation)
        try:
            sent = await send_notice(send, errors=errors, translate=translate)
        except PlatformError as exc:  # the bot or client is not started
            sent = Failure("unavailable", False, detail=str(exc))
        if isinstance(sent, Failure):
            log.warning(
                "approval request not shown: the call waits for its timeout",
                extra={
                    "conversation": request.conversation,
                    "call_id": request.call_id,
                    "error": sent.detail or sent.reason,
                },
            )
            self.waits.answered(request.call_row)
        else:
            self._counts.asked += 1
