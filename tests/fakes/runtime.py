"""Stand-ins for the runtime's ports, for tests that drive one platform adapter against its
loopback platform without a gateway behind it: what the adapter admitted, how it was told."""

from __future__ import annotations

import anyio

from gateway.errors import StoreError
from gateway.messages import Admission, Inbound, RowPage, StoredMessage


class HeldIntake:
    """The runtime's ports as a platform adapter sees them (``Intake``, ``Ledger``,
    ``Access``), admitting into a list; ``hold`` keeps admissions open until released. Every
    stranger is approved; deliveries and previews are recorded nowhere."""

    def __init__(self) -> None:
        self.accepting = True
        self.admitted: list[Inbound] = []
        self.attempts = 0
        self.fail_first = 0  # this many admissions fail as a broken store would
        self.hold = False
        self.released = anyio.Event()
        self.entered = anyio.Event()

    async def admit(self, inbound: Inbound) -> Admission:
        self.attempts += 1
        self.entered.set()
        if self.hold:
            await self.released.wait()
        if self.fail_first > 0:
            self.fail_first -= 1
            raise StoreError("disk I/O error")
        duplicate = any(a.platform_message_id == inbound.platform_message_id for a in self.admitted)
        if not duplicate:
            self.admitted.append(inbound)
        row = StoredMessage(
            len(self.admitted), inbound.conversation, "user", inbound.text, "pending", 0.0
        )
        return Admission(row, duplicate)

    async def command(self, platform: str, conversation: str, name: str, args: str = "") -> str:
        return f"ran /{name}"

    async def delete(self, conversation: str, *, by: str) -> int | None:
        return None

    async def delete_turn(self, user_row_id: int, *, by: str) -> bool | None:
        return None

    async def before_send(self, chunk_id: int) -> None: ...

    async def delivered(self, chunk_id: int, platform_message_id: str) -> None: ...

    async def record_preview(self, user_row_id: int, message_id: str) -> None: ...

    async def preview_of(self, user_row_id: int) -> str | None:
        return None

    async def undeliverable(self, chunk_id: int, reason: str) -> None: ...

    async def is_approved(self, platform: str, user_id: str) -> bool:
        return True

    async def request_pairing(self, platform: str, user_id: str, label: str) -> str | None:
        return None

    async def reply_to(self, user_row_id: int) -> StoredMessage | None:
        return None

    async def tool_row(self, conversation: str, call_id: str) -> StoredMessage | None:
        return None

    async def page(self, conversation: str, limit: int, before: int | None) -> RowPage:
        return RowPage([], more=False)

    async def previous_turn(self, conversation: str, row_id: int) -> int | None:
        return None
