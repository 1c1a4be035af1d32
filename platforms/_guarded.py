"""Listening sockets guarded against slow and greedy clients (SPEC 14): the peer API's and
the Telegram webhook's.

aiohttp's defaults hold a connection that never finishes its headers for about an hour and
accept connections until the process runs out of file descriptors; then every accept fails
and asyncio logs a traceback for each. Here, at the protocol level, before any request:

- a connection has ``header_timeout_s`` to send a complete request head: counted from the
  connection, and again from the first byte of each following request (aiohttp's
  ``keepalive_timeout``, set to ``idle_timeout_s``, closes a connection idle between
  requests);
- at most ``max_connections`` are open at once, and never so many that the process's
  descriptor limit is in reach (a reserve is kept for the store, the model client and the
  chat platforms); at the cap a new connection takes the place of the oldest one that has
  not sent a request head yet, and if every open one is busy with a request it gets ``503``
  with ``Retry-After`` and is closed;
- a connection on which a principal (a peer token) made a request is counted as that
  principal's until it closes (:meth:`GuardedHandler.claim`): the adapter refuses a request
  of a principal that holds its share already, so one token cannot hold every slot with
  waiting requests or streams;
- protocol errors (a malformed request, an over-long header) are one warning line without a
  traceback, at most one a second (with a count of those left out), and client hang-ups are
  debug lines: no client can make botmux write ERROR tracebacks.

Uses aiohttp's ``RequestHandler`` (``web.RequestHandler``) as its protocol and reads three of
its attributes: ``_request_count`` (request heads parsed), ``_current_request`` and
``_messages`` (a parsed request is being or waits to be handled). aiohttp is pinned below 4.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, cast

from aiohttp import web

from platforms._http import serving

log = logging.getLogger(__name__)

#: Descriptors kept free for everything else the process opens.
FD_RESERVE_MIN = 64
#: The listen backlog, and so the most connections asyncio accepts in one go, before any of
#: them is counted: the cap leaves room for one such burst.
BACKLOG = 128
_REFUSAL_BODY = (
    b'{"error": {"message": "too many open connections; retry shortly",'
    b' "type": "overloaded", "code": "overloaded", "status": 503}}'
)
_REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s"
    % (len(_REFUSAL_BODY), _REFUSAL_BODY)
)


def connection_cap(max_connections: int) -> int:
    """``max_connections``, lowered to what the descriptor limit leaves after a reserve (one
    accept burst, and an eighth of the limit for the rest of the process)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return max_connections
    reserve = BACKLOG + max(FD_RESERVE_MIN, soft // 8)
    return max(1, min(max_connections, soft - reserve))


class _Quiet:
    """At most one warning a second; the others are counted into the next one."""

    def __init__(self) -> None:
        self._last = 0.0
        self._left_out = 0

    def warning(self, message: str, **fields: Any) -> None:
        now = time.monotonic()
        if now - self._last < 1.0:
            self._left_out += 1
            return
        self._last = now
        left_out, self._left_out = self._left_out, 0
        log.warning(message, extra={**fields, "left_out": left_out})


class _NoTraceback(logging.LoggerAdapter):  # type: ignore[type-arg]
    """aiohttp's protocol logger without tracebacks (it logs a non-HTTP client's bytes at
    debug with one)."""

    def process(self, msg: Any, kwargs: Any) -> tuple[Any, Any]:
        kwargs.pop("exc_info", None)
        return msg, kwargs


#: Passed to every GuardedHandler as aiohttp's ``logger``.
PROTOCOL_LOGGER = _NoTraceback(logging.getLogger("platforms.http"), {})


class ConnectionGuard:
    """The shared state of the guarded connections: how many are open, the limits."""

    def __init__(self, *, header_timeout_s: float, max_connections: int) -> None:
        self.header_timeout_s = header_timeout_s
        self.cap = connection_cap(max_connections)
        self.open = 0
        #: Connections still waiting for a request head, oldest first: at the cap the oldest
        #: is closed to make room, so a slow-header flood cannot keep prompt clients out.
        self.waiting: dict[GuardedHandler, None] = {}
        self.quiet = _Quiet()
        #: Connections counted as a principal's (a peer token's name), by principal.
        self.held: dict[str, int] = {}
        self.stats = {
            "refused_connections": 0,
            "evicted_connections": 0,
            "header_timeouts": 0,
            "protocol_errors": 0,
            "share_refusals": 0,
        }

    def __repr__(self) -> str:
        return f"<ConnectionGuard open={self.open}/{self.cap}>"


class GuardedHandler(web.RequestHandler):
    """aiohttp's protocol with a header deadline and quiet error logging."""

    def __init__(self, guard: ConnectionGuard, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._guard = guard
        self._header_timer: asyncio.TimerHandle | None = None
        self._heads_at_arm = 0
        self._refused = False
        self._principal: str | None = None

    def claim(self, principal: str, share: int) -> bool:
        """Count this connection as ``principal``'s; False (nothing counted) when that
        principal holds ``share`` connections already. A connection another principal used
        before is moved over (a proxy's connection carries many clients' requests)."""
        if self._principal == principal:
            return True
        if self._guard.held.get(principal, 0) >= share:
            self._guard.stats["share_refusals"] += 1
            return False
        self._release()
        self._principal = principal
        self._guard.held[principal] = self._guard.held.get(principal, 0) + 1
        return True

    def _release(self) -> None:
        if self._principal is None:
            return
        left = self._guard.held[self._principal] - 1
        if left:
            self._guard.held[self._principal] = left
        else:
            del self._guard.held[self._principal]
        self._principal = None

    def _arm(self) -> None:
        self._heads_at_arm = self._request_count
        self._header_timer = self._loop.call_later(
            self._guard.header_timeout_s, self._header_deadline
        )
        self._guard.waiting[self] = None

    def _disarm(self) -> None:
        self._guard.waiting.pop(self, None)
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def evict(self) -> None:
        """Close this connection, which has not sent a request head yet, to make room."""
        self._disarm()
        self._guard.stats["evicted_connections"] += 1
        self.force_close()

    def _header_deadline(self) -> None:
        self._header_timer = None
        self._guard.waiting.pop(self, None)
        if self._request_count == self._heads_at_arm and self._current_request is None:
            self._guard.stats["header_timeouts"] += 1
            log.debug("peer API: closed a connection that sent no request head in time")
            self.force_close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Counted here, not in the protocol factory: asyncio makes the protocols of a burst
        # of accepted connections before any of them is connected.
        if self._guard.open >= self._guard.cap and self._guard.waiting:
            next(iter(self._guard.waiting)).evict()
            self._guard.quiet.warning(
                "peer API: connection cap reached, closing the oldest connection without a request",
                cap=self._guard.cap,
            )
        elif self._guard.open >= self._guard.cap:
            self._refused = True
            self._guard.stats["refused_connections"] += 1
            self._guard.quiet.warning(
                "peer API: connection cap reached, refusing new connections", cap=self._guard.cap
            )
            # A stream transport; uvloop's are not asyncio.Transport subclasses.
            stream = cast(asyncio.WriteTransport, transport)
            stream.write(_REFUSAL)
            stream.close()
            return
        self._guard.open += 1
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._refused:
            return
        self._guard.open -= 1
        self._disarm()
        self._release()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        heads = self._request_count
        idle = self._current_request is None and not self._messages
        super().data_received(data)
        if self._request_count > heads:
            self._disarm()  # a head arrived; the body is the handler's business
        elif idle and self._header_timer is None and data:
            self._arm()  # the first bytes of the next request on a kept-alive connection

    def log_exception(self, *args: Any, **kw: Any) -> None:
        exc = kw.get("exc_info")
        if isinstance(exc, ConnectionError):
            log.debug("peer API: the client hung up", extra={"error": type(exc).__name__})
            return
        self._guard.stats["protocol_errors"] += 1
        # One line, no traceback, and only the error's class and a short message: the
        # message of a parse error quotes bytes the client sent.
        detail = str(exc)[:120] if isinstance(exc, BaseException) else str(args[0])[:120]
        self._guard.quiet.warning(
            "peer API: a bad request was refused",
            error=type(exc).__name__ if isinstance(exc, BaseException) else "unknown",
            detail=detail.encode("ascii", "backslashreplace").decode(),
        )


class GuardedSite(web.BaseSite):
    """A TCP site whose connections are :class:`GuardedHandler` protocols."""

    def __init__(
        self,
        runner: web.AppRunner,
        host: str,
        port: int,
        guard: ConnectionGuard,
        handler_args: dict[str, Any],
    ) -> None:
        super().__init__(runner, backlog=BACKLOG)
        self._host = host
        self._port = port
        self._guard = guard
        self._handler_args = handler_args
        self.sockets: list[Any] = []

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self._port}"

    def _protocol(self) -> asyncio.Protocol:
        server = self._runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        return GuardedHandler(self._guard, server, loop=loop, **self._handler_args)

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._protocol, self._host, self._port, reuse_address=True, backlog=BACKLOG
        )
        self.sockets = list(self._server.sockets)


@contextmanager
def quiet_accept_errors(guard: ConnectionGuard) -> Iterator[None]:
    """While the server runs: asyncio's "socket.accept() out of system resource" (the
    process is out of descriptors; asyncio retries after a second) as one warning line a
    second instead of an ERROR with a traceback per attempt. Other loop errors go on to the
    handler that was there."""
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if str(context.get("message", "")).startswith("socket.accept() out of system"):
            guard.quiet.warning(
                "peer API: out of file descriptors, not accepting connections for a while",
                error=type(context.get("exception")).__name__,
            )
        elif previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
    try:
        yield
    finally:
        loop.set_exception_handler(previous)


@asynccontextmanager
async def guarded_serving(
    app: web.Application,
    host: str,
    port: int,
    guard: ConnectionGuard,
    *,
    idle_timeout_s: float,
    **runner_args: Any,
) -> AsyncIterator[int]:
    """:func:`platforms._http.serving` on a :class:`GuardedSite`: yields the bound port.
    ``idle_timeout_s`` (aiohttp's ``keepalive_timeout``) also bounds a connection that sends
    nothing at all; the guard's header deadline is shorter."""
    handler_args = {
        "access_log": None,
        "keepalive_timeout": idle_timeout_s,
        "logger": PROTOCOL_LOGGER,
    }

    def site(runner: web.AppRunner, host: str, port: int) -> web.BaseSite:
        return GuardedSite(runner, host, port, guard, handler_args)

    with quiet_accept_errors(guard):
        async with serving(app, host, port, site=site, **runner_args) as bound:
            yield bound
