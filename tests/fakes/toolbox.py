"""An in-process ``ToolBox`` (``gateway.ports``) for tests of the tool loop that need no MCP
server: tools are Python functions, every execution is counted, and a test can hold a call
open (to stop or crash the turn while it runs). The MCP client itself is tested against real
MCP servers (tests/test_mcp_toolbox.py)."""

from __future__ import annotations

import fnmatch
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio

from gateway.messages import ToolOutcome, ToolServerStatus, ToolSpec

SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}}


@dataclass
class Tool:
    """One tool: its spec and what a call returns (``run(arguments)``)."""

    spec: ToolSpec
    run: Callable[[Mapping[str, Any]], ToolOutcome]
    hold: anyio.Event | None = None  # set: a call waits for it before running


def tool(
    name: str,
    run: Callable[[Mapping[str, Any]], str] | None = None,
    *,
    read_only: bool = False,
    idempotent: bool = False,
    approval: bool = False,
    error: bool = False,
) -> Tool:
    """A tool named ``<server>__<tool>`` (``name``) returning ``run(arguments)`` (default: an
    echo of the arguments)."""
    server, _, own = name.partition("__")
    spec = ToolSpec(name, f"the {own} tool", SCHEMA, server, own, read_only, idempotent, approval)

    def answer(arguments: Mapping[str, Any]) -> ToolOutcome:
        text = run(arguments) if run is not None else f"{own}({dict(arguments)})"
        return ToolOutcome(text, is_error=error)

    return Tool(spec, answer)


@dataclass
class RecordingToolBox:
    tools: dict[str, Tool] = field(default_factory=dict)
    executed: Counter[str] = field(default_factory=Counter)  # by tool name
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    entered: anyio.Event = field(default_factory=anyio.Event)  # a call began running
    #: given: a server on its first try until it is set (``started`` waits for it)
    starting: anyio.Event | None = None
    waited: anyio.Event = field(default_factory=anyio.Event)  # a turn asked for ``started``

    def add(self, *tools: Tool) -> RecordingToolBox:
        for t in tools:
            self.tools[t.spec.name] = t
        return self

    def offered(self, patterns: Sequence[str]) -> list[ToolSpec]:
        return [
            t.spec
            for name, t in self.tools.items()
            if any(fnmatch.fnmatchcase(name, p) for p in patterns)
        ]

    def find(self, name: str) -> ToolSpec | None:
        found = self.tools.get(name)
        return found.spec if found else None

    async def started(self) -> None:
        self.waited.set()
        if self.starting is not None:
            await self.starting.wait()

    async def call(
        self, spec: ToolSpec, arguments: Mapping[str, Any], *, conversation: str = ""
    ) -> ToolOutcome:
        found = self.tools[spec.name]
        self.entered.set()
        if found.hold is not None:
            await found.hold.wait()
        self.executed[spec.name] += 1
        self.calls.append((spec.name, dict(arguments)))
        return found.run(arguments)

    async def run(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """As the MCP toolbox runs beside the gateway: nothing to connect here."""
        task_status.started()
        await anyio.sleep_forever()

    async def reconfigure(self, tools: object) -> None:
        pass

    def status(self) -> list[ToolServerStatus]:
        servers = sorted({t.spec.server for t in self.tools.values()})
        return [
            ToolServerStatus(s, "up", sum(t.spec.server == s for t in self.tools.values()))
            for s in servers
        ]
