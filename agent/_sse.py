"""A streamed completion read off the openai client's response, one read at a time.

openai's ``AsyncStream`` hands each event up through four async generators of its own (its
``__aiter__``, ``__stream__``, ``_iter_events`` and the SSE decoder's ``aiter_bytes``) and
decodes it line by line; per chunk of a streamed turn that was the larger part of the agent's
CPU. Here the body's bytes (httpx2's ``aiter_bytes``, so a compressed body is still
decompressed) are split into events at blank lines and each event's ``data`` is
``json.loads``-ed; the events of one read come up together. The errors are the ones
openai's stream raises, so ``translate_openai_errors`` reads them as ever: a transport
failure is ``APIConnectionError`` (``APITimeoutError`` for a timeout), an event carrying an
``error`` is ``APIError``.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio

if TYPE_CHECKING:  # both loaded with the model client (agent.clients)
    import httpx2


async def batches(response: httpx2.Response) -> AsyncIterator[list[Any]]:
    """The decoded ``data`` of the events of each read, until ``[DONE]``; the rest of the
    body is read too (so the HTTP/1.1 connection is reused). The caller closes ``response``."""
    import httpx2
    import openai

    buffer = b""
    done = False
    try:
        async for data in response.aiter_bytes():
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
                events.append(_decoded(payload, response))
            if events:
                yield events
    except httpx2.TimeoutException as exc:
        raise openai.APITimeoutError(request=response.request) from exc
    except (httpx2.RequestError, ssl.SSLError, anyio.EndOfStream) as exc:
        raise openai.APIConnectionError(request=response.request) from exc


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


def _decoded(payload: bytes, response: httpx2.Response) -> Any:
    import openai

    data = json.loads(payload)
    if isinstance(data, dict) and data.get("error"):
        error = data["error"]
        message = error.get("message") if isinstance(error, dict) else None
        if not isinstance(message, str) or not message:
            message = "An error occurred during streaming"
        raise openai.APIError(message, response.request, body=error)
    return data
