"""A loopback A2A push notification receiver (a client's webhook) for tests.

Real HTTP on a loopback address of the test's choice (``127.0.0.2`` is a second host for the
allow-list tests): every request is recorded (method, path, headers, body), and each answer
is scripted: ``answers`` are the statuses of the first requests in turn (``redirect`` with a
3xx gives them a ``Location``), then ``default``. ``wait_for(n)`` waits until ``n`` requests
arrived, with no sleeps.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
from aiohttp import web


@dataclass(frozen=True, slots=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class PushReceiver:
    answers: list[int] = field(default_factory=list)
    default: int = 200
    redirect: str = ""
    url: str = ""  # http://host:port/hook, once it listens
    port: int = 0
    received: list[Received] = field(default_factory=list)
    _arrived: anyio.Event = field(default_factory=anyio.Event)

    async def handle(self, request: web.Request) -> web.Response:
        self.received.append(
            Received(request.method, request.path, dict(request.headers), await request.read())
        )
        self._arrived.set()
        self._arrived = anyio.Event()
        index = len(self.received) - 1
        status = self.answers[index] if index < len(self.answers) else self.default
        headers = {"Location": self.redirect} if 300 <= status < 400 and self.redirect else {}
        return web.Response(status=status, headers=headers)

    async def wait_for(self, count: int) -> None:
        while len(self.received) < count:
            await self._arrived.wait()


@asynccontextmanager
async def push_receiver(
    host: str = "127.0.0.1",
    *,
    answers: list[int] | None = None,
    default: int = 200,
    redirect: str = "",
) -> AsyncIterator[PushReceiver]:
    hook = PushReceiver(list(answers or []), default, redirect)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", hook.handle)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, host, 0)
    await site.start()
    hook.port = int(runner.addresses[0][1])
    hook.url = f"http://{host}:{hook.port}/hook"
    try:
        yield hook
    finally:
        await runner.cleanup()
