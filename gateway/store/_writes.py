"""The store's writes, the same on both backends: each one an operation for the group-commit
writer (``_writer``), which hands batches of them to the backend's ``apply`` functions by kind.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.messages import Admission, Inbound, StoredMessage, TurnOutcome, TurnResult
from gateway.store._writer import GroupWriter


class QueuedWrites:
    _group: GroupWriter

    async def _submit(self, kind: str, *args: Any) -> Any:
        return await self._group.submit(kind, *args)

    async def admit(self, inbound: Inbound) -> Admission:
        result: Admission = await self._submit("admit", inbound)
        return result

    async def answer(
        self, user_row: StoredMessage, result: TurnResult, chunks: Sequence[str]
    ) -> TurnOutcome:
        outcome: TurnOutcome = await self._submit("answer", user_row, result, tuple(chunks))
        return outcome

    async def cancel(self, user_row_id: int) -> None:
        await self._submit("cancel", user_row_id)

    async def reset(self, conversation: str) -> None:
        await self._submit("reset", conversation)

    async def mark_delivered(self, chunk_id: int, platform_message_id: str) -> None:
        await self._submit("delivered", chunk_id, platform_message_id)

    async def expire_chunks(self, chunk_ids: Sequence[int]) -> None:
        if chunk_ids:
            await self._submit("expire", tuple(chunk_ids))

    async def chunk_failed(self, chunk_id: int) -> None:
        await self._submit("chunk_failed", chunk_id)

    async def mark_sending(self, chunk_id: int) -> None:
        await self._submit("sending", chunk_id)

    async def request_pairing(
        self, platform: str, user_id: str, label: str, *, ttl_s: float, max_pending: int
    ) -> tuple[str | None, str]:
        result: tuple[str | None, str] = await self._submit(
            "pair_request", platform, user_id, label, ttl_s, max_pending
        )
        return result

    async def approve_pairing(self, platform: str, code: str) -> str | None:
        user: str | None = await self._submit("pair_approve", platform, code.strip().upper())
        return user

    async def reject_pairing(self, platform: str, code: str) -> str | None:
        user: str | None = await self._submit("pair_reject", platform, code.strip().upper())
        return user

    async def revoke_user(self, platform: str, user_id: str) -> bool:
        revoked: bool = await self._submit("pair_revoke", platform, user_id)
        return revoked
