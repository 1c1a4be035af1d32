"""A ``tools/call`` result as the model is given it (SPEC 15): a :class:`ToolOutcome`.

Read off the result as the server sent it (a JSON object), like the listing
(``agent.tools.specs``): text blocks joined; images kept as data URLs for vision models
(section 9's ``DataUrl``: the server's base64 is used as it came, only checked);
``structuredContent`` as JSON text when no block is text; ``isError`` as ``is_error``. Other
blocks (audio, resource links, binary resources) are named, not inlined.

The text is not cut to the turn's ``max_tool_result_chars`` here (the tool loop does that,
with its note); only past :data:`MAX_TEXT` characters, a bound on what one call may hold in
memory however much a server sends.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pybase64

from gateway.messages import DataUrl, Image, ToolOutcome

MAX_TEXT = 1 << 20  # characters of text one result keeps
MAX_IMAGES = 8
_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


class MalformedReply(ValueError):
    """The reply is no ``CallToolResult``: what is wrong with it (for the model and the log)."""


def tool_outcome(result: object) -> ToolOutcome:
    """The model's view of ``result`` (the JSON-RPC ``result`` of a ``tools/call``); raises
    :class:`MalformedReply` for a reply that is no result."""
    if not isinstance(result, Mapping):
        raise MalformedReply("the result is not a JSON object")
    content = result.get("content", [])
    if not isinstance(content, list):
        raise MalformedReply("its content is not a list")
    is_error = result.get("isError") is True
    texts: list[str] = []
    images: list[Image] = []
    room = MAX_TEXT
    cut = False
    for block in content:
        piece = _block(block, images)
        if len(piece) > room:
            cut, piece = True, piece[:room]
        if piece:
            texts.append(piece)
            room -= len(piece)
    structured = result.get("structuredContent")
    if not texts and structured is not None:
        dumped = json.dumps(structured, ensure_ascii=False)
        texts.append(dumped[:MAX_TEXT])
        cut = len(dumped) > MAX_TEXT
    text = "\n".join(texts)
    if cut:
        text += f"\n[cut: the tool returned more than {MAX_TEXT} characters]"
    return ToolOutcome(text=text, is_error=is_error, images=tuple(images))


def _block(block: Any, images: list[Image]) -> str:
    """One content block: its text, or a note; an image is added to ``images``."""
    if not isinstance(block, Mapping):
        raise MalformedReply("a content block is not a JSON object")
    kind = block.get("type")
    if kind == "text":
        text = block.get("text")
        if not isinstance(text, str):
            raise MalformedReply("a text block has no text")
        return text
    if kind == "image":
        data, mime = block.get("data"), block.get("mimeType")
        if not isinstance(data, str) or not isinstance(mime, str):
            raise MalformedReply("an image block has no data or mimeType")
        if mime not in _IMAGE_TYPES:
            return f"[an image of type {mime[:40]}: not shown]"
        if len(images) >= MAX_IMAGES:
            return "[an image: not shown, too many in one result]"
        if not _base64(data):  # the model's provider would refuse the whole request
            return "[an image whose data is not base64: not shown]"
        images.append(DataUrl(mime, data.encode("ascii")))
        return ""
    if kind == "resource":
        resource = block.get("resource")
        inlined = resource.get("text") if isinstance(resource, Mapping) else None
        if isinstance(inlined, str):
            return inlined
        return f"[a binary resource: {_uri(resource)}]"
    if kind == "resource_link":
        return f"[a resource: {_uri(block)}]"
    if kind == "audio":
        return "[an audio clip: not shown]"
    return f"[a content block of type {str(kind)[:40]}: not shown]"


def _base64(data: str) -> bool:
    """Whether ``data`` is base64 (pybase64, SIMD: a few MB checked in a millisecond)."""
    if not data or not data.isascii():
        return False
    try:
        pybase64.b64decode(data, validate=True)
    except ValueError:
        return False
    return True


def _uri(thing: object) -> str:
    uri = thing.get("uri") if isinstance(thing, Mapping) else None
    return uri[:500] if isinstance(uri, str) else "no uri"
