"""DM pairing for the chat platforms (``gateway.ports.Access``, SPEC 14): whether an unknown
user was approved, and the code they are sent (one per user, at most
:data:`PAIRING_MAX_PENDING` waiting per platform), logged as issued or refused."""

from __future__ import annotations

import logging

from gateway.store import IsApproved, RequestPairing, Store

log = logging.getLogger(__name__)

PAIRING_TTL_S = 3600.0
PAIRING_MAX_PENDING = 100  # per platform; each user holds at most one code (L2: squatting)


class Pairing:
    def __init__(self, store: Store) -> None:
        self._store = store

    def __repr__(self) -> str:
        return "<Pairing>"

    async def is_approved(self, platform: str, user_id: str) -> bool:
        return await self._store.read(IsApproved(platform, user_id))

    async def request_pairing(self, platform: str, user_id: str, label: str) -> str | None:
        write = RequestPairing(platform, user_id, label, PAIRING_TTL_S, PAIRING_MAX_PENDING)
        code, status = await self._store.submit(write)
        if status == "new":
            log.info(
                "pairing code issued",
                extra={"platform": platform, "user": user_id, "label": label},
            )
        elif status == "full":
            log.warning(
                "pairing refused: too many codes pending",
                extra={"platform": platform, "user": user_id, "max_pending": PAIRING_MAX_PENDING},
            )
        return code
