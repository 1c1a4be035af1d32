"""``Outlet.fetch`` for outlets that never fetch: the peer API (its attachments arrive inline
and are stored at admission) and A2A (text parts only).

It lets such an adapter satisfy the :class:`gateway.ports.Outlet` protocol; should a turn ever
ask, it answers the attachment with the failure's class, like any platform failure (SPEC 9).
"""

from __future__ import annotations

from gateway.errors import PlatformError
from gateway.messages import AttachmentRef


async def unsupported(self: object, ref: AttachmentRef, *, limit: int) -> bytes:
    """Refuse: this outlet fetches nothing (a 400-like failure, not retried)."""
    raise PlatformError(f"fetching {ref.name!r} is not supported on this platform", status=400)
