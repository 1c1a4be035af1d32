"""A TCP proxy on 127.0.0.1 (to PostgreSQL, in the tests) that a test can break on demand:
``cut`` drops every connection and refuses new ones (a database that went away), ``stall``
keeps every connection open but forwards nothing more, in either direction (a black hole: a
network partition, a frozen server), ``restore`` lets new connections through again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit


class Proxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self.up = True
        self.stalled = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    def url(self, url: str) -> str:
        """``url`` (to the target) through this proxy."""
        return url.replace(f":{urlsplit(url).port}/", f":{self.port}/")

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                if self.stalled:
                    continue  # swallowed: the other side waits for an answer that never comes
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not self.up:
            writer.transport.abort()
            return
        if self.stalled:  # accepted, then never answered
            self._writers.add(writer)
            await reader.read()
            return
        upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        self._writers.update((writer, upstream_writer))
        await asyncio.gather(
            self._pipe(reader, upstream_writer), self._pipe(upstream_reader, writer)
        )

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def cut(self) -> None:
        self.up = False
        for writer in self._writers:
            writer.transport.abort()
        self._writers.clear()

    def stall(self) -> None:
        self.stalled = True

    def restore(self) -> None:
        """New connections go through again (connections cut or stalled stay broken)."""
        if self.stalled:
            self.cut()
        self.up = True
        self.stalled = False

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()


@asynccontextmanager
async def proxy_to(url: str) -> AsyncIterator[Proxy]:
    parts = urlsplit(url)
    proxy = Proxy((parts.hostname or "127.0.0.1", parts.port or 5432))
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()
