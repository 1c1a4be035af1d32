"""A model request's body as JSON bytes, the images the gateway encoded spliced in as they are.

An image travels as a data URL in an ``image_url`` part: 27 MB of base64 for a 20 MiB
image. Passed to ``json.dumps`` as a string, it is scanned and copied character by character
(~95 ms for that image on the benchmark machine, on the event loop, while every other
conversation waits), and making it a string at all took a decode and copies before that.
The gateway keeps such an image as a :class:`~gateway.messages.DataUrl` (the base64 as
bytes), which the encoder cannot encode: its ``default`` hook puts a placeholder string in
its place, and the URL's bytes are joined in after, unescaped (base64 needs no escaping).
Should a string of the body be the placeholder itself (a user can type anything), another
placeholder is taken. The bytes are what ``json.dumps`` makes of the body with each
``DataUrl`` as its text.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from gateway.messages import DataUrl

PLACEHOLDER = "\x00botmux:data-url\x00"


def dumps(body: Any, default: Any = None) -> bytes:
    """``body`` as compact JSON, UTF-8; ``default`` as ``json.dumps`` takes it."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), default=default).encode()


def encode(body: dict[str, Any]) -> bytes:
    """``body`` as JSON bytes, each :class:`DataUrl` in it spliced in as its URL."""
    placeholder = PLACEHOLDER
    while True:
        data, found = _with_stand_ins(body, placeholder)
        if not found:
            return data
        pieces = data.split(json.dumps(placeholder).encode())  # with its quotes: whole strings
        if len(pieces) == len(found) + 1:
            break
        placeholder = f"\x00botmux:data-url:{secrets.token_hex(8)}\x00"  # typed by someone
    out: list[bytes] = [pieces[0]]
    for url, after in zip(found, pieces[1:], strict=True):
        head = json.dumps(f"data:{url.content_type};base64,", ensure_ascii=False)[:-1]
        out += (head.encode(), url.payload, b'"', after)
    return b"".join(out)


def _with_stand_ins(body: dict[str, Any], placeholder: str) -> tuple[bytes, list[DataUrl]]:
    """``body`` encoded with ``placeholder`` for each :class:`DataUrl`, and those, in the
    order they appear."""
    found: list[DataUrl] = []

    def stand_in(value: object) -> str:
        if not isinstance(value, DataUrl):
            raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
        found.append(value)
        return placeholder

    return dumps(body, stand_in), found
