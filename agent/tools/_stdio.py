"""A stdio MCP server's process and its newline-delimited JSON-RPC: the transport under the
SDK's session, in place of the SDK's ``stdio_client``, whose reader costs a 10 MB result
2.7 s of the gateway's CPU and grows with the square of the size (each 64 KiB read joins and
splits the whole line so far: 50 MB would be a minute), holds a line of any size, and logs a
traceback for every line that is no JSON-RPC (a server that prints its own logs to stdout).

What it keeps of the SDK's: the child's environment is exactly ``get_default_environment()``
(``PATH``, ``HOME``, ``USER``, ...) plus the config's ``env``, never the gateway's own
variables; the child gets a process group of its own, and shutdown follows the MCP spec (stdin
closed, then SIGTERM to the group, then SIGKILL, every wait bounded, under a shield so a
cancelled caller leaks no process).

What it adds to that: the group is ended at every stop, also when the server exited on its
stdin's close (what it started, a browser or a language server, would live on: the SDK ends the
group only when the server does not exit); and the server runs under a tether
(``agent.tools._tether``), which ends the group when the gateway is gone without a stop, killed
by SIGKILL or the OOM killer.

What it does otherwise: the child's stderr is not the gateway's (where the gateway's JSON log
lines go): each of its lines is logged at debug level, named by the server, and the last one
says why a child that exited did (``ModuleNotFoundError: ...``).

Reading is linear: lines are cut out of each read as it comes, and a line longer than
:data:`MAX_LINE` ends the connection (the reply it carried is lost either way; the server is
started again). A line that is no JSON-RPC is counted and dropped, without a traceback.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import anyio
import mcp_types as types
from anyio.abc import Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.stdio import get_default_environment
from mcp.os.posix.utilities import terminate_posix_process_tree
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from gateway.config_tools import McpServer

log = logging.getLogger(__name__)

STDERR_LINE = 300  # characters of a stderr line kept
MAX_LINE = 32 << 20  # bytes of one message (a 10 MB str result is 20 MB with its structured copy)
EXIT_GRACE_S = 2.0  # after stdin closes, before SIGTERM (the spec's order)
KILL_GRACE_S = 2.0  # after SIGTERM, before SIGKILL
_POLL_S = 0.01
#: How the server is started: under its tether, in isolated mode (``agent/tools/_tether.py``).
TETHER = (sys.executable, "-I", "-S", str(Path(__file__).with_name("_tether.py")))

Streams = tuple[
    MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]
]


@asynccontextmanager
async def open_stdio(
    server: McpServer, *, malformed: Callable[[], None], ended: Callable[[str], None]
) -> AsyncIterator[Streams]:
    """The child's (read, write) streams while it runs. ``malformed`` is called for each line
    that is no JSON-RPC; ``ended`` once, with why the child's output ended."""
    process = await anyio.open_process(
        [*TETHER, str(os.getpid()), server.command, *server.args],
        env=get_default_environment() | dict(server.env),
        cwd=server.cwd or None,
        start_new_session=True,
    )
    # From the spawn on, the finally below stops the child, whatever happens.
    to_session, from_child = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    to_child, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    try:
        async with anyio.create_task_group() as tg:
            said: deque[str] = deque(maxlen=1)  # the child's last line on stderr
            tg.start_soon(_read, process, to_session, malformed, ended, said)
            tg.start_soon(_write, process, from_session)
            tg.start_soon(_stderr, process, server.name, said)
            try:
                yield from_child, to_child
            finally:
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(process)
            for stream in (to_session, from_child, to_child, from_session):
                await stream.aclose()


async def _read(
    process: Process,
    send: MemoryObjectSendStream[SessionMessage | Exception],
    malformed: Callable[[], None],
    ended: Callable[[str], None],
    said: deque[str],
) -> None:
    assert process.stdout is not None
    line = bytearray()
    async with send:
        try:
            async for chunk in process.stdout:
                start = 0
                while start <= len(chunk):
                    end = chunk.find(b"\n", start)
                    line += chunk[start : len(chunk) if end < 0 else end]
                    if len(line) > MAX_LINE:
                        ended(f"the server sent a message over {MAX_LINE >> 20} MiB")
                        return
                    if end < 0:
                        break
                    start = end + 1
                    if line and not line.isspace():
                        message = _parse(line)
                        if message is None:
                            malformed()
                        else:
                            await send.send(message)
                    line.clear()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            return  # the session is gone: we are shutting down
        ended(await _exited(process, said))


def _parse(line: bytearray) -> SessionMessage | None:
    try:
        return SessionMessage(types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except ValidationError:
        return None


async def _exited(process: Process, said: deque[str]) -> str:
    """Why the output ended: the exit status if the child is gone already, and the last line
    it wrote on stderr (a moment is left for it to arrive)."""
    await _gone(process, 0.5)
    code = process.returncode
    if code is None:
        why = "the server closed its output"
    elif code < 0:
        why = f"the server's process was killed ({signal.Signals(-code).name})"
    else:
        why = f"the server's process exited with code {code}"
    return f"{why}: {said[-1]}" if said else why


async def _stderr(process: Process, server: str, said: deque[str]) -> None:
    """The child's stderr, line by line: logged at debug level, the last one kept (cut to
    :data:`STDERR_LINE` characters: a line may be of any length, what is kept is not)."""
    assert process.stderr is not None
    line = bytearray()
    with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        async for chunk in process.stderr:
            start = 0
            while (end := chunk.find(b"\n", start)) >= 0:
                _note(server, said, line + chunk[start:end])
                line.clear()
                start = end + 1
            if len(line) < STDERR_LINE:
                line += chunk[start : start + STDERR_LINE]
    if line:
        _note(server, said, line)


def _note(server: str, said: deque[str], line: bytearray) -> None:
    text = line[:STDERR_LINE].decode(errors="replace").strip()
    if text:
        said.append(text)
        log.debug("tool server stderr", extra={"server": server, "line": text})


async def _write(process: Process, receive: MemoryObjectReceiveStream[SessionMessage]) -> None:
    assert process.stdin is not None
    with suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        async with receive:
            async for message in receive:
                text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await process.stdin.send(text.encode() + b"\n")


async def _stop(process: Process) -> None:
    """The spec's shutdown: stdin closed, a grace, then the process group terminated (also
    when the server exited in the grace: what it started is in the group). Its stdout is
    closed too: a child blocked writing what nobody reads any more ends at once."""
    assert process.stdin is not None and process.stdout is not None
    with suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await process.stdin.aclose()
        await process.stdout.aclose()
    await _gone(process, EXIT_GRACE_S)
    await terminate_posix_process_tree(process, KILL_GRACE_S)  # at once when the group is gone
    await _gone(process, KILL_GRACE_S)
    with suppress(OSError), anyio.move_on_after(KILL_GRACE_S):
        await process.aclose()


async def _gone(process: Process, within: float) -> bool:
    """Whether the process exited within ``within`` seconds (``returncode`` polled:
    ``wait()`` also waits for its pipes, which a grandchild may hold open)."""
    with anyio.move_on_after(within):
        while process.returncode is None:  # noqa: ASYNC110 (no event tells of the exit)
            await anyio.sleep(_POLL_S)
    return process.returncode is not None
