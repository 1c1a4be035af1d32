"""Bytes served over HTTP by the loopback fakes: Telegram's file downloads, Discord's CDN.

``add(path, data)`` keeps a file; ``serve(request, path)`` streams it in 64 KiB writes and
records a :class:`Download` (path, status, bytes written, whether the whole body went out,
the client's address and port): a client that stops reading past a limit shows as
``complete=False``, ``sent`` short of the file; downloads on one kept-alive connection share a
``client``. ``fail_next_download(status)`` answers the next download(s) with that error instead
(a 5xx once, then the file); ``redirect_next_download(location)`` with a 302 to there. ``send_length = False`` leaves Content-Length out (a chunked
body: the client learns the size only by reading).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class Download:
    """One GET of a file: what the fake answered and how much of the body it wrote."""

    path: str
    status: int
    sent: int = 0
    complete: bool = False
    client: str = ""  # "host:port" of the connection it came on


class FileServer:
    def __init__(self, notify: Callable[[], None]) -> None:
        self._notify = notify
        self._files: dict[str, bytes] = {}
        self._failures: deque[tuple[int, str]] = deque()  # (status, Location of a 3xx)
        self.downloads: list[Download] = []
        self.send_length = True

    def add(self, path: str, data: bytes) -> None:
        self._files[path] = data

    def fail_next_download(self, status: int = 502, *, times: int = 1) -> None:
        self._failures.extend([(status, "")] * times)

    def redirect_next_download(self, location: str, status: int = 302) -> None:
        self._failures.append((status, location))

    def downloads_of(self, path: str) -> list[Download]:
        return [d for d in self.downloads if d.path == path]

    async def serve(self, request: web.Request, path: str) -> web.StreamResponse:
        data = self._files.get(path)
        if self._failures:
            status, location = self._failures.popleft()
            headers = {"Location": location} if location else {}
            failed = web.Response(status=status, text="Bad Gateway", headers=headers)
            return self._record(request, path, status, failed)
        if data is None:
            return self._record(request, path, 404, web.Response(status=404, text="Not Found"))
        response = web.StreamResponse(status=200)
        response.content_type = "application/octet-stream"
        if self.send_length:
            response.content_length = len(data)
        else:
            response.enable_chunked_encoding()
        await response.prepare(request)
        sent = 0
        try:
            for start in range(0, len(data), CHUNK):
                piece = data[start : start + CHUNK]
                await response.write(piece)
                sent += len(piece)
            await response.write_eof()
        except asyncio.CancelledError:  # the client went away (handler cancellation)
            self._record(request, path, 200, None, sent=sent)
            raise
        except ConnectionError:
            return self._record(request, path, 200, response, sent=sent)
        return self._record(request, path, 200, response, sent=sent, complete=True)

    def _record(
        self,
        request: web.Request,
        path: str,
        status: int,
        response: web.StreamResponse | None,
        *,
        sent: int = 0,
        complete: bool = False,
    ) -> web.StreamResponse:
        peer = _peer(request)
        client = f"{peer[0]}:{peer[1]}" if peer else ""
        self.downloads.append(Download(path, status, sent, complete, client))
        self._notify()
        return response if response is not None else web.Response(status=status)


def _peer(request: web.Request) -> tuple[str, int] | None:
    transport = request.transport
    peer = transport.get_extra_info("peername") if transport is not None else None
    return (peer[0], peer[1]) if peer else None


def client_port(request: web.Request) -> int:
    """The client's TCP port (0 once its transport is gone): calls sharing one are on one
    kept-alive connection, so a test can count the connections a client opened."""
    peer = _peer(request)
    return peer[1] if peer else 0
