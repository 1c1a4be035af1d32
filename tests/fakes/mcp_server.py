"""A test MCP server built with the official SDK's ``MCPServer`` (FastMCP, as mcp 2 names it).

Over stdio: ``python -m tests.fakes.mcp_server``. Over streamable HTTP on 127.0.0.1:
``python -m tests.fakes.mcp_server --http [PORT]`` (port 0 or none: any free port), which
prints ``port <n>`` once it listens, so a test can stop it and start it again on the same port
(the endpoint going away and coming back).

Its tools cover what a client must handle: annotations (read-only, idempotent, "not
destructive" yet acting), names a provider refuses (70 characters, spaces), a tool that exits
the process mid-call, one that hangs, one that returns 10 MB, images, structured content only,
a tool error, the child's environment and the request's headers, and one that adds a tool
and sends ``notifications/tools/list_changed``.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ImageContent, TextContent, ToolAnnotations

# A 1x1 transparent PNG.
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
LONG_NAME = "t" * 70
SPACED_NAME = "with spaces"


def build() -> MCPServer:
    server = MCPServer("fake-tools", version="1.0", log_level="ERROR")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def echo(text: str) -> str:
        """Say the text back."""
        return text

    @server.tool(annotations=ToolAnnotations(idempotent_hint=True))
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @server.tool(annotations=ToolAnnotations(destructive_hint=False))
    def append(text: str) -> str:
        """Add a line somewhere (not destructive, but not read-only either)."""
        return f"appended {text}"

    @server.tool()
    def environment() -> str:
        """The server process's environment variables, as JSON."""
        return json.dumps(dict(os.environ))

    @server.tool()
    def header(name: str, ctx: Context) -> str:
        """One header of the HTTP request that called this tool."""
        return (ctx.headers or {}).get(name.lower(), "")

    @server.tool()
    def exit_now() -> str:
        """Exit the server process in the middle of the call."""
        os._exit(3)

    @server.tool()
    async def sleep(seconds: float) -> str:
        """Answer after ``seconds``."""
        await anyio.sleep(seconds)
        return "slept"

    @server.tool(structured_output=False)  # the text once: a message of ``size`` bytes
    def big(size: int) -> str:
        """``size`` characters of text."""
        return "x" * size

    @server.tool()
    def picture() -> CallToolResult:
        """A caption and a tiny PNG."""
        data = base64.b64encode(PIXEL).decode()
        return CallToolResult(
            content=[
                TextContent(text="a dot"),
                ImageContent(data=data, mime_type="image/png"),
            ]
        )

    @server.tool()
    def structured() -> CallToolResult:
        """Structured content and no text block."""
        return CallToolResult(content=[], structured_content={"answer": 42})

    @server.tool()
    def fail() -> str:
        """A tool error (``isError``)."""
        raise ToolError("it broke")

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Add the tool ``late`` and tell the client its list changed."""

        def late() -> str:
            """Added while the server ran."""
            return "late"

        server.add_tool(late)
        await ctx.session.send_tool_list_changed()
        return "grown"

    def long_named() -> str:
        """A tool whose name no provider accepts as it is."""
        return "long"

    def spaced() -> str:
        """A tool whose name has spaces."""
        return "spaced"

    server.add_tool(long_named, name=LONG_NAME)
    server.add_tool(spaced, name=SPACED_NAME)
    return server


async def _serve_http(port: int) -> None:
    import uvicorn

    server = build()
    app = server.streamable_http_app()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    print(f"port {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve(sockets=[sock])


def stdio_command() -> tuple[str, tuple[str, ...]]:
    """``command`` and ``args`` of a ``[[tools.mcp]]`` entry that runs this server."""
    return sys.executable, ("-m", "tests.fakes.mcp_server")


@asynccontextmanager
async def open_http_server(port: int = 0) -> AsyncIterator[tuple[str, Process]]:
    """This server over streamable HTTP in a child process: its URL and the process (kill
    it to make the endpoint go away). Killed on exit."""
    process = await anyio.open_process(
        [sys.executable, "-m", "tests.fakes.mcp_server", "--http", str(port)],
        stdin=None,
        stderr=None,
    )
    try:
        assert process.stdout is not None
        with anyio.fail_after(20):
            async for chunk in TextReceiveStream(process.stdout):
                if chunk.startswith("port "):
                    port = int(chunk.split()[1])
                    break
        yield f"http://127.0.0.1:{port}/mcp", process
    finally:
        if process.returncode is None:
            process.kill()
        with anyio.CancelScope(shield=True):
            await process.wait()
            await process.aclose()


def main(argv: list[str]) -> None:
    if argv and argv[0] == "--http":
        anyio.run(_serve_http, int(argv[1]) if len(argv) > 1 else 0)
    else:
        build().run("stdio")


if __name__ == "__main__":
    main(sys.argv[1:])
