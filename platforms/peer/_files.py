"""The peer API's files (SPEC 9): ``GET /api/sessions/{id}/attachments/{sha256}``, a stored
attachment's bytes with their content type, behind the same auth and session scope as the
transcript (a file of another conversation, or another token's, is not found through this
one); and how a large request body is read.

A body carrying files inline is tens of MB: read into one buffer (aiohttp's ``read()`` would
keep a second copy on the request for its whole life, while the client waits for its turn),
parsed from it, and freed once its files are decoded; at most ``LARGE_AT_ONCE`` such bodies
are read and decoded at a time, so concurrent uploads do not multiply the gateway's memory.
"""

from __future__ import annotations

import re
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any

import anyio
from aiohttp import web

from gateway.ports import Transcripts
from platforms.peer.attachments import is_mime_type
from platforms.peer.convert import parse_json
from platforms.peer.errors import json_error

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
LARGE = 1 << 20  # a body past this (or of unknown length) is read under the limiter
LARGE_AT_ONCE = 1


class BodyReader:
    """Reads JSON request bodies, the large ones a few at a time (one per peer adapter)."""

    def __init__(self, max_bytes: int) -> None:
        self._max = max_bytes
        self._large = anyio.CapacityLimiter(LARGE_AT_ONCE)

    def __repr__(self) -> str:
        return f"<BodyReader reading_large={self._large.borrowed_tokens}>"

    def turn(self, request: web.Request) -> AbstractAsyncContextManager[Any]:
        """Hold while reading, parsing and decoding ``request``'s body (a large one waits)."""
        length = request.content_length
        return self._large if length is None or length > LARGE else nullcontext()

    async def json(self, request: web.Request) -> Any:
        """The body as JSON; 413 past ``max_bytes``, 400 when it is not JSON."""
        body = bytearray()
        while chunk := await request.content.readany():
            body += chunk
            if len(body) > self._max:
                raise web.HTTPRequestEntityTooLarge(max_size=self._max, actual_size=len(body))
        try:  # the text alone while it is parsed: the buffer goes first
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            return parse_json(body)  # json finds another encoding, or says why not
        body = bytearray()
        return parse_json(text)


async def attachment_response(
    transcripts: Transcripts, conversation: str, sha256: str
) -> web.Response:
    if not _SHA256.fullmatch(sha256):
        return json_error(
            400, "the attachment id must be a sha256 in lower-case hex", "bad_request"
        )
    found = await transcripts.attachment(conversation, sha256)
    if found is None:
        return json_error(404, "no such attachment in this session", "not_found")
    content_type, data = found
    return web.Response(
        body=data,
        headers={
            # One stored before types were checked may be no header at all: served as bytes.
            "Content-Type": content_type
            if is_mime_type(content_type) and content_type
            else "application/octet-stream",
            "Content-Disposition": "attachment",
            "X-Content-Type-Options": "nosniff",
            "Cache-Control": "private, max-age=31536000, immutable",
        },
    )
