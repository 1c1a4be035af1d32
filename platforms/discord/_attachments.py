"""Fetching a Discord attachment's bytes: a GET of its URL, streamed within the limit.

Only from where Discord keeps attachments (its CDN, over https) or the configured
``api_base``'s origin, and never following a redirect: anything else is refused before any
request (:class:`~gateway.errors.AttachmentRefused`; the reply names the file). Discord
writes attachment URLs itself, so this is defence in depth (security review 2026-12-05, L-4).

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
from platforms._attachments import (
    MAX_DOWNLOADS,
    origin,
    read_bounded,
    refuse_declared,
    refuse_off_origin,
    refuse_redirect,
)
from platforms.discord.errors import TRANSLATED, translate

CHUNK_BYTES = 64 * 1024
#: Where Discord keeps attachments: the URLs it writes in a message are on these, over https.
CDN_ORIGINS = frozenset({"https://cdn.discordapp.com", "https://media.discordapp.net"})
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


def file_origins(api_base: str) -> frozenset[str]:
    """Where attachments are fetched from: Discord's CDN, and ``api_base``'s origin (a proxy
    in front of Discord, or a loopback stand-in in tests)."""
    return CDN_ORIGINS | {origin(api_base)}


async def fetch(
    session: aiohttp.ClientSession, ref: AttachmentRef, *, limit: int, origins: frozenset[str]
) -> bytes:
    """The bytes at ``ref.source`` (the attachment URL), within ``limit``, on ``session``;
    only from ``origins`` (:func:`file_origins`), never following a redirect."""
    refuse_declared(ref, limit)
    refuse_off_origin(ref, ref.source, origins, "one of Discord's file servers")
    try:
        async with session.get(ref.source, timeout=TIMEOUT, allow_redirects=False) as response:
            refuse_redirect(ref, response.status)
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
    _file_origins: frozenset[str] = CDN_ORIGINS  # and, once told, api_base's (fetch_from)

    def fetch_from(self, api_base: str) -> None:
        """Take attachments from ``api_base``'s origin too, besides Discord's CDN."""
        self._file_origins = file_origins(api_base)

    async def fetch(self, ref: AttachmentRef, *, limit: int) -> bytes:
        if self._downloads is None:
            self._downloads = anyio.CapacityLimiter(MAX_DOWNLOADS)
        async with self._downloads:
            if self._cdn is None or self._cdn.closed:
                self._cdn = aiohttp.ClientSession()
            return await fetch(self._cdn, ref, limit=limit, origins=self._file_origins)

    async def close_downloads(self) -> None:
        if self._cdn is not None:
            cdn, self._cdn = self._cdn, None
            await cdn.close()
