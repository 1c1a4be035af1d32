"""Fetching a Discord attachment's bytes: a GET of its URL, streamed within the limit.

Discord states every attachment's size in the message, so one over the limit is refused
before anything is fetched; the body is still read through
:func:`platforms._attachments.read_bounded` (a Content-Length or a body longer than stated
stops the read), so never more than the limit is held in memory. discord.py's own
``Attachment.read`` reads the whole body at once: the GET is ours, on aiohttp (discord.py's
transport), with no bot token (attachment URLs are signed CDN links, and the token must not
leave for another host). The adapter's downloads share one session of their own
(:class:`Fetching`), so one after another reuse a kept-alive connection to the CDN instead of
opening (and TLS-handshaking) one each.

Failures leave through the adapter's one table (``errors.translate``, the answer made a
``discord.HTTPException`` as discord.py makes it) and are idempotent: repeating a GET cannot
duplicate anything, so ``policy.classify_send`` retries a 5xx, a 429 or a lost connection,
and not a 4xx (an expired link, a deleted attachment).
"""

from __future__ import annotations

import aiohttp
import anyio
import discord

from gateway.errors import PlatformError
from gateway.messages import AttachmentRef
from platforms._attachments import MAX_DOWNLOADS, read_bounded, refuse_declared
from platforms.discord.errors import TRANSLATED, translate

CHUNK_BYTES = 64 * 1024
TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=30.0, sock_read=30.0)


def _retry_after(response: aiohttp.ClientResponse) -> float | None:
    value = response.headers.get("Retry-After", "")
    try:
        return max(float(value), 0.0)
    except ValueError:
        return None


async def _refusal(response: aiohttp.ClientResponse) -> PlatformError:
    """An answer that is not 200, as the table translates discord.py's own exceptions."""
    text = (await response.content.read(4096)).decode("utf-8", "replace")
    status = response.status
    exc: discord.HTTPException
    if status >= 500:
        exc = discord.DiscordServerError(response, text)
    elif status == 404:
        exc = discord.NotFound(response, text)
    elif status == 403:
        exc = discord.Forbidden(response, text)
    else:
        exc = discord.HTTPException(response, text)
    error = translate(exc, idempotent=True)
    if status == 429:
        return PlatformError(str(error), status=429, retry_after=_retry_after(response))
    return error


async def fetch(session: aiohttp.ClientSession, ref: AttachmentRef, *, limit: int) -> bytes:
    """The bytes at ``ref.source`` (the attachment URL), within ``limit``, on ``session``."""
    refuse_declared(ref, limit)
    try:
        async with session.get(ref.source, timeout=TIMEOUT) as response:
            if response.status != 200:
                raise await _refusal(response)
            refuse_declared(ref, limit, response.content_length)
            return await read_bounded(response.content.iter_chunked(CHUNK_BYTES), ref, limit=limit)
    except TRANSLATED as exc:
        raise translate(exc, idempotent=True) from exc


class Fetching:
    """The outlet's ``fetch`` for :class:`~platforms.discord.adapter.DiscordAdapter` (a
    mixin: the adapter's module is at its size limit), ``MAX_DOWNLOADS`` at a time, on one
    session made at the first download (a session belongs to the running loop) and closed by
    :meth:`close_downloads` when the adapter stops."""

    _downloads: anyio.CapacityLimiter | None = None
    _cdn: aiohttp.ClientSession | None = None

    async def fetch(self, ref: AttachmentRef, *, limit: int) -> bytes:
        if self._downloads is None:
            self._downloads = anyio.CapacityLimiter(MAX_DOWNLOADS)
        async with self._downloads:
            if self._cdn is None or self._cdn.closed:
                self._cdn = aiohttp.ClientSession()
            return await fetch(self._cdn, ref, limit=limit)

    async def close_downloads(self) -> None:
        if self._cdn is not None:
            cdn, self._cdn = self._cdn, None
            await cdn.close()
