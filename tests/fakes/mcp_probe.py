"""An MCP server over stdio, built with the SDK, that tells what its process inherited from
the gateway (security review 2026-12-05): ``python -m tests.fakes.mcp_probe [--helper]``.

Its one tool, ``process``, answers JSON: the targets of its open file descriptors (beyond 0-2),
its working directory, its process group and session against its own pid and its parent's.
With ``--helper`` it first starts a helper process of its own (``sleep``), as servers that
drive a browser or a language server do, and names the helper's pid in the answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from mcp.server.mcpserver import MCPServer


def _descriptors() -> list[str]:
    found = []
    for fd in sorted(os.listdir("/proc/self/fd"), key=int):
        if int(fd) > 2:
            try:
                found.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:  # the listing's own descriptor, closed meanwhile
                continue
    return found


def build(helper: int | None) -> MCPServer:
    server = MCPServer("probe", version="1.0", log_level="ERROR")

    @server.tool()
    def process() -> str:
        """What this process inherited."""
        return json.dumps(
            {
                "fds": _descriptors(),
                "cwd": os.getcwd(),
                "pid": os.getpid(),
                "pgid": os.getpgid(0),
                "sid": os.getsid(0),
                "ppid": os.getppid(),
                "helper": helper,
            }
        )

    return server


def main(argv: list[str]) -> None:
    helper = None
    if "--helper" in argv:  # deliberately outlives this process unless its group is ended
        helper = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL).pid
    build(helper).run("stdio")


if __name__ == "__main__":
    main(sys.argv[1:])
