"""Telegram's text rules for the fake Bot API: UTF-16 lengths, HTML parsing, parse modes.

Why apart: pure functions of a text, which the fake's handlers (sendMessage, editMessageText,
sendMessageDraft) share; ``telegram_server`` re-exports the public names.
"""

from __future__ import annotations

import re
from typing import Any

JSON = dict[str, Any]

MAX_TEXT_UTF16 = 4096
_HTML_TYPES = {
    "b": "bold", "strong": "bold", "i": "italic", "em": "italic", "u": "underline",
    "ins": "underline", "s": "strikethrough", "strike": "strikethrough", "del": "strikethrough",
    "tg-spoiler": "spoiler", "span": "spoiler", "a": "text_link", "code": "code", "pre": "pre",
    "blockquote": "blockquote",
}  # fmt: skip
_TAG_RE = re.compile(r"<(/?)([^\s<>/]*)([^<>]*)>")
_ATTR_RE = re.compile(r"""([A-Za-z-]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+)))?""")
_ENTITY_RE = re.compile(r"&(#\d+|#x[0-9A-Fa-f]+|lt|gt|amp|quot);")
_NAMED = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
_MDV2_RESERVED = re.compile(r"(?<!\\)([#+\-={}.!])")


class ApiError(Exception):
    """Raised by a method handler; becomes the ``{"ok": false, ...}`` answer."""

    def __init__(self, status: int, description: str, retry_after: int | None = None) -> None:
        super().__init__(description)
        self.status, self.description, self.retry_after = status, description, retry_after


def utf16_len(text: str) -> int:
    """Length as Telegram counts it (offsets, limits): UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def parse_html(text: str) -> tuple[str, list[JSON]]:
    """Telegram's HTML parse mode: the plain text and its entities, or ApiError(400)."""

    def fail(reason: str, pos: int | None = None) -> ApiError:
        where = "" if pos is None else f" at byte offset {len(text[:pos].encode())}"
        return ApiError(400, f"Bad Request: can't parse entities: {reason}{where}")

    out: list[str] = []
    out16, pos = 0, 0
    entities: list[JSON] = []
    stack: list[tuple[str, int, JSON]] = []  # open tag, its start offset, the entity's fields
    while pos < len(text):
        if text[pos] == "&" and (ent := _ENTITY_RE.match(text, pos)):
            name = ent.group(1)
            plain = _NAMED.get(name) or chr(int(name[2:], 16) if name[1] == "x" else int(name[1:]))
            out.append(plain)
            out16, pos = out16 + utf16_len(plain), ent.end()
            continue
        if text[pos] != "<":
            out.append(text[pos])
            out16, pos = out16 + utf16_len(text[pos]), pos + 1
            continue
        tag = _TAG_RE.match(text, pos)
        if tag is None:
            raise fail("Unclosed start tag", pos)
        name = tag.group(2).lower()
        if tag.group(1):
            if not stack:
                raise fail("Unexpected end tag", pos)
            open_name, start, fields = stack.pop()
            if name and name != open_name:
                raise fail(f'Unmatched end tag, expected "</{open_name}>", found "</{name}>"', pos)
            if out16 > start:  # Telegram drops empty entities
                entity = {**fields, "offset": start, "length": out16 - start}
                entities.append(_pre_code(entities, entity) if open_name == "pre" else entity)
        else:
            if name not in _HTML_TYPES:
                raise fail(f'Unsupported start tag "{name}"', pos)
            attrs = {m[0].lower(): m[1] or m[2] or m[3] for m in _ATTR_RE.findall(tag.group(3))}
            fields = {"type": _HTML_TYPES[name]}
            if name == "span" and attrs.get("class") != "tg-spoiler":
                raise fail('Tag "span" must have class "tg-spoiler"', pos)
            if name == "blockquote" and "expandable" in attrs:
                fields["type"] = "expandable_blockquote"
            if name == "a":
                fields["url"] = attrs.get("href", "")
            if name == "code" and (attrs.get("class") or "").startswith("language-"):
                fields["language"] = (attrs.get("class") or "")[len("language-") :]
            stack.append((name, out16, fields))
        pos = tag.end()
    if stack:
        raise fail(f'Can\'t find end tag corresponding to start tag "{stack[-1][0]}"')
    for entity in entities:
        if entity["type"] == "code":
            entity.pop("language", None)  # a class counts only on the code a pre holds
    entities.sort(key=lambda e: (e["offset"], -e["length"]))
    return "".join(out), entities


def _pre_code(entities: list[JSON], pre: JSON) -> JSON:
    """``<pre><code class="language-x">...</code></pre>``: one pre entity with its language,
    when the code (just closed) spans the whole pre, as the Bot API documents."""
    if entities and entities[-1]["type"] == "code" and "language" in entities[-1]:
        code = entities[-1]
        if (code["offset"], code["length"]) == (pre["offset"], pre["length"]):
            entities.pop()
            return {**pre, "language": code["language"]}
    return pre


def parse_text(text: str, parse_mode: object, entities: object) -> tuple[str, list[JSON]]:
    """What the user sees for a text and its formatting parameters, or ApiError(400)."""
    mode = str(parse_mode or "").lower()
    if mode == "html":
        return parse_html(text)
    if mode == "markdownv2" and (bad := _MDV2_RESERVED.search(text)):
        reason = f"Character '{bad.group(1)}' is reserved and must be escaped with the preceding"
        raise ApiError(400, f"Bad Request: can't parse entities: {reason} '\\'")
    if mode not in ("", "markdown", "markdownv2"):
        raise ApiError(400, "Bad Request: unsupported parse_mode")
    return text, list(entities) if isinstance(entities, list) else []


def checked_text(params: JSON) -> tuple[str, list[JSON]]:
    raw = params.get("text")
    if not isinstance(raw, str) or not raw.strip():
        raise ApiError(400, "Bad Request: message text is empty")
    text, entities = parse_text(raw, params.get("parse_mode"), params.get("entities"))
    if not text.strip():
        raise ApiError(400, "Bad Request: message text is empty")
    if utf16_len(text) > MAX_TEXT_UTF16:
        raise ApiError(400, "Bad Request: message is too long")
    return text, entities
