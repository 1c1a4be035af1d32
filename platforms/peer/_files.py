"""``GET /api/sessions/{id}/attachments/{sha256}`` (SPEC 9): a stored attachment's bytes with
their content type, behind the same auth and session scope as the transcript; a file of
another conversation (or another token's) is not found through this one."""

from __future__ import annotations

import re

from aiohttp import web

from gateway.ports import Intake
from platforms.peer.errors import json_error

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


async def attachment_response(intake: Intake, conversation: str, sha256: str) -> web.Response:
    if not _SHA256.fullmatch(sha256):
        return json_error(
            400, "the attachment id must be a sha256 in lower-case hex", "bad_request"
        )
    found = await intake.attachment(conversation, sha256)
    if found is None:
        return json_error(404, "no such attachment in this session", "not_found")
    content_type, data = found
    return web.Response(
        body=data,
        headers={
            "Content-Type": content_type or "application/octet-stream",
            "Content-Disposition": "attachment",
            "X-Content-Type-Options": "nosniff",
            "Cache-Control": "private, max-age=31536000, immutable",
        },
    )
