"""The peer listener's requests in flight, ended when the gateway stops (issue 37).

A request may wait a long time: for its turn, which the drain may leave pending, or on a
store that stopped answering (``[store] command_timeout_s``). When the listener stops, after
the drain, those waiting for a turn are woken (the adapter answers them ``503 draining``, a
stream with an ``error`` event), and what is still running a moment later is cancelled and
answered ``503 draining`` (with Retry-After, as a request that arrives while draining), or,
for a stream whose headers already went out, the stream ends. Its turn, if it was admitted,
stays pending in the store and is answered later (a retry with the same Idempotency-Key gets
the answer), so nothing committed is lost and the stop is not held up by what the requests
wait on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
from aiohttp import web

from platforms.peer.errors import draining

#: request[_PREPARED]: the response a handler started (its headers went out), if any.
_PREPARED = web.RequestKey("botmux.peer.prepared", web.StreamResponse)


class InFlight:
    """The requests being handled, each in a cancel scope of its own; :meth:`stop` ends them
    all. Install :meth:`middleware` first (outermost) and :meth:`prepared` on the app's
    ``on_response_prepare``."""

    def __init__(self) -> None:
        self._scopes: set[anyio.CancelScope] = set()
        self._stopped = False
        self._idle = anyio.Event()  # set once stopped with no request left

    def __len__(self) -> int:
        return len(self._scopes)

    @web.middleware
    async def middleware(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if self._stopped:
            return draining()
        with anyio.CancelScope() as scope:
            self._scopes.add(scope)
            try:
                return await handler(request)
            finally:
                self._scopes.discard(scope)
                if self._stopped and not self._scopes:
                    self._idle.set()
        # Only stop() cancels this scope (a client that hangs up cancels the task, which
        # the scope does not catch): the gateway stops.
        started = request.get(_PREPARED)
        return started if started is not None else draining()

    async def prepared(self, request: web.Request, response: web.StreamResponse) -> None:
        request[_PREPARED] = response

    async def stop(self, grace_s: float) -> None:
        """Answer any request that still arrives ``503 draining``; give those in flight
        ``grace_s`` to end (those woken from a wait answer on their own), then cancel the
        rest (a read of a database that stopped answering): ``503 draining`` too."""
        self._stopped = True
        if not self._scopes:
            return
        with anyio.move_on_after(grace_s):
            await self._idle.wait()
        for scope in self._scopes:
            scope.cancel()
