"""A streamed completion's events, decoded from the body's bytes as they arrive.

openai's ``AsyncStream`` hands each event up through four async generators of its own and
decodes it line by line; per chunk of a streamed turn that was the larger part of the agent's
CPU. Here the body's reads (aiohttp's ``readany``, called directly: each layer of async
iteration between it and the agent costs per chunk) are split into events at blank lines and
each event's ``data`` is decoded as JSON; the events of one read come up together. An event
carrying an ``error`` raises the :class:`~gateway.errors.ProviderError` that
``translate_openai_errors`` made of openai's ``APIError`` for it; transport failures are the
reader's to raise (:mod:`agent._wire` maps them around the whole stream).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from gateway.errors import ProviderError


async def batches(
    read: Callable[[], Awaitable[bytes]], model: str = ""
) -> AsyncIterator[list[Any]]:
    """The decoded ``data`` of the events of each ``read`` (empty at the body's end), until
    ``[DONE]``; the rest of the body is read too (so the HTTP/1.1 connection is reused)."""
    buffer = b""
    done = False
    while data := await read():
        if done:
            continue
        buffer += data
        # ``find``, not ``in``: bytes' ``in`` first tries its operand as an int and formats
        # the TypeError it then drops (6% of the stream reader's instructions, callgrind).
        if buffer.find(b"\r") >= 0:  # CRLF or CR line ends; a last CR may be half a CRLF
            tail = b"\r" if buffer.endswith(b"\r") else b""
            buffer = buffer[: len(buffer) - len(tail)]
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n") + tail
        if buffer.find(b"\n\n") < 0:
            continue  # no event ends in this read yet
        *blocks, buffer = buffer.split(b"\n\n")
        events: list[Any] = []
        for block in blocks:
            if block.startswith(b"data: ") and block.find(b"\n") < 0:
                payload = block[6:]  # a provider's every event: one data line
            else:
                found = _data(block)
                if found is None:
                    continue
                payload = found
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


#: ``raw_decode`` and a check for what follows: ``json.loads`` of the bytes (its encoding
#: sniffed, its two whitespace matches) was twice the cost, a chunk's largest part here.
_DECODER = json.JSONDecoder()
_SPACE = " \t\n\r"


def _decoded(payload: bytes, model: str) -> Any:
    try:
        text = payload.decode()  # SSE is UTF-8 (a bad byte is a ValueError too)
        start = len(text) - len(text.lstrip(_SPACE)) if text[:1] in _SPACE else 0
        data, end = _DECODER.raw_decode(text, start)
        if end != len(text) and text[end:].strip(_SPACE):
            raise ValueError(f"Extra data: char {end}")
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
