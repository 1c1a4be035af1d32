"""A stand-in ``Outlet.fetch`` for chat platforms whose attachment download is not built yet.

It lets an adapter satisfy the :class:`gateway.ports.Outlet` protocol; the turn then answers
the attachment with the failure's class, like any platform failure (SPEC 9).
"""

from __future__ import annotations

from gateway.errors import PlatformError
from gateway.messages import AttachmentRef


async def unsupported(self: object, ref: AttachmentRef, *, limit: int) -> bytes:
    """Refuse: this platform cannot fetch attachments yet (a 400-like failure, not retried)."""
    raise PlatformError(f"fetching {ref.name!r} is not supported on this platform", status=400)
