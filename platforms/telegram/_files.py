"""Fetching a Telegram attachment's bytes: ``getFile``, then its file URL, streamed.

PTB's own ``File.download_*`` reads the whole body into memory whatever its size, so the
download is our own stream, on the bot's transport's aiohttp session
(:meth:`~platforms.telegram._transport.BotApiRequest.download`: a kept-alive connection to the
Bot API's host, not a new client and connection per file), read through
:func:`platforms._attachments.read_bounded`: never more than the limit in memory. What
Telegram says of the size is used first: the message's ``file_size`` (checked by the
caller's ``refuse_declared`` before anything is asked), then getFile's, then the download's
Content-Length; Telegram refuses getFile for files over its 20 MiB bot limit with 400 "file
is too big", which is that same refusal.

The URL must be on the Bot API's origin (``api_base``: PTB builds it so, this checks it) and
a redirect is never followed: anything else is refused before any request, or at the 3xx
(:class:`~gateway.errors.AttachmentRefused`; the reply names the file).

Failures leave through the adapter's one table (``errors.translate``) and are marked
idempotent: a download repeated cannot duplicate anything, so ``policy.classify_send``
retries a 5xx, a 429 (with its retry-after) or a lost connection, and not a 4xx.
"""

from __future__ import annotations

from telegram import Bot
from telegram.error import BadRequest, Forbidden, TelegramError
from telegram.request import BaseRequest

from gateway.errors import PlatformError
from gateway.messages import AttachmentRef
from platforms._attachments import (
    origin,
    read_bounded,
    refetchable,
    refuse_declared,
    refuse_off_origin,
    refuse_redirect,
    too_large,
)
from platforms.telegram import errors
from platforms.telegram._transport import BotApiRequest
from platforms.telegram.convert import BOT_API_DOWNLOAD_LIMIT

CHUNK_BYTES = 64 * 1024


def _refused(status: int, payload: bytes) -> TelegramError:
    """The PTB exception a Bot API answer with this status stands for."""
    error = errors.answer_error(status, payload)  # 429 and 5xx
    if error is not None:
        return error
    text = payload[:200].decode("utf-8", "replace")
    if status in (401, 403):
        return Forbidden(f"file download refused ({status}): {text}")
    return BadRequest(f"file download refused ({status}): {text}")


async def fetch(bot: Bot, ref: AttachmentRef, *, limit: int, timeout_s: float) -> bytes:
    """The bytes of a Telegram file (``ref.source`` its file_id), within ``limit``."""
    refuse_declared(ref, limit)
    try:
        file = await bot.get_file(ref.source)
    except BadRequest as exc:
        if "file is too big" in str(exc).lower():
            raise too_large(ref, min(limit, BOT_API_DOWNLOAD_LIMIT)) from exc
        raise refetchable(errors.translate(exc)) from exc
    except TelegramError as exc:
        raise refetchable(errors.translate(exc)) from exc
    refuse_declared(ref, limit, file.file_size)
    url = file.file_path or ""
    if not url.startswith(("http://", "https://")):
        # A local Bot API server (--local) answers a path on its own disk: not supported.
        raise PlatformError(f"telegram gave no file URL for {ref.name}", status=400)
    refuse_off_origin(ref, url, frozenset({origin(bot.base_file_url)}), "the Bot API's origin")
    try:
        return await _download(bot.request, url, ref, limit=limit, timeout_s=timeout_s)
    except TelegramError as exc:
        raise refetchable(errors.translate(exc)) from exc


async def _download(
    request: BaseRequest, url: str, ref: AttachmentRef, *, limit: int, timeout_s: float
) -> bytes:
    if not isinstance(request, BotApiRequest):
        raise TypeError(f"telegram downloads need the bot on a BotApiRequest, not {request!r}")
    async with request.download(url, timeout_s) as response:
        refuse_redirect(ref, response.status)
        if response.status != 200:
            raise _refused(response.status, await response.content.read(4096))  # its start
        refuse_declared(ref, limit, response.content_length)
        return await read_bounded(response.content.iter_chunked(CHUNK_BYTES), ref, limit=limit)
