"""Server-sent events as a client reads them off an aiohttp response: the peer API's streamed
chat and the OpenAI-compatible stream (SPEC 5, 8)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp


async def sse_events(response: aiohttp.ClientResponse) -> AsyncIterator[tuple[str, Any]]:
    """(event name, data) of each server-sent event; comments are skipped."""
    name, data = "message", ""
    async for raw in response.content:
        line = raw.decode().rstrip("\r\n")
        if line.startswith(":"):
            continue
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data = line[6:]
        elif not line and data:
            yield name, (data if data == "[DONE]" else json.loads(data))
            name, data = "message", ""
