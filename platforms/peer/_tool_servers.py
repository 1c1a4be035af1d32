"""The MCP tool servers (SPEC 15) as the peer listener shows them: in ``/readyz`` and at
``GET /api/admin/tools`` (the console's Tools view).

``/readyz`` is a probe, open to anyone who reaches the listener: it lists each server's name,
state and number of tools, and the detail (why a server is down: an OS error naming a path, a
line of the child's stderr, the server's own words) only to a request with a peer token (or,
without tokens, a local one). A server that is down never makes ``/readyz`` 503: its tools are
not offered, and a turn goes on without them. The admin API is an operator's: it also names
the tools each server offers now.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gateway.messages import ToolServerStatus

#: Every configured server's state now (``gateway.ports.ToolBox.status``).
ToolStates = Callable[[], list[ToolServerStatus]]

_STATE: dict[str, Any] = {
    "enum": ["starting", "up", "down"],
    "description": "starting: not answered yet; down: its tools are not offered (it is"
    " started again with a backoff).",
}
_DETAIL: dict[str, Any] = {
    "type": "string",
    "description": "What it is (up), or why it is down and when it is tried again.",
}

READYZ_TOOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["name", "state", "tools"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string"},
        "state": _STATE,
        "tools": {"type": "integer", "description": "Tools offered now."},
        "detail": {**_DETAIL, "description": "Only with a peer token (or, without tokens, local)."},
    },
}

ADMIN_TOOLS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["servers"],
    "properties": {
        "servers": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["name", "state", "tools", "detail"],
                "properties": {
                    "name": {"type": "string"},
                    "state": _STATE,
                    "tools": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "The tools offered now, as the model knows them"
                        " (<server>__<tool>).",
                    },
                    "detail": _DETAIL,
                },
            },
        },
    },
}


def readyz_tools(servers: Sequence[ToolServerStatus], *, detail: bool) -> list[dict[str, Any]]:
    """``/readyz``'s ``tools``: the detail only when ``detail`` (see the module docstring)."""
    shown: list[dict[str, Any]] = []
    for s in servers:
        entry: dict[str, Any] = {"name": s.name, "state": s.state, "tools": s.tools}
        if detail:
            entry["detail"] = s.detail
        shown.append(entry)
    return shown


def admin_tools(servers: Sequence[ToolServerStatus]) -> dict[str, Any]:
    """``GET /api/admin/tools``."""
    return {
        "servers": [
            {"name": s.name, "state": s.state, "tools": list(s.names), "detail": s.detail}
            for s in servers
        ]
    }
