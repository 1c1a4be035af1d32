"""The delivery ledger (``gateway.ports.Ledger``): what a platform did with each reply chunk,
and each turn's preview message, recorded in the store.

What a platform did with a chunk is recorded even while its sender is cancelled (a drain),
within a deadline: a record cut short is a chunk sent but not recorded, which the next start
handles as ``[gateway] unrecorded_sends`` says (resend, or with ``"drop"``: the chunk was
marked ``sending`` before it left, and such a chunk is expired instead of sent twice).
"""

from __future__ import annotations

import logging
from typing import Any

import anyio

from gateway.store import (
    FailChunk,
    MarkDelivered,
    MarkSending,
    PreviewOf,
    RecordPreview,
    Store,
    Write,
)

log = logging.getLogger(__name__)

#: How long recording what a platform did with a chunk may take while shielded (a drain waits
#: for it): past it the store is not answering, and the chunk counts as sent, not recorded.
RECORD_DEADLINE_S = 30.0


class DeliveryLedger:
    def __init__(self, store: Store, *, at_most_once: bool = False) -> None:
        self._store = store
        self._at_most_once = at_most_once  # gateway.unrecorded_sends == "drop"

    def __repr__(self) -> str:
        return f"<DeliveryLedger at_most_once={self._at_most_once}>"

    async def before_send(self, chunk_id: int) -> None:
        if self._at_most_once:
            await self._record("sending", chunk_id, MarkSending(chunk_id))

    async def delivered(self, chunk_id: int, platform_message_id: str) -> None:
        await self._record("delivered", chunk_id, MarkDelivered(chunk_id, platform_message_id))

    async def undeliverable(self, chunk_id: int, reason: str) -> None:
        log.warning("reply chunk undeliverable", extra={"chunk": chunk_id, "reason": reason})
        await self._record("failed", chunk_id, FailChunk(chunk_id))

    async def _record(self, state: str, chunk_id: int, write: Write[Any]) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(RECORD_DEADLINE_S) as scope:
            await self._store.submit(write)
        if scope.cancelled_caught:
            log.warning(
                "reply chunk state not recorded in time",
                extra={"chunk": chunk_id, "state": state, "deadline_s": RECORD_DEADLINE_S},
            )

    async def record_preview(self, user_row_id: int, message_id: str) -> None:
        await self._store.submit(RecordPreview(user_row_id, message_id))

    async def preview_of(self, user_row_id: int) -> str | None:
        return await self._store.read(PreviewOf(user_row_id))
