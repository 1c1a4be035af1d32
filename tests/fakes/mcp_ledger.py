"""An MCP server (the official SDK's ``MCPServer``, over stdio) whose tools write down every run
in a file outside the gateway, so that a test can count how often a tool took effect across
gateway crashes, restarts and nodes: the gateway's own store cannot witness what it may have
lost.

``python -m tests.fakes.mcp_ledger LEDGER``: each run of a tool appends one line,
``<tool> <text>``, to the file LEDGER, written and closed before the tool answers (a SIGKILL of
the gateway after that leaves the line; several servers, one per node, may share the file).

- ``send``: acts, and is annotated neither read-only nor idempotent: a call cut off by a crash
  must not run again.
- ``lookup``: read-only: a call cut off by a crash may run again, once.

Either, called with ``crash = true``, SIGKILLs the gateway (its tether's parent) before it
answers the first run of its text: the run happened and the gateway never learnt its result
(a later run of the same text answers, so a gateway that wrongly runs it again lives to show it).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

ROOT = Path(__file__).resolve().parents[2]  # where ``-m tests.fakes.mcp_ledger`` is found
ACTS = ToolAnnotations(read_only_hint=False, idempotent_hint=False, destructive_hint=True)


def build(ledger: Path) -> MCPServer:
    server = MCPServer("ledger", version="1.0", log_level="ERROR")

    def run(tool: str, text: str, crash: bool) -> None:
        first = f"{tool} {text}" not in runs(ledger)
        with ledger.open("a") as f:
            f.write(f"{tool} {text}\n")
        if crash and first:
            os.kill(gateway(), signal.SIGKILL)

    @server.tool(annotations=ACTS)
    def send(text: str, crash: bool = False) -> str:
        """Send the text somewhere (it takes effect each time it runs)."""
        run("send", text, crash)
        return f"sent {text}"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def lookup(text: str, crash: bool = False) -> str:
        """Look the text up (reads only)."""
        run("lookup", text, crash)
        return f"found {text}"

    return server


def gateway() -> int:
    """The gateway's pid: the parent of this server's tether (``agent/tools/_tether.py``)."""
    parent = os.getppid()
    if b"_tether.py" not in Path(f"/proc/{parent}/cmdline").read_bytes():
        return parent
    stat = Path(f"/proc/{parent}/stat").read_bytes()
    return int(stat.rsplit(b")", 1)[1].split()[1])


def runs(ledger: Path) -> list[str]:
    """The runs written down so far, in order (``<tool> <text>``)."""
    return ledger.read_text().splitlines() if ledger.exists() else []


def stdio_server(name: str, ledger: Path, approval: str) -> str:
    """A ``[[tools.mcp]]`` entry that runs this server over stdio, writing to ``ledger``."""
    args = ", ".join(f'"{a}"' for a in ("-m", "tests.fakes.mcp_ledger", str(ledger)))
    return (
        f'[[tools.mcp]]\nname = "{name}"\ncommand = "{sys.executable}"\nargs = [{args}]\n'
        f'cwd = "{ROOT}"\napproval = "{approval}"\n'
    )


if __name__ == "__main__":
    build(Path(sys.argv[1])).run("stdio")
