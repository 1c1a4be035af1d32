"""Fetching a Slack file's bytes (SPEC 9, 17): a GET of its ``url_private``, with the bot
token, streamed within the limit.

A Slack file is private: its URL answers only with ``Authorization: Bearer <bot token>``. So
the token goes only to where Slack keeps files, ``https://files.slack.com``, or to the
configured ``api_base``'s origin (a proxy in front of Slack, a loopback stand-in in tests);
a URL anywhere else is refused before any request (:class:`~gateway.errors.AttachmentRefused`,
the reply names the file), and a redirect is never followed (it could lead the token
anywhere). Slack states each file's size in the event: one over the limit is refused before
anything is fetched, and the body is still read through
:func:`platforms._attachments.read_bounded`, so never more than the limit is held.

Failures leave through the adapter's table (``errors.translate``, the answer made a
``SlackApiError`` as slack_sdk makes one) and are idempotent: repeating a GET cannot duplicate
anything, so ``policy.classify_send`` retries a 5xx, a 429 or a lost connection, and not a
4xx (a deleted file).
"""

from __future__ import annotations

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from gateway.errors import PlatformError
from gateway.messages import AttachmentRef
from platforms._attachments import (
    origin,
    read_bounded,
    refuse_declared,
    refuse_off_origin,
    refuse_redirect,
)
from platforms.slack.errors import TRANSLATED, translate

CHUNK_BYTES = 64 * 1024
#: Where Slack keeps files: the URLs in a message's ``files`` are on it, over https.
FILE_HOST = "https://files.slack.com"
TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=30.0, sock_read=30.0)


def file_origins(api_base: str) -> frozenset[str]:
    """Where files are fetched from with the token: Slack's file host and ``api_base``'s
    origin."""
    return frozenset({FILE_HOST, origin(api_base)})


async def _refusal(response: aiohttp.ClientResponse, client: object) -> PlatformError:
    """An answer that is not 200, as the table translates slack_sdk's own exceptions."""
    text = (await response.content.read(4096)).decode("utf-8", "replace")
    answer = AsyncSlackResponse(
        client=client,
        http_verb="GET",
        api_url=str(response.url),
        req_args={},
        data={"ok": False, "error": f"http_{response.status}", "body": text[:200]},
        headers=dict(response.headers),
        status_code=response.status,
    )
    refused = SlackApiError("file download refused", answer)  # type: ignore[no-untyped-call]
    return translate(refused, idempotent=True)


async def fetch(
    session: aiohttp.ClientSession,
    ref: AttachmentRef,
    *,
    token: str,
    limit: int,
    origins: frozenset[str],
) -> bytes:
    """The bytes at ``ref.source`` (the file's private URL), within ``limit``; only from
    ``origins`` (:func:`file_origins`), never following a redirect."""
    refuse_declared(ref, limit)
    refuse_off_origin(ref, ref.source, origins, "Slack's file host")
    headers = {"Authorization": f"Bearer {token}"}
    try:
        async with session.get(
            ref.source, headers=headers, timeout=TIMEOUT, allow_redirects=False
        ) as response:
            refuse_redirect(ref, response.status)
            if response.status != 200:
                raise await _refusal(response, None)
            refuse_declared(ref, limit, response.content_length)
            return await read_bounded(response.content.iter_chunked(CHUNK_BYTES), ref, limit=limit)
    except TRANSLATED as exc:
        raise translate(exc, idempotent=True) from exc
