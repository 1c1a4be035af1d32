"""What tool calls cost the gateway. A big result: one call of the test MCP server's ``big``
tool (``--mb`` megabytes of text), through McpToolBox over stdio (agent/tools/_stdio.py) and
over streamable HTTP, and, for comparison, through the SDK's own ``stdio_client`` and
``ClientSession.call_tool``. Per path: the call's wall time, the gateway process's CPU time
during it, the longest the event loop went without running a 5 ms ticker, and the resident
memory high-water mark after it (each path in a fresh process). Small calls: ``--calls`` calls
of ``echo`` in a row through the box, per call: the median wall time and the gateway's CPU.

    .venv/bin/python -m tests.bench.tool_results [--mb 10] [--calls 300]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

import anyio

from tests.fakes.mcp_server import open_http_server, stdio_command

PATHS = ("box-stdio", "box-http", "sdk-stdio")


async def _measure(call: Callable[[], Awaitable[int]]) -> str:
    gaps: list[float] = []

    async def ticker() -> None:
        last = time.perf_counter()
        while True:
            await anyio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        cpu, wall = time.process_time(), time.perf_counter()
        kept = await call()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        tg.cancel_scope.cancel()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    gap = max(gaps, default=0.0) * 1000
    return f"wall {wall:.2f} s  cpu {cpu:.2f} s  longest stall {gap:.0f} ms  maxrss {rss:.0f} MB  kept {kept} chars"


async def _box(path: str, size: int, calls: int = 0) -> str:
    from agent.tools.mcp import McpToolBox
    from gateway.config_tools import McpServer, ToolsConfig
    from gateway.events_mcp import ToolServerChanged

    async def run(server: McpServer) -> str:
        ready = anyio.Event()

        def observe(event: object) -> None:
            if isinstance(event, ToolServerChanged) and event.state == "up":
                ready.set()

        box = McpToolBox(ToolsConfig(mcp=(server,)), observe=observe)
        async with anyio.create_task_group() as tg:
            await tg.start(box.run)
            await ready.wait()
            spec, echo = box.find("s__big"), box.find("s__echo")
            assert spec is not None and echo is not None
            if size:
                line = await _measure(lambda: _text(box.call(spec, {"size": size})))
            else:  # small calls
                walls = []
                cpu = time.process_time()
                for _ in range(calls):
                    wall = time.perf_counter()
                    await box.call(echo, {"text": "hello"})
                    walls.append(time.perf_counter() - wall)
                cpu = (time.process_time() - cpu) / calls
                walls.sort()
                line = f"median {walls[calls // 2] * 1000:.2f} ms  cpu {cpu * 1000:.2f} ms a call"
            tg.cancel_scope.cancel()
        return line

    if path == "box-stdio":
        command, args = stdio_command()
        return await run(McpServer(name="s", command=command, args=args))
    async with open_http_server() as (url, _):
        return await run(McpServer(name="s", url=url))


async def _text(outcome: Awaitable[object]) -> int:
    return len(getattr(await outcome, "text", ""))


async def _sdk(size: int) -> str:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.types import TextContent

    command, args = stdio_command()
    params = StdioServerParameters(command=command, args=list(args))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.list_tools()

        async def call() -> int:
            result = await session.call_tool("big", {"size": size})
            return sum(len(b.text) for b in result.content if isinstance(b, TextContent))

        return await _measure(call)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=10.0)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--path", choices=PATHS)
    args = parser.parse_args()
    size = int(args.mb * 1_000_000)
    if args.path and args.path.startswith("box") and args.calls and not size:
        print(f"{args.path:10} {anyio.run(_box, args.path, 0, args.calls)}")
        return
    if args.path:  # one path, in this process
        line = (
            anyio.run(_sdk, size) if args.path == "sdk-stdio" else anyio.run(_box, args.path, size)
        )
        print(f"{args.path:10} {line}")
        return
    me = [sys.executable, "-m", "tests.bench.tool_results"]
    print(f"one call returning {args.mb:g} MB of text", flush=True)
    for path in PATHS:
        subprocess.run([*me, "--mb", str(args.mb), "--path", path], check=True)
    print(f"{args.calls} small calls (echo) in a row", flush=True)
    for path in PATHS[:2]:
        subprocess.run([*me, "--mb", "0", "--calls", str(args.calls), "--path", path], check=True)


if __name__ == "__main__":
    main()
