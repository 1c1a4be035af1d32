"""The fake Discord's CDN: attachment URLs on the same loopback server, and their payloads.

``dc.cdn.attachment(data, filename=, content_type=)`` keeps the bytes at
``/attachments/<id>/<filename>`` and gives the attachment object as MESSAGE_CREATE carries it
(``id``, ``filename``, ``size``, ``url``, ``proxy_url``, ``content_type``); pass a list of
them to ``inject_message(..., attachments=[...])``. ``voice_message(ogg)`` is Discord's shape
of a voice message (its ``duration_secs`` and ``waveform``; the message gets the
IS_VOICE_MESSAGE flag). ``declared_size=`` states another size than the bytes have.
Downloads are a :class:`~tests.fakes._file_server.FileServer`'s (streamed, recorded,
``fail_next_download``). Like Discord's signed links, the URLs need no Authorization.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from aiohttp import web

from tests.fakes._file_server import Download, FileServer

JSON = dict[str, Any]
IS_VOICE_MESSAGE = 1 << 13
ROUTE = "/attachments/{path:.+}"


class FakeCdn:
    def __init__(self, origin: Callable[[], str], notify: Callable[[], None]) -> None:
        self._origin = origin
        self.server = FileServer(notify)
        self._next = 1_000_000

    def attachment(
        self,
        data: bytes,
        *,
        filename: str = "file.txt",
        content_type: str | None = "text/plain",
        declared_size: int | None = None,
    ) -> JSON:
        self._next += 1
        path = f"{self._next}/{filename}"
        self.server.add(path, data)
        url = f"{self._origin()}/attachments/{path}"
        payload: JSON = {
            "id": str(self._next),
            "filename": filename,
            "size": len(data) if declared_size is None else declared_size,
            "url": url,
            "proxy_url": url,
        }
        if content_type is not None:
            payload["content_type"] = content_type
        return payload

    def voice_message(self, data: bytes, *, duration_secs: float = 2.0) -> JSON:
        payload = self.attachment(data, filename="voice-message.ogg", content_type="audio/ogg")
        return {**payload, "duration_secs": duration_secs, "waveform": "AAAA", "flags": 0}

    @staticmethod
    def message_fields(attachments: Iterable[JSON]) -> JSON:
        """The message's ``attachments`` and, with a voice message among them, its flag."""
        found = list(attachments)
        voice = any("waveform" in a for a in found)
        return {"attachments": found, **({"flags": IS_VOICE_MESSAGE} if voice else {})}

    def fail_next_download(self, status: int = 502, *, times: int = 1) -> None:
        self.server.fail_next_download(status, times=times)

    def redirect_next_download(self, location: str) -> None:
        self.server.redirect_next_download(location)

    @property
    def downloads(self) -> list[Download]:
        return self.server.downloads

    def downloads_of(self, attachment: JSON) -> list[Download]:
        return self.server.downloads_of(f"{attachment['id']}/{attachment['filename']}")

    async def serve(self, request: web.Request) -> web.StreamResponse:
        return await self.server.serve(request, request.match_info["path"])
