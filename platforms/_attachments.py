"""Attachments from a chat platform (SPEC 9): their kind, and their bytes read with a bound.

Shared by the Telegram and Discord adapters. A platform says what a message carries when it
arrives (an :class:`~gateway.messages.AttachmentRef`: name, type, size, the platform's
handle); the bytes are fetched later, during the turn, through ``Outlet.fetch``. Both
platforms' fetches end in :func:`read_bounded`, so neither ever holds more than the limit of
a download in memory: a size the platform declared is refused before anything is fetched
(:func:`refuse_declared`), and an undeclared or understated one stops the read as soon as it
passes the limit, leaving the rest of the body unread. And a download goes only where the
platform keeps files (:func:`refuse_off_origin`), never following a redirect
(:func:`refuse_redirect`).
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterable

import yarl

from gateway.errors import AttachmentRefused, AttachmentTooLarge, PlatformError
from gateway.messages import AttachmentRef

IMAGE, AUDIO, DOCUMENT = "image", "audio", "document"
#: Downloads a platform runs at once: a body is held whole until the turn stored it, so this
#: bounds what many users sending large files at the same moment cost (the others wait).
MAX_DOWNLOADS = 4


def kind_of(content_type: str) -> str:
    """``image`` for ``image/*``, ``audio`` for ``audio/*`` (voice messages too), else
    ``document``."""
    major = content_type.partition("/")[0].strip().lower()
    return IMAGE if major == "image" else AUDIO if major == "audio" else DOCUMENT


def too_large(ref: AttachmentRef, limit: int) -> AttachmentTooLarge:
    return AttachmentTooLarge(
        f"{ref.name} is larger than the attachment limit of {limit} bytes",
        name=ref.name,
        limit=limit,
    )


def refuse_declared(ref: AttachmentRef, limit: int, size: int | None = None) -> None:
    """Raise ``AttachmentTooLarge`` when ``ref`` (or ``size``, a size learnt since: a
    Content-Length, Telegram's getFile) is said to be over ``limit``, before fetching."""
    for declared in (ref.size, size):
        if declared is not None and declared > limit:
            raise too_large(ref, limit)


async def read_bounded(chunks: AsyncIterable[bytes], ref: AttachmentRef, *, limit: int) -> bytes:
    """The body ``chunks`` make, or ``AttachmentTooLarge`` as soon as it passes ``limit``
    (the caller closes the response, so the rest is never read).

    Gathered in a ``BytesIO``, whose ``getvalue`` hands over its buffer without a copy: the
    body is held once (joining a list of chunks would hold it twice at the end)."""
    body = io.BytesIO()
    async for chunk in chunks:
        if body.tell() + len(chunk) > limit:
            raise too_large(ref, limit)
        body.write(chunk)
    return body.getvalue()


def origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url`` (the default port left out, the host lowercased);
    "" for what is no absolute http(s) URL."""
    try:
        parsed = yarl.URL(url)
    except ValueError:
        return ""
    if parsed.scheme not in ("http", "https") or not parsed.host:
        return ""
    return str(parsed.origin())


def refuse_off_origin(ref: AttachmentRef, url: str, origins: frozenset[str], where: str) -> None:
    """Raise :class:`AttachmentRefused` unless ``url`` is on one of ``origins`` (security
    review 2026-12-05, L-4: a download goes only where the platform keeps files)."""
    found = origin(url)
    if found not in origins:
        raise AttachmentRefused(name=ref.name, why=f"{found or 'its address'} is not {where}")


def refuse_redirect(ref: AttachmentRef, status: int) -> None:
    """Downloads never follow a redirect (it could lead anywhere): a 3xx refuses the file."""
    if 300 <= status < 400:
        why = f"its file server answered with a redirect ({status}), which botmux does not follow"
        raise AttachmentRefused(name=ref.name, why=why)


def refetchable(error: PlatformError) -> PlatformError:
    """``error`` for a download: repeating a GET cannot duplicate anything, so a transient
    failure is retryable even when the request may have reached the platform."""
    return PlatformError(
        str(error),
        status=error.status,
        retry_after=error.retry_after,
        ambiguous=error.ambiguous,
        idempotent=True,
    )
