"""The agent's tools from MCP servers (SPEC 15): :class:`McpToolBox`, the ``ToolBox`` port.

Each ``[[tools.mcp]]`` server is a :class:`~agent.tools._link.ServerLink` in a task of its own,
so a server that is slow to start, down or dying never holds up the gateway's start, a turn or
another server: the box starts them all and reports itself started at once. It offers the
tools of the servers that are up (by the model's names for them, ``agent.tools.names``), runs
calls on them, and says how each server is (``status()``). A reload (``reconfigure``) adds
and removes servers, restarts those whose connection changed (command, args, env, cwd, url,
headers) and applies other changes (filters, approval, timeout) to the cached listing: a call
in flight on a server left alone is not touched.

This module imports the MCP SDK; the composition root imports it only when servers are
configured (``agent.tools`` itself does not), so a gateway without tools never loads it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
from anyio.abc import TaskGroup, TaskStatus

from agent.tools._link import PING_EVERY_S, Outcome, ServerLink
from agent.tools.names import matches
from gateway.config_tools import McpServer, ToolsConfig
from gateway.events import Observe
from gateway.events_mcp import ToolCalled, ToolServerChanged
from gateway.messages import ToolOutcome, ToolServerStatus, ToolSpec
from policy.backoff import Backoff

log = logging.getLogger(__name__)

#: Restarts of a dead server: 1 s, 2 s, ... up to a minute between tries (with jitter).
RESTART_BACKOFF = Backoff(base=1.0, cap=60.0)
_CONNECTION = ("command", "args", "env", "cwd", "url", "headers")


def _shown(url: str) -> str:
    """``url`` as a log line may show it: no user, password or query (they may be secrets)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


@dataclass(frozen=True, slots=True)
class Reconfiguration:
    """What a reload does to the servers (:func:`plan_reconfigure`)."""

    stop: tuple[str, ...]  # removed, or their connection changed (started again below)
    start: tuple[McpServer, ...]  # new, or their connection changed
    retune: tuple[McpServer, ...]  # the same connection, other filters, approval or timeout


def plan_reconfigure(old: Sequence[McpServer], new: Sequence[McpServer]) -> Reconfiguration:
    """Which servers a change of ``[[tools.mcp]]`` from ``old`` to ``new`` stops, starts and
    retunes; a server whose config is unchanged is in none of them."""
    before = {s.name: s for s in old}
    stop = [s.name for s in old if s.name not in {n.name for n in new}]
    start: list[McpServer] = []
    retune: list[McpServer] = []
    for server in new:
        was = before.get(server.name)
        if was is None:
            start.append(server)
        elif any(getattr(was, k) != getattr(server, k) for k in _CONNECTION):
            stop.append(server.name)
            start.append(server)
        elif was != server:
            retune.append(server)
    return Reconfiguration(tuple(stop), tuple(start), tuple(retune))


@dataclass(frozen=True, slots=True)
class McpToolBoxStatistics:
    """The servers and calls of a box (``McpToolBox.statistics()``)."""

    servers: int
    up: int
    tools: int  # offered now
    calls: int
    restarts: int  # sessions that ended and were started again, over the servers kept


class McpToolBox:
    """``gateway.ports.ToolBox`` over the configured MCP servers (see the module docstring).
    ``clock`` times calls and backoffs; ``backoff`` spaces a dead server's restarts;
    ``ping_every``: how long an HTTP session may stay idle before it is pinged."""

    def __init__(
        self,
        config: ToolsConfig,
        *,
        observe: Observe,
        clock: Callable[[], float] = time.monotonic,
        backoff: Backoff = RESTART_BACKOFF,
        ping_every: float = PING_EVERY_S,
    ) -> None:
        self._config = config
        self._observe = observe
        self._clock = clock
        self._backoff = backoff
        self._ping_every = ping_every
        self._links: dict[str, ServerLink] = {}
        self._index: dict[str, ToolSpec] = {}  # the model's names of the tools offered now
        self._tg: TaskGroup | None = None
        self._lock = anyio.Lock()
        self._calls = 0

    def __repr__(self) -> str:
        up = sum(link.up for link in self._links.values())
        return f"<McpToolBox servers={len(self._links)} up={up} tools={len(self._index)}>"

    def statistics(self) -> McpToolBoxStatistics:
        links = self._links.values()
        return McpToolBoxStatistics(
            servers=len(links),
            up=sum(link.up for link in links),
            tools=len(self._index),
            calls=self._calls,
            restarts=sum(link.restarts for link in links),
        )

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            for server in self._config.mcp:
                self._start(server)
            task_status.started()
            await anyio.sleep_forever()

    async def reconfigure(self, tools: ToolsConfig) -> None:
        """Apply a reload's ``[tools]`` (see :func:`plan_reconfigure`); returns once removed
        and changed servers are stopped and new ones started (not yet connected)."""
        async with self._lock:
            plan = plan_reconfigure(self._config.mcp, tools.mcp)
            self._config = tools
            if self._tg is None:  # not running yet: run() starts what the config says
                return
            kept = {s.name for s in tools.mcp}
            for name in plan.stop:
                link = self._links.pop(name)
                link.scope.cancel()
                await link.stopped.wait()
                if name not in kept:
                    self._observe(ToolServerChanged(name, "removed", "", 0))
            for server in plan.retune:
                self._links[server.name].retune(server)
            for server in plan.start:
                self._start(server)
            self._links = {s.name: self._links[s.name] for s in tools.mcp}
            self._reindex()

    def _start(self, server: McpServer) -> None:
        assert self._tg is not None
        link = ServerLink(
            server,
            observe=self._observe,
            clock=self._clock,
            backoff=self._backoff,
            on_change=self._reindex,
            ping_every=self._ping_every,
        )
        self._links[server.name] = link
        what = f"{server.transport}: {server.command or _shown(server.url)}"
        self._observe(ToolServerChanged(server.name, "starting", what, 0))
        self._tg.start_soon(link.run, name=f"mcp server {server.name}")

    def _reindex(self) -> None:
        """The offered tools by name, servers in config order (a clash keeps the first)."""
        index: dict[str, ToolSpec] = {}
        for link in self._links.values():
            for name, spec in link.specs.items():
                if index.setdefault(name, spec) is not spec:
                    log.warning("tool name taken by another server", extra={"tool": name})
        self._index = index

    # -- the ToolBox port -------------------------------------------------------------------

    def offered(self, patterns: Sequence[str]) -> list[ToolSpec]:
        if not patterns:
            return []
        return [spec for name, spec in self._index.items() if matches(patterns, name)]

    def find(self, name: str) -> ToolSpec | None:
        return self._index.get(name)

    async def started(self) -> None:
        for link in list(self._links.values()):
            await link.tried.wait()

    async def call(
        self, spec: ToolSpec, arguments: Mapping[str, Any], *, conversation: str = ""
    ) -> ToolOutcome:
        # ``conversation``: the turn's (gateway.ports.ToolBox); a server's tools do not use it.
        started = self._clock()
        link = self._links.get(spec.server)
        outcome: Outcome = "unavailable"
        if link is None:
            result = ToolOutcome("The tool's server is no longer configured.", is_error=True)
        else:
            outcome, result = await link.call(spec.tool, arguments)
        self._calls += 1
        seconds = round(self._clock() - started, 3)
        self._observe(ToolCalled(spec.server, spec.tool, outcome, seconds))
        return result

    def status(self) -> list[ToolServerStatus]:
        return [link.status() for link in self._links.values()]
