"""A model request's body as JSON bytes, its images' data URLs spliced in unescaped.

An image travels as a data URL in an ``image_url`` part: 27 MB of base64 for a 20 MiB
image. ``json.dumps`` scans and copies every character of it, ~95 ms for that image on the
benchmark machine, on the event loop, while every other conversation waits. Base64 needs no
escaping, so each :class:`~gateway.messages.DataUrl` of at least ``SPLICE_MIN`` characters
goes through the encoder as a placeholder, and its bytes are joined in after. Should another
string of the body be the placeholder itself (a user can type anything), the body is encoded
the plain way: the result is the same bytes either way.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.messages import DataUrl

SPLICE_MIN = 64 * 1024
PLACEHOLDER = "\x00botmux:data-url\x00"
_ENCODED = json.dumps(PLACEHOLDER).encode()  # with its quotes, as it appears in the body


def dumps(body: Any) -> bytes:
    """``body`` as compact JSON, UTF-8 (what ``json.dumps(body, ensure_ascii=False,
    separators=(",", ":")).encode()`` gives)."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def encode(body: dict[str, Any]) -> bytes:
    """``body`` as :func:`dumps` encodes it, the large data URLs spliced in."""
    messages = body.get("messages")
    urls: list[DataUrl] = []
    swapped = [_swap(m, urls) for m in messages] if isinstance(messages, list) else []
    if not urls:
        return dumps(body)
    data = dumps({**body, "messages": swapped})
    pieces = data.split(_ENCODED)
    if len(pieces) != len(urls) + 1:  # the placeholder's text is in the body itself
        return dumps(body)
    out: list[bytes | memoryview] = [pieces[0]]
    for url, after in zip(urls, pieces[1:], strict=True):
        out.extend(_quoted(url))
        out.append(after)
    return b"".join(out)


def _swap(message: Any, urls: list[DataUrl]) -> Any:
    """``message`` with its large data URLs replaced by the placeholder (a copy), each
    appended to ``urls`` in the order the encoder meets them; else ``message`` itself."""
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return message
    parts = [_swap_part(part, urls) for part in content]
    if all(new is old for new, old in zip(parts, content, strict=True)):
        return message
    return {**message, "content": parts}


def _swap_part(part: Any, urls: list[DataUrl]) -> Any:
    image = part.get("image_url") if isinstance(part, dict) else None
    if not isinstance(image, dict):
        return part
    url = image.get("url")
    # isascii is a flag of the string, not a scan: base64 always is.
    if not isinstance(url, DataUrl) or len(url) < SPLICE_MIN or not url.isascii():
        return part
    urls.append(url)
    return {**part, "image_url": {**image, "url": PLACEHOLDER}}


def _quoted(url: DataUrl) -> list[bytes | memoryview]:
    """The JSON string of ``url``: the head (``data:<type>;base64,``) escaped as the encoder
    would, the base64 after its last comma as it is."""
    raw = url.encode("ascii")
    comma = raw.rfind(b",") + 1
    head = json.dumps(url[:comma], ensure_ascii=False)[:-1].encode()  # its opening quote
    return [head, memoryview(raw)[comma:], b'"']
