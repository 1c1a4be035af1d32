"""The seams between the runtime and its parts, as structural protocols.

Like ``messages`` and ``errors``, this module imports nothing of ours but those two, so
platforms and the agent can implement these protocols without importing the runtime, and the
runtime can use them without importing any platform or the agent.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from gateway.messages import Admission, ChatMessage, Inbound, StoredMessage, TurnOutcome, TurnResult


class TurnRunner(Protocol):
    """Runs one model turn (the agent, under the failure policy)."""

    async def run_turn(
        self, conversation: str, history: Sequence[ChatMessage], text: str
    ) -> TurnResult: ...

    def status(self) -> dict[str, object]:
        """What ``/status`` shows about models and credentials."""
        ...


class Outlet(Protocol):
    """A platform's outgoing side: how replies are cut, delivered and announced."""

    platform: str

    def render(self, text: str) -> list[str]:
        """The reply as the chunks that will be sent, in order, each within the platform's limit."""
        ...

    async def deliver(self, outcome: TurnOutcome) -> None:
        """Queue the outcome's chunks for delivery (recorded through ``Intake.delivered``)."""
        ...

    def activity(self, conversation: str) -> AbstractAsyncContextManager[None]:
        """Show that a turn is running (typing) for as long as the context is open."""
        ...


class Intake(Protocol):
    """What a platform adapter may ask of the runtime."""

    @property
    def accepting(self) -> bool:
        """False once draining began: adapters refuse new work (the peer API answers 503)."""
        ...

    async def admit(self, inbound: Inbound) -> Admission:
        """Store the message (exactly once) and queue its turn; return the stored row."""
        ...

    async def command(self, platform: str, conversation: str, name: str) -> str:
        """Run a control command (``help``, ``status``, ``new``, ``stop``); return its reply."""
        ...

    async def delivered(self, chunk_id: int, platform_message_id: str) -> None: ...

    async def reply_to(self, user_row_id: int) -> StoredMessage | None: ...

    async def transcript(self, conversation: str) -> list[StoredMessage]: ...
