"""An MCP server over stdio written by hand, for what the SDK's servers never send.

``python -m tests.fakes.mcp_raw MODE``, newline-delimited JSON-RPC on stdin and stdout:

- ``garbage``: answers ``initialize`` with a line that is no JSON, then a reply whose result
  is no ``InitializeResult``;
- ``odd``: a proper handshake; ``tools/list`` in two pages, with a tool whose input schema
  is a string schema and one whose schema is no object at all beside two good ones;
  ``tools/call`` of ``good`` answers text, of ``nonsense`` a line that is no JSON and then a
  result whose content is no list.
"""

from __future__ import annotations

import json
import sys
from typing import Any

PAGES: dict[str | None, dict[str, Any]] = {
    None: {
        "tools": [
            {"name": "good", "inputSchema": {"type": "object"}},
            {"name": "stringly", "inputSchema": {"type": "string"}},
        ],
        "nextCursor": "page-2",
    },
    "page-2": {
        "tools": [
            {"name": "shapeless", "inputSchema": "anything"},
            {"name": "nonsense", "inputSchema": {"type": "object", "properties": {}}},
        ]
    },
}


def _say(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _answer(mode: str, request: dict[str, Any]) -> None:
    method, rid = request.get("method"), request.get("id")
    params = request.get("params") or {}
    if rid is None:  # a notification
        return
    if method == "initialize":
        if mode == "garbage":
            sys.stdout.write("hello, I am not JSON-RPC\n")
            _say({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": 7}})
            return
        result: dict[str, Any] = {
            "protocolVersion": params.get("protocolVersion", "2025-11-25"),
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "raw", "version": "0"},
        }
    elif method == "tools/list":
        result = PAGES[params.get("cursor")]
    elif method == "tools/call" and params.get("name") == "good":
        result = {"content": [{"type": "text", "text": "fine"}]}
    elif method == "tools/call":
        sys.stdout.write("{not json\n")
        result = {"content": "not a list"}
    elif method == "ping":
        result = {}
    else:
        _say({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no"}})
        return
    _say({"jsonrpc": "2.0", "id": rid, "result": result})


def main(mode: str) -> None:
    for line in sys.stdin:
        if line.strip():
            _answer(mode, json.loads(line))


if __name__ == "__main__":
    main(sys.argv[1])
