"""One MCP server, kept connected (SPEC 15): its session, its tools, its calls.

A :class:`ServerLink` runs in a task of its own (``McpToolBox`` starts one per server): it
connects (a child process over stdio, or streamable HTTP), initializes, lists the tools (every
page), and offers them while the session lives. It re-lists on ``tools/list_changed``. When
the session ends (the child exits, the HTTP endpoint goes away, a ping after a failed call
gets no answer) the tools stop being offered at once and the server is started again after a
backoff (``policy.backoff``, up to ``backoff.cap``), forever. State changes are reported once
each (``ToolServerChanged``): a server that stays down says nothing more until it is up.

Listing and calls go through the session's JSON-RPC dispatcher, read as the server sent them
(``agent.tools.specs``, ``agent.tools.results``): the SDK's ``list_tools`` validates the listing
whole and refuses all of a server's tools for one bad schema, and its ``call_tool`` lists
again (the same way) before it validates a result. The handshake, pings and notifications stay
the SDK session's.

The transports: a stdio child through ``agent.tools._stdio`` (the SDK's environment rules and
shutdown, a reader of our own), streamable HTTP through the SDK's client, its SSE events
allowed up to the same size as a stdio line.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Literal

import anyio
import httpx2
import mcp_types as types
from anyio.streams.memory import MemoryObjectSendStream
from mcp.client.session import ClientSession, IncomingMessage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.message import SessionMessage

from agent.tools._stdio import MAX_LINE, open_stdio
from agent.tools.errors import explain, leaf
from agent.tools.results import MalformedReply, tool_outcome
from agent.tools.specs import tool_specs
from gateway.config_tools import McpServer
from gateway.events import Observe
from gateway.events_mcp import ToolServerChanged, ToolsListed
from gateway.messages import ToolOutcome, ToolServerStatus, ToolSpec
from policy.backoff import Backoff

log = logging.getLogger(__name__)


def _installed(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:  # run from a source tree
        return "0"


State = Literal["starting", "up", "down"]
Outcome = Literal["ok", "error", "timeout", "unavailable"]

#: An idle HTTP session is pinged this often: nothing else tells that the endpoint went away
#: (a stdio child's exit closes its output, which is seen at once).
PING_EVERY_S = 30.0
#: A server's start (process spawn or connection, initialize, the first listing) may take
#: longer than its calls may: a Python server takes a second or two to import on a busy host.
START_TIMEOUT_S = 30.0
MAX_PAGES = 100  # of one tools/list: a server that pages forever is a broken one
MAX_EVENT = MAX_LINE  # bytes of one SSE event (the SDK's default, 1 MiB, refuses big results)
_CLIENT = types.Implementation(name="botmux", version=_installed("botmux"))


@dataclass(frozen=True, slots=True)
class _Connected:
    session: ClientSession
    dispatcher: JSONRPCDispatcher
    version: str  # the protocol version negotiated, sent on every request over HTTP
    server: str  # what the server says it is, for /status


class ServerLink:
    """One configured server (see the module docstring). ``on_change`` is called whenever
    the tools it offers change (it came up, went down, re-listed, was retuned)."""

    def __init__(
        self,
        config: McpServer,
        *,
        observe: Observe,
        clock: Callable[[], float],
        backoff: Backoff,
        on_change: Callable[[], None],
        ping_every: float = PING_EVERY_S,
    ) -> None:
        self.config = config
        self.scope = anyio.CancelScope()
        self.stopped = anyio.Event()
        self.tried = anyio.Event()  # the first try ended: it is up, or down after it
        self._observe = observe
        self._clock = clock
        self._backoff = backoff
        self._ping_every = ping_every
        self._on_change = on_change
        self._state: State = "starting"
        self._detail = ""
        self._retry_at: float | None = None
        self._listed: list[object] = []  # the last listing, every page, as sent
        self._specs: dict[str, ToolSpec] = {}
        self._connected: _Connected | None = None
        self._wake = anyio.Event()
        self._ended: str | None = None  # why the session ended, once it did
        self._relist = self._suspect = False
        self._in_flight = 0
        self._malformed = 0
        self._said: set[tuple[str, str]] = set()  # skipped tools already logged
        self._bug_logged = False
        self.restarts = 0

    def __repr__(self) -> str:
        return f"<ServerLink {self.config.name} {self._state} tools={len(self._specs)}>"

    @property
    def up(self) -> bool:
        return self._state == "up"

    @property
    def specs(self) -> Mapping[str, ToolSpec]:
        """The tools offered now, by the model's name for them: none unless it is up."""
        return self._specs if self.up else {}

    def status(self) -> ToolServerStatus:
        detail = self._detail
        if self._state == "down" and self._retry_at is not None:
            wait = max(0.0, self._retry_at - self._clock())
            detail += f"; next try in {wait:.0f} s"
        specs = self.specs
        return ToolServerStatus(self.config.name, self._state, len(specs), detail, tuple(specs))

    def retune(self, config: McpServer) -> None:
        """The same server (command, args, env, cwd, url, headers) with other filters, an
        other approval mode or timeout: applied to the cached listing, no reconnection."""
        self.config = config
        self._publish(self._listed)

    # -- the session, kept up ---------------------------------------------------------------

    async def run(self) -> None:
        """Connect, serve, and after a session ends connect again after a backoff; until
        ``scope`` is cancelled (the server removed or changed, the gateway stopping)."""
        attempt = 0
        try:
            with self.scope:
                while True:
                    began = self._clock()
                    reason = await self._once()
                    if self._clock() - began >= self._backoff.cap:
                        attempt = 0  # it lived a while: this is no start-up failure
                    delay = self._backoff.delay(attempt)
                    attempt += 1
                    self.restarts += 1
                    self._went("down", reason, retry_at=self._clock() + delay)
                    await anyio.sleep(delay)
        finally:
            self._connected = None
            self.tried.set()
            self.stopped.set()

    async def _once(self) -> str:
        """One session, from connecting to its end: why it ended."""
        self._ended, self._relist, self._suspect, self._malformed = None, False, False, 0
        self._wake = anyio.Event()
        self._retry_at = None  # trying now
        try:
            return await self._session()
        except Exception as exc:
            if self._ended is not None:  # the failure is the end, seen first (a child gone)
                return self._ended
            text = explain(exc)
            if text is not None:
                return self._with_malformed(text)
            self._bug(exc)
            return f"a failure inside the gateway ({type(leaf(exc)).__name__})"
        finally:
            self._connected = None

    async def _session(self) -> str:
        reason = "the session ended"  # the SDK's session swallowed what ended it
        async with self._open() as (read, write):
            send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)
            dispatcher = JSONRPCDispatcher(receive, write)
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._forward, read, send)
                try:
                    async with ClientSession(
                        dispatcher=dispatcher, message_handler=self._on_message, client_info=_CLIENT
                    ) as session:
                        reason = await self._serve(session, dispatcher)
                finally:
                    tg.cancel_scope.cancel()
        return reason

    async def _serve(self, session: ClientSession, dispatcher: JSONRPCDispatcher) -> str:
        timeout = max(self.config.timeout_s, START_TIMEOUT_S)
        phase = "initialize"
        try:
            with anyio.fail_after(timeout):
                init = await session.initialize()
                connected = _Connected(
                    session,
                    dispatcher,
                    init.protocol_version,
                    f"{init.server_info.name} {init.server_info.version}".strip(),
                )
                phase = "tools/list"
                listed = await self._list(connected)
        except TimeoutError:
            return self._with_malformed(f"no answer to {phase} within {timeout:g} s")
        self._connected = connected
        self._went("up", connected.server, listed=listed)
        timeout = self.config.timeout_s
        idle_ping = self._ping_every if self.config.transport == "http" else math.inf
        while True:
            with anyio.move_on_after(idle_ping) as idle:
                await self._wake.wait()
            self._wake = anyio.Event()
            if self._ended is not None:
                return self._ended
            if self._relist:
                self._relist = False
                try:
                    with anyio.fail_after(timeout):
                        listed = await self._list(connected)
                except TimeoutError:
                    return f"no answer to tools/list within {timeout:g} s"
                self._publish(listed)
            if self._suspect or (idle.cancelled_caught and not self._in_flight):
                self._suspect = False
                if (reason := await self._ping(connected)) is not None:
                    return reason

    async def _ping(self, connected: _Connected) -> str | None:
        """Why the session is over, if a ping says it is: no answer, or an error (over HTTP, a
        server that restarted answers "session not found"); a server without ping is alive."""
        timeout = self.config.timeout_s
        try:
            with anyio.fail_after(timeout):
                await connected.session.send_ping()
        except TimeoutError:
            return self._ended or f"no answer to a ping within {timeout:g} s"
        except MCPError as exc:
            # Method not found is an answer too, from a server without ping.
            if exc.code != types.METHOD_NOT_FOUND:
                return self._ended or explain(exc)
        return None

    @asynccontextmanager
    async def _open(self) -> AsyncIterator[tuple[Any, Any]]:
        """The transport's (read, write) streams, while the connection lasts."""
        server = self.config
        if server.transport == "stdio":
            async with open_stdio(
                server, malformed=self._count_malformed, ended=self._end
            ) as streams:
                yield streams
            return
        # The SDK's own timeouts: its GET stream waits long for server messages.
        timeout = httpx2.Timeout(30.0, read=300.0)
        async with (
            httpx2.AsyncClient(headers=dict(server.headers), timeout=timeout) as client,
            streamable_http_client(
                server.url, http_client=client, max_sse_event_size=MAX_EVENT
            ) as streams,
        ):
            yield streams

    async def _forward(
        self, read: Any, send: MemoryObjectSendStream[SessionMessage | Exception]
    ) -> None:
        """The transport's messages to the session; a malformed one counted and dropped (the
        SDK logs each itself); the end of the stream ends the session."""
        async with send:
            async for item in read:
                if isinstance(item, Exception):
                    self._count_malformed()
                    continue
                try:
                    await send.send(item)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    return  # the session is closing
        self._end("the connection to the server closed")

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._relist = True
            self._wake.set()

    def _count_malformed(self) -> None:
        self._malformed += 1

    def _end(self, reason: str) -> None:
        """The session is over (the first reason given is the one kept)."""
        if self._ended is None:
            self._ended = self._with_malformed(reason)
        self._wake.set()

    def _with_malformed(self, text: str) -> str:
        if self._malformed:
            return f"{text} (it sent {self._malformed} malformed message(s))"
        return text

    async def _list(self, connected: _Connected) -> list[object]:
        """Every page of ``tools/list``, entries as sent."""
        tools: list[object] = []
        cursor: object = None
        for _ in range(MAX_PAGES):
            params = {"cursor": cursor} if cursor else None
            page = await connected.dispatcher.send_raw_request(
                "tools/list", params, self._options(connected)
            )
            entries = page.get("tools")
            if not isinstance(entries, list):
                raise MalformedReply("tools/list gave no list of tools")
            tools += entries
            cursor = page.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                return tools
        raise MalformedReply(f"tools/list gave more than {MAX_PAGES} pages")

    @staticmethod
    def _options(connected: _Connected) -> CallOptions:
        return {"headers": {MCP_PROTOCOL_VERSION_HEADER: connected.version}}

    # -- state ------------------------------------------------------------------------------

    def _went(
        self,
        state: State,
        detail: str,
        *,
        listed: list[object] | None = None,
        retry_at: float | None = None,
    ) -> None:
        changed = state != self._state
        self._state, self._detail, self._retry_at = state, detail, retry_at
        self.tried.set()
        if listed is not None:
            self._publish(listed)
        elif changed:
            self._on_change()
        if changed:
            event = ToolServerChanged(self.config.name, state, detail, len(self.specs))
            self._observe(event)

    def _publish(self, listed: list[object]) -> None:
        """Offer what ``listed`` holds (filters, names, annotations: ``tool_specs``)."""
        self._listed = listed
        listing = tool_specs(self.config, listed)
        for tool, why in listing.skipped:
            if (tool, why) not in self._said:
                self._said.add((tool, why))
                log.warning(
                    "tool skipped",
                    extra={"server": self.config.name, "tool": tool[:200], "reason": why},
                )
        self._specs = {spec.name: spec for spec in listing.specs}
        self._on_change()
        self._observe(ToolsListed(self.config.name, len(self.specs)))

    # -- calls ------------------------------------------------------------------------------

    async def call(self, tool: str, arguments: Mapping[str, Any]) -> tuple[Outcome, ToolOutcome]:
        """One ``tools/call`` within the server's ``timeout_s``: never raises (a failure is an
        outcome the model is told about)."""
        connected = self._connected
        if connected is None or not self.up:
            why = self._detail or "it is starting"
            return "unavailable", _told(f"The tool's server is not available now: {why}.")
        timeout = self.config.timeout_s
        request = {"name": tool, "arguments": dict(arguments)}
        self._in_flight += 1
        try:
            with anyio.move_on_after(timeout) as deadline:
                raw = await connected.dispatcher.send_raw_request(
                    "tools/call", request, self._options(connected)
                )
            if deadline.cancelled_caught:
                return "timeout", _told(
                    f"The tool gave no answer within {timeout:g} s; it may still be running."
                )
            outcome = tool_outcome(raw)
            return ("error" if outcome.is_error else "ok"), outcome
        except MCPError as exc:
            if exc.code != types.CONNECTION_CLOSED:
                if exc.code == types.INVALID_REQUEST:  # a session the server lost (restarted)?
                    self._check()
                return "error", _told(f"The tool's server refused the call: {explain(exc)}.")
            self._check()
            return "unavailable", _told(
                "The tool's server stopped during the call; it may or may not have taken effect."
            )
        except MalformedReply as exc:
            return "error", _told(f"The tool's server answered nonsense: {exc}.")
        except Exception as exc:
            text = explain(exc)
            if text is None:
                self._bug(exc)
                return "error", _told("The call failed inside the gateway (a bug, logged).")
            self._check()
            return "unavailable", _told(f"The call to the tool's server failed: {text}.")
        finally:
            self._in_flight -= 1

    def _bug(self, exc: Exception) -> None:
        """A failure the SDK's table does not know: ours. Its whole traceback, once a server."""
        if not self._bug_logged:
            self._bug_logged = True
            log.error("tool server: a bug in the gateway", exc_info=exc, extra=self._extra)

    @property
    def _extra(self) -> dict[str, object]:
        return {"server": self.config.name}

    def _check(self) -> None:
        """A call saw the connection fail: the session is pinged (and ended if it is gone)."""
        self._suspect = True
        self._wake.set()


def _told(text: str) -> ToolOutcome:
    return ToolOutcome(text=text, is_error=True)
