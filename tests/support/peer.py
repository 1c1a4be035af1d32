"""The peer API as a test's client speaks it: a message to a session and its answer's text."""

from __future__ import annotations

from typing import Any

import aiohttp


async def chat(http: aiohttp.ClientSession, url: str, session: str, text: str) -> str:
    """``POST /api/sessions/{session}/chat`` with ``text``: the answer's content (200 only)."""
    async with http.post(f"{url}/api/sessions/{session}/chat", json={"message": text}) as r:
        assert r.status == 200, await r.text()
        body: dict[str, Any] = await r.json()
    return str(body["message"]["content"])
