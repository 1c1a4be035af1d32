"""A streamed completion's events, decoded from the body's bytes as they arrive.

openai's ``AsyncStream`` hands each event up through four async generators of its own and
decodes it line by line; per chunk of a streamed turn that was the larger part of the agent's
CPU. Here the body's reads (from :mod:`agent._wire`, aiohttp's own) are split into events at
blank lines and each event's ``data`` is ``json.loads``-ed; the events of one read come up
together. An event carrying an ``error`` raises the :class:`~gateway.errors.ProviderError`
that ``translate_openai_errors`` made of openai's ``APIError`` for it; transport failures are
the reader's to raise.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from gateway.errors import ProviderError


async def batches(reads: AsyncIterator[bytes], model: str = "") -> AsyncIterator[list[Any]]:
    """The decoded ``data`` of the events of each read, until ``[DONE]``; the rest of the
    body is read too (so the HTTP/1.1 connection is reused)."""
    buffer = b""
    done = False
    async for data in reads:
        if done:
            continue
        buffer += data
        if b"\r" in buffer:  # CRLF or CR line ends; a last CR may be half a CRLF
            tail = b"\r" if buffer.endswith(b"\r") else b""
            buffer = buffer[: len(buffer) - len(tail)]
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n") + tail
        *blocks, buffer = buffer.split(b"\n\n")
        events: list[Any] = []
        for block in blocks:
            payload = _data(block)
            if payload is None:
                continue
            if payload.startswith(b"[DONE]"):
                done = True
                break
            events.append(_decoded(payload, model))
        if events:
            yield events


def _data(block: bytes) -> bytes | None:
    """An event's ``data`` (its data lines joined by newlines), None if it has none."""
    found: list[bytes] | None = None
    for line in block.split(b"\n"):
        if line.startswith(b"data"):
            field, colon, value = line.partition(b":")
            if field != b"data":
                continue
            if colon and value.startswith(b" "):
                value = value[1:]
            found = [value] if found is None else [*found, value]
    return None if found is None else b"\n".join(found)


def _decoded(payload: bytes, model: str) -> Any:
    try:
        data = json.loads(payload)
    except ValueError as exc:
        raise ProviderError(f"invalid stream event: {exc}"[:500], status=200, model=model) from exc
    if isinstance(data, dict) and data.get("error"):
        error = data["error"]
        message = error.get("message") if isinstance(error, dict) else None
        if not isinstance(message, str) or not message:
            message = "An error occurred during streaming"
        # As translate_openai_errors read openai's APIError for such an event.
        raise ProviderError(f"APIError: {message}"[:500], model=model)
    return data
