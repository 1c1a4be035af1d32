"""The peer API's attachments (SPEC 9), pure: request JSON in, references and bytes out.

The chat route's ``"attachments": [{"name", "content_type", "data": "<base64>"}]`` and the
user content parts of ``/v1/chat/completions`` (``image_url`` with a data URL or an https URL,
``input_audio``) become :class:`~gateway.messages.AttachmentRef` values; inline bytes are
decoded here, hashed, and stored by admission with the row (so a peer attachment is never
fetched). An ``https`` image URL is kept as the reference's ``source`` and handed to the model
as it is: botmux never fetches it. Bad data is 400 (a ``content_type`` that is no MIME type
too), a file over ``max_attachment_bytes`` 413, both before anything is stored.
"""

from __future__ import annotations

import binascii
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from pybase64 import b64decode

from gateway.messages import AttachmentRef
from platforms.peer.convert import BadRequest

# The patterns of the OpenAPI document (``_schemas``): what they call valid is taken, and
# nothing else.
B64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
DATA_URL_PATTERN = (
    r"^data:(image/[A-Za-z0-9.+-]+);base64,((?:[A-Za-z0-9+/]{4})*"
    r"(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?)$"
)
HTTPS_PATTERN = r"^https://[^\x00-\x20]+$"  # no control character, no space
# A MIME type (RFC 6838 names, RFC 9110 parameters: token=token or a quoted string), or
# nothing; at most MAX_CONTENT_TYPE characters. Anything else could never be served back as
# a Content-Type header (security review 2026-12-05, L-6: a CR/LF in it dropped downloads).
_MIME_NAME = r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_QUOTED = r'"(?:[\t !#-\[\]-~]|\\[\t -~])*"'
MIME_PATTERN = rf"^(?:{_MIME_NAME}/{_MIME_NAME}(?:[ \t]*;[ \t]*{_TOKEN}=(?:{_TOKEN}|{_QUOTED}))*)?$"
MAX_CONTENT_TYPE = 255
# Checked without a regex over the data: ``re`` keeps state per repetition of a group, which
# for 27 MB of base64 was most of a gigabyte. ``b64decode(validate=True)`` (strict mode)
# refuses what B64_PATTERN refuses: characters outside the alphabet, bad or extra padding.
_DATA_URL_HEAD = re.compile(r"data:(image/[A-Za-z0-9.+-]+);base64,")
_HTTPS = re.compile(HTTPS_PATTERN)
_MIME = re.compile(MIME_PATTERN)
_AUDIO_TYPES = {"wav": "audio/wav", "mp3": "audio/mpeg"}


def kind_of(content_type: str) -> str:
    """``image``, ``audio`` or ``document``, from the MIME type."""
    major = content_type.partition("/")[0].lower()
    return major if major in ("image", "audio") else "document"


@dataclass(slots=True)
class Files:
    """What a request carries: the references, in order, and the inline bytes by sha256."""

    max_bytes: int
    refs: list[AttachmentRef] = field(default_factory=list)
    blobs: dict[str, bytes] = field(default_factory=dict, repr=False)

    def add(self, kind: str, name: str, content_type: str, encoded: str) -> None:
        # The decoded size is known before decoding: refuse a file past the limit unread.
        if len(encoded) // 4 * 3 - 2 > self.max_bytes:
            raise _too_large(name, self.max_bytes)
        try:
            # pybase64: 2.5 ms for 20 MiB where the standard library's takes 75-130, on the loop.
            data = b64decode(encoded, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise BadRequest(
                f"the data of {name!r} is not valid base64", code="bad_attachment"
            ) from exc
        if len(data) > self.max_bytes:
            raise _too_large(name, self.max_bytes)
        sha = hashlib.sha256(data).hexdigest()
        self.blobs[sha] = data
        self.refs.append(AttachmentRef(kind, name, content_type, len(data), "", sha))

    def link(self, url: str) -> None:
        name = url.rsplit("/", 1)[-1].split("?", 1)[0][:200] or "image"
        self.refs.append(AttachmentRef("image", name, "", None, url))


def _too_large(name: str, limit: int) -> BadRequest:
    return BadRequest(
        f"{name!r} is larger than max_attachment_bytes ({limit} bytes)",
        status=413,
        code="attachment_too_large",
    )


def _string(value: Any, what: str, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not empty and not value.strip()) or "\x00" in value:
        raise BadRequest(f"{what} must be a non-empty string", code="bad_attachment")
    return value


def is_mime_type(value: str) -> bool:
    """A well-formed MIME type (or "": none said), within MAX_CONTENT_TYPE characters."""
    return len(value) <= MAX_CONTENT_TYPE and _MIME.fullmatch(value) is not None


def _content_type(value: Any, what: str) -> str:
    if not isinstance(value, str) or not is_mime_type(value):
        raise BadRequest(
            f"{what} must be a MIME type: type/subtype with optional ;name=value parameters"
            f" (RFC 6838), at most {MAX_CONTENT_TYPE} characters",
            code="bad_attachment",
            param=what,
        )
    return value


def chat_attachments(value: Any, max_bytes: int) -> Files:
    """The chat route's ``attachments`` list."""
    files = Files(max_bytes)
    if value is None:
        return files
    if not isinstance(value, list):
        raise BadRequest('"attachments" must be a list', code="bad_attachment")
    for i, item in enumerate(value):
        what = f"attachments[{i}]"
        if not isinstance(item, dict) or set(item) - {"name", "content_type", "data"}:
            raise BadRequest(
                f"{what} must be an object of name, content_type and data", code="bad_attachment"
            )
        name = _string(item.get("name"), f"{what}.name")[:255]
        content_type = _content_type(item.get("content_type", ""), f"{what}.content_type")
        # Taken out of the request (not copied): the text is freed once decoded.
        data = _string(item.pop("data", None), f"{what}.data")
        files.add(kind_of(content_type), name, content_type.lower(), data)
    return files


def content_parts(content: list[Any], max_bytes: int) -> tuple[str, Files]:
    """A completion's user message given as parts: its text, and its images and audio."""
    texts: list[str] = []
    files = Files(max_bytes)
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            texts.append(_string(part.get("text"), "a text content part's 'text'", empty=True))
        elif kind == "image_url":
            image = part.get("image_url")
            url = image.pop("url", None) if isinstance(image, dict) else None
            url = _string(url, "an image_url part's 'image_url.url'")
            if _HTTPS.fullmatch(url):
                files.link(url)
                continue
            found = _DATA_URL_HEAD.match(url)
            if found is None:
                raise BadRequest(
                    "an image_url must be a base64 data: URL or an https:// URL",
                    code="bad_attachment",
                )
            content_type = found.group(1).lower()
            subtype = content_type.partition("/")[2]
            files.add("image", f"image-{i + 1}.{subtype}", content_type, url[found.end() :])
        elif kind == "input_audio":
            audio = part.get("input_audio")
            if not isinstance(audio, dict):
                raise BadRequest("an input_audio part needs 'input_audio'", code="bad_attachment")
            form = audio.get("format")
            if not isinstance(form, str) or form not in _AUDIO_TYPES:
                raise BadRequest("input_audio.format must be wav or mp3", code="bad_attachment")
            data = _string(audio.pop("data", None), "input_audio.data")
            files.add("audio", f"audio-{i + 1}.{form}", _AUDIO_TYPES[form], data)
        else:
            raise BadRequest(
                "content parts must be text, image_url or input_audio", code="bad_attachment"
            )
    return "\n".join(texts), files
