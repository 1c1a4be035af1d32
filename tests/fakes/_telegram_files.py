"""The fake Bot API's files: ``getFile`` and the downloads at ``/file/bot<token>/<file_path>``.

A test registers bytes and gets the message fields that carry them, as a Telegram client
sends them, for ``inject_message(..., extra=...)``::

    extra = tg.files.photo(small, large, caption="what is this?")   # several PhotoSizes
    extra = tg.files.document(pdf, file_name="a.pdf", mime_type="application/pdf")
    extra = tg.files.voice(ogg)  /  tg.files.audio(mp3, file_name="song.mp3")

``getFile`` answers ``file_id``, ``file_unique_id``, ``file_size`` and ``file_path``, as
Telegram; an unknown id is 400 "Bad Request: invalid file_id", and ``too_big(file_id)`` makes
getFile answer 400 "Bad Request: file is too big" (Telegram's answer past its 20 MiB bot
download limit). ``declared_size=`` states another size in the message than the bytes have.

Downloads are served by :class:`~tests.fakes._file_server.FileServer` (streamed, recorded
as ``downloads``, ``fail_next_download(status)`` for a 5xx once).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes._file_server import Download, FileServer
from tests.fakes._telegram_text import ApiError

JSON = dict[str, Any]
__all__ = ["Download", "FakeFiles", "StoredFile"]


@dataclass(frozen=True, slots=True)
class StoredFile:
    file_id: str
    file_path: str
    data: bytes

    @property
    def unique_id(self) -> str:
        return f"u-{self.file_id}"


class FakeFiles:
    """The files of one fake bot (see the module docs)."""

    def __init__(self, notify: Callable[[], None]) -> None:
        self._notify = notify
        self._files: dict[str, StoredFile] = {}
        self._by_path: dict[str, StoredFile] = {}
        self._too_big: set[str] = set()
        self.server = FileServer(notify)
        self._next = 1

    def add(self, data: bytes, *, folder: str = "documents", suffix: str = "") -> StoredFile:
        """Keep ``data`` as a new file; its file_id and file_path are made up here."""
        number = self._next
        self._next += 1
        stored = StoredFile(f"file-{number}", f"{folder}/file_{number}{suffix}", data)
        self._files[stored.file_id] = stored
        self._by_path[stored.file_path] = stored
        self.server.add(stored.file_path, data)
        return stored

    def _media(self, stored: StoredFile, declared_size: int | None) -> JSON:
        size = len(stored.data) if declared_size is None else declared_size
        return {"file_id": stored.file_id, "file_unique_id": stored.unique_id, "file_size": size}

    @staticmethod
    def _with_caption(fields: JSON, caption: str | None) -> JSON:
        return {**fields, **({"caption": caption} if caption is not None else {})}

    def photo(self, *sizes: bytes, caption: str | None = None) -> JSON:
        """A photo in ``len(sizes)`` sizes, smallest first (as Telegram lists them)."""
        photo = []
        for index, data in enumerate(sizes, start=1):
            stored = self.add(data, folder="photos", suffix=".jpg")
            side = 90 * index * index
            photo.append({**self._media(stored, None), "width": side, "height": side})
        return self._with_caption({"photo": photo}, caption)

    def document(
        self,
        data: bytes,
        *,
        file_name: str = "file.txt",
        mime_type: str = "text/plain",
        caption: str | None = None,
        declared_size: int | None = None,
    ) -> JSON:
        stored = self.add(data, folder="documents", suffix="." + file_name.rpartition(".")[2])
        document = {**self._media(stored, declared_size), "file_name": file_name}
        return self._with_caption({"document": {**document, "mime_type": mime_type}}, caption)

    def voice(
        self,
        data: bytes,
        *,
        duration: int = 2,
        mime_type: str = "audio/ogg",
        caption: str | None = None,
    ) -> JSON:
        stored = self.add(data, folder="voice", suffix=".oga")
        voice = {**self._media(stored, None), "duration": duration, "mime_type": mime_type}
        return self._with_caption({"voice": voice}, caption)

    def audio(
        self,
        data: bytes,
        *,
        file_name: str = "song.mp3",
        mime_type: str = "audio/mpeg",
        duration: int = 3,
        caption: str | None = None,
    ) -> JSON:
        stored = self.add(data, folder="music", suffix=".mp3")
        audio = {**self._media(stored, None), "duration": duration, "file_name": file_name}
        return self._with_caption({"audio": {**audio, "mime_type": mime_type}}, caption)

    def too_big(self, file_id: str) -> None:
        """getFile of ``file_id`` answers 400 "file is too big" from now on."""
        self._too_big.add(file_id)

    def fail_next_download(self, status: int = 502, *, times: int = 1) -> None:
        self.server.fail_next_download(status, times=times)

    def redirect_next_download(self, location: str) -> None:
        self.server.redirect_next_download(location)

    @property
    def downloads(self) -> list[Download]:
        return self.server.downloads

    def downloads_of(self, file_id: str) -> list[Download]:
        return self.server.downloads_of(self._files[file_id].file_path)

    async def get_file(self, params: JSON) -> JSON:
        file_id = params.get("file_id")
        if not isinstance(file_id, str) or not file_id:
            raise ApiError(400, "Bad Request: file_id is empty")
        if file_id in self._too_big:
            raise ApiError(400, "Bad Request: file is too big")
        stored = self._files.get(file_id)
        if stored is None:
            raise ApiError(400, "Bad Request: invalid file_id")
        return {
            "file_id": stored.file_id,
            "file_unique_id": stored.unique_id,
            "file_size": len(stored.data),
            "file_path": stored.file_path,
        }

    async def serve(self, request: web.Request, path: str) -> web.StreamResponse:
        """GET ``/file/bot<token>/<path>`` (the token checked by the caller)."""
        return await self.server.serve(request, path)
