"""What the MCP servers behind the agent's tools report (SPEC 15): one frozen class per event,
as in ``gateway.events`` (which unites them with the others into ``Event``). A leaf module:
it imports nothing of ours.

A server's state changes are logged once each (a server that stays down while it is retried
says nothing more until it is up again); a call is counted by server, tool and outcome.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar, Literal

DEBUG, INFO, WARNING = logging.DEBUG, logging.INFO, logging.WARNING


@dataclass(frozen=True, slots=True)
class ToolServerChanged:
    """An MCP server changed state: ``up`` (its tools are offered), ``starting`` (configured
    or reconfigured, not connected yet), ``down`` (its tools are not offered; it is retried
    with backoff; ``detail`` says why, once), ``removed`` (a reload dropped it)."""

    name: ClassVar[str] = "tool_server"
    server: str
    state: Literal["up", "starting", "down", "removed"]
    detail: str
    tools: int  # offered now

    @property
    def level(self) -> int:
        return WARNING if self.state == "down" else INFO


@dataclass(frozen=True, slots=True)
class ToolsListed:
    """A server's tools were listed: when it came up, after ``notifications/tools/list_changed``
    or after a reload changed its filters; ``tools``: how many are offered now."""

    name: ClassVar[str] = "tools_listed"
    level: ClassVar[int] = DEBUG
    server: str
    tools: int


@dataclass(frozen=True, slots=True)
class ToolCalled:
    """One ``tools/call`` ended: ``ok``, ``error`` (the tool's own ``isError``, the server
    refusing the call, or a reply that is no result), ``timeout`` (no answer within the
    server's ``timeout_s``), ``unavailable`` (the server was down, or died during the call).
    ``tool`` is the server's own name for it."""

    name: ClassVar[str] = "tool_called"
    server: str
    tool: str
    outcome: Literal["ok", "error", "timeout", "unavailable"]
    seconds: float

    @property
    def level(self) -> int:
        return DEBUG if self.outcome == "ok" else INFO
