"""An aiohttp server's lifecycle inside our task group: the peer API and Telegram's webhook.

aiohttp's runner wants a fixed order (set the runner up, start the site, and at the end clean
the runner up, which closes the listener, then the open connections, then the handlers), and
the cleanup must run even when the task is cancelled, yet not hold a shutdown up forever: one
helper, so both servers start and stop the same way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
from aiohttp import web

STOP_DEADLINE_S = 5.0  # the longest a stop waits for open requests to finish


@asynccontextmanager
async def serving(
    app: web.Application,
    host: str,
    port: int,
    *,
    stop_deadline_s: float = STOP_DEADLINE_S,
    site: Callable[[web.AppRunner, str, int], web.BaseSite] | None = None,
    **runner_args: Any,
) -> AsyncIterator[int]:
    """Serve ``app`` on ``host:port`` for the body and yield the bound port (``port`` 0
    picks a free one); at the end stop it, shielded from cancellation, within the deadline.
    ``runner_args`` go to :class:`aiohttp.web.AppRunner` (timeouts, handler arguments);
    ``site`` makes the listening site (default a plain TCP site; the peer API's guards its
    connections, :mod:`platforms._guarded`)."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False, **runner_args)
    await runner.setup()
    try:
        if site is None:
            listening: web.BaseSite = web.TCPSite(runner, host, port, reuse_address=True)
        else:
            listening = site(runner, host, port)
        await listening.start()
        addresses = runner.addresses
        yield int(addresses[0][1]) if addresses else port
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(stop_deadline_s):
            await runner.cleanup()
